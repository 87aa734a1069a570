"""Verify scenario `default`: REAL state of the test hosts after converge + idempotence.

Values come from molecule.yml's inventory (tests/molecule_support/hostcheck.scenario_vars), the state
from the hosts themselves (files, /proc, sockets, HTTP from inside).
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


from tests.molecule_support import hostcheck  # noqa: E402 - importable once sys.path has the repository root

V = hostcheck.scenario_vars()
USER = V["sglang_install_user"]
VERSION = V["sglang_install_version"]
KEY = V["sglang_server_api_key"]
PORT = V["sglang_server_port"]
# Role defaults that this scenario does not override.
BASE = "/opt/sglang"
VENV = f"{BASE}/venv-{VERSION}"
LOG_DIR, RUN_DIR, CONFIG = hostcheck.LOG_DIR, hostcheck.RUN_DIR, hostcheck.CONFIG
EMULATOR = f"{VENV}/bin/sglang-emulator"  # the emulator package, installed into SGLang's venv (prepare.yml)
BASE_URL = f"http://127.0.0.1:{PORT}"
# The host whose nvidia-smi is tests/gpu/fake_nvidia_smi.py (molecule.yml's group eagle_fake_gpu, prepare.yml), the
# capture it answers `-q -x` from, and the verdict of the role's fitness check that converge.yml keeps.
SCENARIO = yaml.safe_load((hostcheck.REPO / "molecule" / "default" / "molecule.yml").read_text())
FAKE_GPU_HOSTS = {p["name"] for p in SCENARIO["platforms"] if "eagle_fake_gpu" in p.get("groups", [])}
CAPTURE = ET.parse(hostcheck.REPO / "tests" / "data" / "nvidia-smi" / "h100-80gb-hbm3" / "q.xml").getroot()
FAKE_SMI = "/opt/eagle-fake-gpu/tests/gpu/fake_nvidia_smi.py"
VERDICT = "/opt/eagle-fake-gpu/fitness.json"
# What this container adds to the healthy capture, as warnings: the venv has no torch (the emulator serves), and the
# kernel log is not the container's to read.
CONTAINER_FINDINGS = {"torch_cuda_unknown", "kernel_log_unreadable"}


def test_own_hostname(host):
    assert host.check_output("hostname") == host.backend.name


def test_service_user_is_an_unprivileged_system_account(host):
    user = host.user(USER)
    assert user.exists
    assert 0 < user.uid < 1000
    assert user.shell == "/usr/sbin/nologin"
    assert user.group == V["sglang_install_group"]


def test_venv_holds_the_pinned_sglang(host):
    version = host.check_output(
        f"{VENV}/bin/python -c 'import importlib.metadata as m; print(m.version(\"sglang\"))'")
    assert version == VERSION
    link = host.file(f"{BASE}/venv")
    assert link.is_symlink
    assert link.linked_to == VENV
    assert host.file(f"{VENV}/lib/python3.11/site-packages/sglang-{VERSION}.dist-info/METADATA").exists


def test_eagle_worker_v2_init_starts_with_the_early_init_assignments(host):
    path = host.check_output(
        f"{VENV}/bin/python -c 'import importlib.util as u; print(u.find_spec(\"sglang\").submodule_search_locations[0])'")
    source = host.file(f"{path}/srt/speculative/eagle_worker_v2.py").content_string
    body = hostcheck.early_init_statements(source)
    first = hostcheck.self_assignment(body[0])
    assert first == ("spec_disable_batch_threshold", 0), f"first statement of EAGLEWorkerV2.__init__: {first}"
    # The original body follows: the parent's __init__ (or another call) comes after the patch, not before.
    assert len(body) > 1
    assert "# BEGIN eagle-deploy early-init patch for EAGLEWorkerV2.__init__" in source


def test_config_file_is_private_to_the_service_user_and_holds_the_key(host):
    config = host.file(CONFIG)
    assert config.exists
    assert config.mode == 0o600
    assert config.user == USER
    assert config.group == V["sglang_install_group"]
    assert KEY in config.content_string


def test_no_api_key_on_any_command_line(procs):
    assert procs, "no processes read"
    leaking = [p for p in procs if any(KEY in a for a in p["argv"])]
    assert leaking == []


def test_server_tree_runs_as_the_service_user(state, procs):
    tree = hostcheck.server_tree(procs, state["pid"])
    assert len(tree) >= 3, f"leader + scheduler + detokenizer expected: {tree}"
    assert {p["user"] for p in tree} == {USER}
    leader = next(p for p in tree if p["pid"] == state["pid"])
    assert leader["start_time"] == state["start_time"]
    assert leader["argv"] == state["cmdline"]
    assert EMULATOR in " ".join(leader["argv"])
    assert state["user"] == USER


def test_only_one_server_tree(state, procs):
    servers = [p for p in procs if any(EMULATOR in a or "sglang.launch_server" in a for a in p["argv"])]
    assert servers
    tree_pids = {p["pid"] for p in hostcheck.server_tree(procs, state["pid"])}
    assert {p["pid"] for p in servers} <= tree_pids
    assert not [p for p in procs if p["state"] == "Z"], "zombies left"


def test_port_is_listening(host):
    assert host.socket(f"tcp://127.0.0.1:{PORT}").is_listening


def test_health_answers_200(host):
    # Like SGLang, /health* needs no key (monitoring); the key guards the model endpoints.
    assert hostcheck.http_status(host, f"{BASE_URL}/health")[0] == 200
    assert hostcheck.http_status(host, f"{BASE_URL}/health_generate")[0] == 200


def test_generate_needs_the_key_and_answers_text(host):
    request = {"text": "Hello", "sampling_params": {"max_new_tokens": 4}}
    code, text = hostcheck.http_status(host, f"{BASE_URL}/generate", KEY, "POST", request)
    assert code == 200
    assert '"text"' in text
    assert hostcheck.http_status(host, f"{BASE_URL}/generate", None, "POST", request)[0] == 401
    assert hostcheck.http_status(host, f"{BASE_URL}/generate", KEY + "-wrong", "POST", request)[0] == 401


def test_log_symlink_points_at_the_only_attempt(host, state):
    link = host.file(f"{LOG_DIR}/sglang.log")
    assert link.is_symlink
    assert link.linked_to == f"{LOG_DIR}/sglang_r{state['attempt']}.log"
    # converge started the server once; the idempotence run kept it, and side_effect.yml's forced restart on an unfit
    # GPU (eagle-default-1) was refused before anything was stopped: attempt 1, no other attempt file.
    assert state["attempt"] == 1
    attempts = sorted(f for f in host.file(LOG_DIR).listdir() if re.fullmatch(r"sglang_r\d+\.log", f))
    assert attempts == ["sglang_r1.log"]
    log = host.file(state["log_path"])
    assert log.user == USER
    assert log.content_string.startswith("[EMULATOR]")


def test_only_the_fake_gpu_host_has_an_nvidia_smi(host):
    assert FAKE_GPU_HOSTS == {"eagle-default-1"}
    smi = host.run("command -v nvidia-smi")
    if host.backend.name in FAKE_GPU_HOSTS:
        assert smi.stdout.strip() == "/usr/local/bin/nvidia-smi"
        assert host.file("/usr/local/bin/nvidia-smi").linked_to == FAKE_SMI
    else:
        assert smi.rc != 0, smi.stdout


def test_fitness_verdict_is_the_one_the_capture_implies(host):
    verdict = host.file(VERDICT)
    if host.backend.name not in FAKE_GPU_HOSTS:
        # sglang_server_gpu_expected false: neither the GPU checks nor the fitness check ran.
        assert not verdict.exists
        return
    result = json.loads(verdict.content_string)
    gpu = CAPTURE.find("gpu")
    assert result["checked"] is True
    assert result["fit"] is True
    assert not result.get("failed")
    assert result["driver_version"] == CAPTURE.findtext("driver_version") == "580.159.04"
    assert result["cuda_version"] == CAPTURE.findtext("cuda_version")
    assert result["gpus"] == [{"index": 0, "uuid": gpu.findtext("uuid"), "name": gpu.findtext("product_name")}]
    assert result["gpus"][0]["uuid"] == "GPU-767d6e6e-c74d-df8f-7833-989f8fcf6618"
    # A healthy capture: no fatal finding, none about the GPU; the warnings are the container's.
    assert [f for f in result["findings"] if f["severity"] == "fatal"] == []
    assert {f["id"] for f in result["findings"]} <= CONTAINER_FINDINGS, result["findings"]
    assert all(f.get("gpu") is None and f.get("uuid") is None for f in result["findings"]), result["findings"]
