"""The roles usable alone: a user's own play that imports sglang_install, sglang_patch and sglang_server with only their
documented variables (each role's meta/argument_specs.yml) converges on this machine, the server healthy, and its
re-run changes nothing.

The play is written into a tmp dir, as a user would write it (no playbooks/ of this project, no vars_files of it); the
server is the SGLang EMULATOR given as sglang_server_command, as inventory/local does; the roles come from ansible.cfg's
roles_path. Its own prefix (a tmp dir) and a free port; the server is stopped at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest
import yaml

from ansible_run import free_port, run_module

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
API_KEY = "roles-alone-test-key"
ROLES = ("sglang_install", "sglang_patch", "sglang_server")


def documented(role):
    """The variables of every entry point of ``role``'s meta/argument_specs.yml."""
    with open(os.path.join(REPO, "roles", role, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        specs = yaml.safe_load(handle)["argument_specs"]
    return {name for spec in specs.values() for name in (spec.get("options") or {})}


def emulator_wheel():
    """The emulator's wheel, built from tests/emulator into .cache as inventory/local builds it."""
    out = subprocess.run([sys.executable, os.path.join(REPO, "tests", "emulator", "_build", "wheel_backend.py"),
                          os.path.join(REPO, ".cache", "emulator-wheels")],
                         capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip().splitlines()[-1]


def play_vars(prefix, port, wheel):
    """What a user sets: the documented variables of the three roles, nothing else."""
    models = os.path.join(REPO, "tests", "emulator", "models")
    return {
        "sglang_install_version": "0.5.23",
        "sglang_install_user": "sglang",
        "sglang_install_group": "sglang",
        "sglang_install_home": "/var/lib/sglang",
        "sglang_install_no_deps": True,
        "sglang_install_python": "/usr/bin/python3",
        "sglang_install_no_index": False,
        "sglang_install_find_links": [os.path.join(REPO, ".cache", "sglang-wheels")],
        "sglang_install_extra_packages": ["sglang-emulator @ file://%s" % wheel],
        "sglang_install_base_dir": prefix + "/opt/sglang",
        "sglang_install_model_dir": prefix + "/data/models",
        "sglang_install_log_dir": prefix + "/var/log/sglang",
        "sglang_install_run_dir": prefix + "/var/lib/eagle-deploy/run",
        "sglang_install_config_dir": prefix + "/etc/sglang",
        "sglang_patch_venv": "{{ sglang_install_venv }}",
        "sglang_server_python": "{{ sglang_install_venv }}/bin/python",
        "sglang_server_expected_version": "{{ sglang_install_version }}",
        "sglang_server_user": "{{ sglang_install_user }}",
        "sglang_server_group": "{{ sglang_install_group }}",
        "sglang_server_log_dir": "{{ sglang_install_log_dir }}",
        "sglang_server_run_dir": "{{ sglang_install_run_dir }}",
        "sglang_server_config_dir": "{{ sglang_install_config_dir }}",
        "sglang_server_command": ["{{ sglang_install_venv }}/bin/sglang-emulator", "--emulator-load-seconds", "1",
                                  "--emulator-capture-seconds", "0.2"],
        "sglang_server_gpu_expected": False,
        "sglang_server_model_path": os.path.join(models, "Kimi-K2.5-INT4"),
        "sglang_server_draft_model_path": os.path.join(models, "Kimi-K2.5-EAGLE3"),
        "sglang_server_tp_size": 8,
        "sglang_server_speculative_algorithm": "EAGLE3",
        "sglang_server_speculative_num_steps": 3,
        "sglang_server_speculative_eagle_topk": 1,
        "sglang_server_speculative_num_draft_tokens": 4,
        "sglang_server_environment": {"SGLANG_HEALTH_CHECK_TIMEOUT": "20"},
        "sglang_server_host": "127.0.0.1",
        "sglang_server_port": port,
        "sglang_server_api_key": API_KEY,
        "sglang_server_launcher": "detached",
        "sglang_server_load_timeout": 120,
        "sglang_server_stall_timeout": 60,
        "sglang_server_stop_timeout": 5,
        "sglang_server_args_check_method": "ast",
    }


def write_play(workdir, variables):
    play = [{
        "name": "A user's play of the install, patch and server roles",
        "hosts": "sglang_servers",
        "gather_facts": False,
        "vars": variables,
        "tasks": [
            {"name": "Install SGLang", "ansible.builtin.import_role": {"name": "sglang_install"}},
            {"name": "Patch SGLang", "ansible.builtin.import_role": {"name": "sglang_patch"}},
            {"name": "Run the server", "ansible.builtin.import_role": {"name": "sglang_server"}},
        ],
    }]
    path = os.path.join(workdir, "play.yml")
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(play, handle, sort_keys=False)
    inventory = os.path.join(workdir, "hosts.yml")
    with open(inventory, "w", encoding="utf-8") as handle:
        # Local runs are already root and there is no sudo: no become.
        yaml.safe_dump({"all": {"children": {"sglang_servers": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}}}}}}, handle)
    return path, inventory


def run_play(path, inventory):
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_NOCOLOR="1")
    start = time.monotonic()
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), path, "-i", inventory], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("no JSON from ansible-playbook (rc=%s):\n%s\n%s"
                             % (proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
    tasks = [(t["task"]["name"], t["hosts"].get("localhost", {})) for p in out["plays"] for t in p["tasks"]]
    print("%s: %.1f s, rc=%s" % (os.path.basename(path), time.monotonic() - start, proc.returncode))
    return proc.returncode, out["stats"]["localhost"], tasks


def health(port):
    req = urllib.request.Request("http://127.0.0.1:%d/health" % port, headers={"Authorization": "Bearer " + API_KEY})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status


@pytest.fixture
def workdir():
    # Not under pytest's tmp dir: /tmp/pytest-of-root is 0700 and the service user must walk into the prefix.
    path = tempfile.mkdtemp(prefix="eagle-deploy-roles-")
    os.chmod(path, 0o755)
    prefix = os.path.join(path, "prefix")
    os.mkdir(prefix)
    os.chmod(prefix, 0o755)
    yield path, prefix
    run_dir = prefix + "/var/lib/eagle-deploy/run"
    if os.path.exists(os.path.join(run_dir, "sglang.json")):
        stopped = run_module("wait_for_model", {"name": "sglang", "state": "stopped", "log_dir": prefix + "/var/log/sglang",
                                                "run_dir": run_dir, "stop_timeout": 5})
        assert not stopped.get("failed"), stopped
        assert not os.path.exists(os.path.join(run_dir, "sglang.json"))
    shutil.rmtree(path)


def test_the_play_sets_only_documented_variables_of_the_role_it_names():
    variables = play_vars("/p", 1, "/w.whl")
    specs = {role: documented(role) for role in ROLES}
    for name in variables:
        role = [r for r in ROLES if name.startswith(r + "_")]
        assert len(role) == 1, name
        assert name in specs[role[0]], "%s is not in roles/%s/meta/argument_specs.yml" % (name, role[0])


def test_a_users_play_of_the_three_roles_converges_and_its_rerun_changes_nothing(workdir):
    path, prefix = workdir
    port = free_port()
    variables = play_vars(prefix, port, emulator_wheel())
    specs = {role: documented(role) for role in ROLES}
    assert all(any(name in specs[r] for r in ROLES if name.startswith(r + "_")) for name in variables), variables
    play, inventory = write_play(path, variables)

    rc, stats, tasks = run_play(play, inventory)
    assert rc == 0 and stats["failures"] == 0 and stats["unreachable"] == 0, \
        [(n, r.get("msg")) for n, r in tasks if r.get("failed")]
    launched = [r for n, r in tasks if n.endswith(" : Launch SGLang and wait for health")]
    assert launched and launched[-1]["changed"] is True, [n for n, _ in tasks]
    assert health(port) == 200
    with open(prefix + "/var/lib/eagle-deploy/run/sglang.json", encoding="utf-8") as handle:
        first = json.load(handle)

    rc, stats, tasks = run_play(play, inventory)
    assert rc == 0 and stats["failures"] == 0, [(n, r.get("msg")) for n, r in tasks if r.get("failed")]
    assert stats["changed"] == 0, [n for n, r in tasks if r.get("changed")]
    assert health(port) == 200
    with open(prefix + "/var/lib/eagle-deploy/run/sglang.json", encoding="utf-8") as handle:
        assert json.load(handle)["pid"] == first["pid"]  # the same server, kept
