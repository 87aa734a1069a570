"""Unit tests for library/gpu_facts.py: no process is started.

nvidia-smi is replayed in-process (AnsibleModule.run_command patched) from outputs captured on an NVIDIA H200
(tests/data/nvidia-smi/h200-*) or hand-made edge cases (synthetic-*); the clock and sleep are fake. Ownership
against real processes (our leader and its child, foreign sleepers) is tested in
tests/integration/test_gpu_facts_processes.py.
"""

from __future__ import annotations

import os

import pytest

from ansible.module_utils import basic, sglang_gpus
from ansible.module_utils.testing import patch_module_args
from ansible.module_utils.common.warnings import get_warning_messages
from gpu_facts_harness import (CAPTURED_PID, H200_UUID, FakeClock, case_dir, case_from, exits, fails,
                               fixture_fields, unused_pid)
from module_harness import ExitJson, module_exits  # noqa: F401 - fixture
from test_sglang_info import sglang_info

pytestmark = pytest.mark.usefixtures("module_exits")


@pytest.fixture
def smi(tmp_path, monkeypatch):
    """smi(case, case, ...) replays those cases as nvidia-smi; returns the path of its call log.

    An nvidia-smi file on PATH lets get_bin_path find it; run_command answers in-process like
    tests/integration/test_gpu_facts_processes.py's script: each --query-gpu call moves to the next case
    (the last one repeats), --query-compute-apps answers from the current one."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nvidia-smi"
    script.write_text("#!/bin/sh\necho 'unit tests replay nvidia-smi in-process' >&2\nexit 99\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % bindir)
    log = tmp_path / "calls.log"
    state = {"cases": [], "calls": 0}

    def fake_run_command(self, cmd, *args, **kwargs):
        assert cmd[0] == str(script), cmd
        argv = [str(a) for a in cmd[1:]]
        kind = "query-gpu" if any(a.startswith("--query-gpu=") for a in argv) else "query-compute-apps"
        if kind == "query-gpu":
            state["calls"] += 1
        cases = state["cases"]
        case = cases[min(max(state["calls"], 1), len(cases)) - 1]
        with open(str(log), "a") as handle:
            handle.write(" ".join(argv) + "\n")

        def read(ext, default=""):
            path = os.path.join(case, kind + "." + ext)
            if not os.path.exists(path):
                return default
            with open(path) as handle:
                return handle.read()

        return int(read("rc", "0").strip() or 0), read("stdout"), read("stderr")

    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run_command)

    def install(*cases):
        state["cases"] = [case_dir(c) for c in cases]
        return log

    return install


# ---------------------------------------------------------------- nvidia-smi outputs


def test_idle_h200_lists_the_gpu_and_no_process(smi):
    smi("h200-idle")
    result = exits()
    (row,) = fixture_fields("h200-idle", "query-gpu")
    assert result["gpus"] == [{"index": int(row[0]), "uuid": row[1], "name": row[2],
                               "memory_total_mib": int(row[3]), "memory_used_mib": int(row[4]),
                               "memory_free_mib": int(row[5])}]
    assert result["gpus"][0]["name"] == "NVIDIA H200"
    assert result["processes"] == [] and result["foreign"] == []
    assert result["changed"] is False
    assert result["nvidia_smi"].endswith("/nvidia-smi")


def test_runs_both_queries_with_csv_noheader_nounits(smi):
    log = smi("h200-idle")
    exits()
    assert log.read_text().splitlines() == [
        "--query-gpu=index,uuid,name,memory.total,memory.used,memory.free --format=csv,noheader,nounits",
        "--query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv,noheader,nounits",
    ]


def test_busy_h200_process_with_invisible_pid_is_foreign(smi, tmp_path):
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: unused_pid()}))
    result = exits()
    (proc,) = result["processes"]
    assert proc["pid"] == unused_pid()
    assert proc["gpu_uuid"] == H200_UUID and proc["gpu_index"] == 0
    assert proc["used_memory_mib"] == 20998
    assert proc["process_name"] == "/opt/torch/.venv/bin/python3"
    assert proc["user"] is None and proc["cmdline"] is None
    assert proc["ours"] is False and "not visible" in proc["ours_reason"]
    assert result["foreign_mib_by_gpu"] == {"0": 20998}
    assert result["gpus"][0]["memory_used_mib"] == 21007


def test_no_devices_found_is_not_fatal(smi):
    smi("h200-no-such-gpu")
    result = exits()
    assert result["gpus"] == [] and result["processes"] == []
    assert result["nvidia_smi_message"] == "No devices were found"


def test_missing_nvidia_smi_is_not_fatal(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = exits({"fail_on_foreign": True})
    assert result["nvidia_smi"] == "missing"
    assert result["gpus"] == [] and result["processes"] == []


def test_missing_nvidia_smi_leaves_nothing_to_wait_for(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    clock = FakeClock()
    result = exits({"wait_memory_below_mib": 1024}, clock)
    assert result["release_seconds"] == 0.0 and result["polls"] == 0
    assert clock.sleeps == []
    assert any("nvidia-smi not found" in w for w in get_warning_messages())


def test_nvidia_smi_failure_fails_with_its_output(smi):
    smi("h200-bad-field")
    result = fails()
    assert result["rc"] == 2
    assert 'Field "bogus_field" is not a valid field to query.' in result["msg"]
    assert result["msg"].startswith("nvidia-smi failed (rc=2)")


def test_compute_apps_failure_fails_too(smi):
    smi("h200-apps-bad-field")
    result = fails()
    assert result["rc"] == 2 and "bogus_field" in result["msg"]


def test_nvidia_smi_failure_prefers_stderr(smi):
    smi("synthetic-nvml-mismatch")
    result = fails()
    assert result["rc"] == 18
    assert "Driver/library version mismatch" in result["msg"]


def test_driver_not_loaded_fails(smi):
    smi("synthetic-driver-failed")
    result = fails()
    assert result["rc"] == 9 and "couldn't communicate with the NVIDIA driver" in result["msg"]


def test_na_and_not_supported_figures_become_null(smi):
    smi("synthetic-na-fields")
    result = exits()
    gpu0, gpu1 = result["gpus"]
    assert gpu0["memory_total_mib"] == 143771
    assert gpu0["memory_used_mib"] is None and gpu0["memory_free_mib"] is None
    assert gpu1["memory_total_mib"] is None and gpu1["memory_used_mib"] == 4
    na, comma, unknown = result["processes"]
    assert na["used_memory_mib"] is None
    assert comma["process_name"] == "/srv/odd, name/python3" and comma["gpu_index"] == 1
    assert comma["used_memory_mib"] == 2566
    assert unknown["gpu_index"] is None


def test_parse_gpus_rejects_a_short_line():
    with pytest.raises(ValueError):
        sglang_gpus.parse_gpus("0, GPU-x, NVIDIA H200\n")


def test_unparsable_output_fails_with_a_message(smi, tmp_path):
    case = tmp_path / "short"
    case.mkdir()
    (case / "query-gpu.stdout").write_text("0, GPU-x, NVIDIA H200\n")
    smi(str(case))
    assert fails()["msg"].startswith("cannot parse nvidia-smi output")


def test_parse_mib_accepts_units_and_rejects_markers():
    assert sglang_gpus.parse_mib("20998 MiB") == 20998
    assert sglang_gpus.parse_mib(" 0") == 0
    assert sglang_gpus.parse_mib("[N/A]") is None
    assert sglang_gpus.parse_mib("[Not Supported]") is None


# ---------------------------------------------------------------- secrets


@pytest.mark.parametrize("argv, expected", [
    (["x", "--api-key", "abc", "--port", "1"], ["x", "--api-key", "********", "--port", "1"]),
    (["x", "--api-key=abc"], ["x", "--api-key=********"]),
    (["x", "--hf-token", "hf_abc"], ["x", "--hf-token", "********"]),
    (["env", "HF_TOKEN=hf_abc", "python"], ["env", "HF_TOKEN=********", "python"]),
    (["x", "--admin-api-key", "k", "--password", "p"], ["x", "--admin-api-key", "********", "--password", "********"]),
    (["x", "--tokenizer-path", "/m", "--ssl-keyfile", "/k.pem"],
     ["x", "--tokenizer-path", "/m", "--ssl-keyfile", "/k.pem"]),
])
def test_mask_cmdline(argv, expected):
    assert sglang_gpus.mask_cmdline(argv) == expected


# ---------------------------------------------------------------- ours / foreign


# ---------------------------------------------------------------- fail_on_foreign


# ---------------------------------------------------------------- wait_for_release


def test_wait_for_release_returns_seconds_after_memory_drops(smi):
    log = smi("h200-busy", "h200-busy", "h200-idle")
    clock = FakeClock()
    result = exits({"wait_memory_below_mib": 1024, "poll_interval": 0.25}, clock)
    assert result["polls"] == 3
    assert result["release_seconds"] == pytest.approx(0.5)
    assert clock.sleeps == [0.25, 0.25]
    assert result["gpus"][0]["memory_used_mib"] == 0 and result["processes"] == []
    assert sum(1 for line in log.read_text().splitlines() if "--query-gpu" in line) == 3


def test_wait_for_release_already_free_does_not_sleep(smi):
    smi("h200-idle")
    clock = FakeClock()
    result = exits({"wait_memory_below_mib": 1024}, clock)
    assert result["release_seconds"] == 0.0 and result["polls"] == 1 and clock.sleeps == []


def test_wait_for_release_looks_only_at_selected_gpus(smi):
    smi("synthetic-2gpu")
    clock = FakeClock()
    result = exits({"wait_memory_below_mib": 1024, "gpu_indices": [1]}, clock)
    assert result["polls"] == 1 and result["release_seconds"] == 0.0


@pytest.mark.parametrize("args", [{"gpu_indices": [0, 7]}, {"gpu_indices": [7], "wait_memory_below_mib": 1024}])
def test_unknown_gpu_index_fails(smi, args):
    smi("h200-idle")
    clock = FakeClock()
    result = fails(args, clock)
    assert result["msg"] == "GPU index 7 not found: nvidia-smi lists 0; fix gpu_indices"
    assert clock.sleeps == []


def test_gpu_indices_with_no_device_fails(smi):
    smi("h200-no-such-gpu")
    assert "lists no GPU" in fails({"gpu_indices": [0]})["msg"]


def test_wait_for_release_unknown_figure_counts_as_held(smi):
    smi("synthetic-na-fields")
    clock = FakeClock()
    result = fails({"wait_memory_below_mib": 1024, "wait_timeout": 0.5, "gpu_indices": [0]}, clock)
    assert "GPU 0: None of 143771 MiB used" in result["msg"]


# ---------------------------------------------------------------- check mode


def test_refusing_foreign_users_and_waiting_for_release_are_separate_modes(smi):
    smi("h200-idle")
    result = fails({"fail_on_foreign": True, "wait_memory_below_mib": 1024})
    assert "mutually exclusive" in result["msg"]


# --- the same facts in sglang_info's look (module_utils/sglang_host_look.py: look_gpus) -------------------------------------

def look(spec):
    """sglang_info with only its gpus option (no SGLang anywhere): the look's gpus result."""
    with patch_module_args({"python": "/nonexistent/bin/python", "gpus": spec}):
        with pytest.raises(ExitJson) as info:
            sglang_info.main()
    return info.value.args[0]["gpus"]


def test_the_look_reports_foreign_memory_over_the_limit_instead_of_failing(smi):
    smi("h200-busy")
    refused = fails({"fail_on_foreign": True, "foreign_limit_mib": 1024})
    out = look({"fail_on_foreign": True, "foreign_limit_mib": 1024})
    assert out["foreign_refusal"] == refused["msg"] and "PID 562" in out["foreign_refusal"]
    assert "error" not in out and out["gpus"] == refused["gpus"] and "changed" not in out
    # Under the limit: no refusal, the same facts as gpu_facts'.
    assert look({"fail_on_foreign": True, "foreign_limit_mib": 30000})["foreign_refusal"] == ""


@pytest.mark.parametrize("case", ["h200-bad-field", "synthetic-driver-failed"])
def test_the_look_reports_a_failed_query_as_its_error(smi, case):
    smi(case)
    failed = fails()
    out = look({})
    assert out["error"] == failed["msg"] and out["rc"] == failed["rc"]
