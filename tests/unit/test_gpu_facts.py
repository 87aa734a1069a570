"""Unit tests for library/gpu_facts.py.

nvidia-smi is a fake script on PATH that replays outputs captured on an NVIDIA H200 (tests/data/nvidia-smi/h200-*)
or hand-made edge cases (synthetic-*). Ownership is tested against real child processes of this test run and a
run-state file written with module_utils/sglang_proc.py, exactly as wait_for_model writes it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

import ansible.module_utils
from ansible.module_utils.common.warnings import get_warning_messages
from ansible.module_utils.testing import patch_module_args

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "data", "nvidia-smi")
if os.path.join(REPO, "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(os.path.join(REPO, "module_utils"))

from ansible.module_utils import sglang_proc  # noqa: E402  (found through the path added above)
from module_harness import ExitJson, FailJson, module_exits  # noqa: E402,F401 - module_exits is a fixture

pytestmark = pytest.mark.usefixtures("module_exits")

_spec = importlib.util.spec_from_file_location("gpu_facts", os.path.join(REPO, "library", "gpu_facts.py"))
gpu_facts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_facts)

CAPTURED_PID = 562  # the holder PID in h200-busy
TREE_PIDS = (811, 815)  # holder and its child in h200-busy-tree
H200_UUID = "GPU-8d9a908f-8223-a2b4-18a6-444d8fbdb0d2"

FAKE_NVIDIA_SMI = r'''#!{python}
"""Replays captured nvidia-smi outputs. FAKE_NVSMI_CASES: comma-separated case dirs; each --query-gpu call
moves to the next one (the last one repeats); --query-compute-apps answers from the current one."""
import os, sys
cases = os.environ["FAKE_NVSMI_CASES"].split(",")
counter = os.environ["FAKE_NVSMI_COUNTER"]
calls = int(open(counter).read()) if os.path.exists(counter) else 0
kind = "query-gpu" if any(a.startswith("--query-gpu=") for a in sys.argv) else "query-compute-apps"
if kind == "query-gpu":
    calls += 1
    open(counter, "w").write(str(calls))
case = cases[min(max(calls, 1), len(cases)) - 1]
with open(os.path.join(os.environ["FAKE_NVSMI_LOG"]), "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\n")
def read(ext, default=""):
    path = os.path.join(case, kind + "." + ext)
    return open(path).read() if os.path.exists(path) else default
sys.stdout.write(read("stdout"))
sys.stderr.write(read("stderr"))
sys.exit(int(read("rc", "0").strip() or 0))
'''


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def smi(tmp_path, monkeypatch):
    """smi(case, case, ...) installs the fake nvidia-smi replaying those cases; returns its call log path."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nvidia-smi"
    script.write_text(FAKE_NVIDIA_SMI.replace("{python}", sys.executable))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % bindir)
    monkeypatch.setenv("FAKE_NVSMI_COUNTER", str(tmp_path / "counter"))
    monkeypatch.setenv("FAKE_NVSMI_LOG", str(tmp_path / "calls.log"))

    def install(*cases):
        monkeypatch.setenv("FAKE_NVSMI_CASES", ",".join(c if os.path.isabs(c) else os.path.join(FIXTURES, c)
                                                        for c in cases))
        return tmp_path / "calls.log"

    return install


@pytest.fixture
def procs():
    """Start real processes; all are killed at teardown (the module itself must never signal them)."""
    started = []

    def start(argv, new_session=False):
        proc = subprocess.Popen(argv, start_new_session=new_session, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, text=True)
        started.append((proc, new_session))
        return proc

    yield start
    for proc, new_session in started:
        if new_session:  # the leader's children too (they share its process group)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


SLEEPER = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"]
# A leader that starts one child (its PID on stdout), like sglang.launch_server and its scheduler.
LEADER = [sys.executable, "-c",
          "import subprocess, sys, time; "
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
          "print(c.pid, flush=True); time.sleep(120)",
          "--api-key", "s3cret-leader"]
# The same, but the leader exits once its child runs: the child is left in the leader's session.
LEADER_EXITS = [sys.executable, "-c",
                "import subprocess, sys; "
                "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
                "print(c.pid, flush=True)"]


def start_leader(procs, run_dir, name="sglang", exit_after_child=False):
    leader = procs(LEADER_EXITS if exit_after_child else LEADER, new_session=True)
    child = int(leader.stdout.readline())
    state = sglang_proc.identity(leader.pid)
    state.update(fingerprint="0" * 64, attempt=1, log_path=str(run_dir / ("%s_r1.log" % name)), started_at=0.0,
                 user="test")
    sglang_proc.write_state(str(run_dir), name, state)
    return leader, child, state


def case_from(tmp_path, name, sources, pids):
    """A case dir built from captured ones: query-gpu from the first source, compute-apps lines of all sources,
    with captured PIDs replaced through `pids` ({captured: real})."""
    target = tmp_path / name
    target.mkdir()
    first = os.path.join(FIXTURES, sources[0])
    for fname in os.listdir(first):
        if fname.startswith("query-gpu."):
            shutil.copy(os.path.join(first, fname), str(target / fname))
    lines = []
    for source in sources:
        with open(os.path.join(FIXTURES, source, "query-compute-apps.stdout")) as handle:
            for line in handle.read().splitlines():
                pid, rest = line.split(",", 1)
                lines.append("%s,%s" % (pids.get(int(pid), pid), rest))
    (target / "query-compute-apps.stdout").write_text("".join(line + "\n" for line in lines))
    return str(target)


def run_module(args=None, clock=None):
    fake = clock or FakeClock()
    with patch_module_args(args or {}):
        gpu_facts.main(clock=fake.clock, sleep=fake.sleep)


def exits(args=None, clock=None):
    with pytest.raises(ExitJson) as info:
        run_module(args, clock)
    return info.value.args[0]


def fails(args=None, clock=None):
    with pytest.raises(FailJson) as info:
        run_module(args, clock)
    return info.value.args[0]


def unused_pid():
    with open("/proc/sys/kernel/pid_max") as handle:
        return int(handle.read()) + 1


def fixture_fields(case, kind):
    with open(os.path.join(FIXTURES, case, kind + ".stdout")) as handle:
        return [[f.strip() for f in line.split(",")] for line in handle.read().splitlines() if line.strip()]


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


def test_busy_process_gets_owner_and_cmdline_from_proc(smi, tmp_path, procs):
    foreign = procs(SLEEPER)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: foreign.pid}))
    (proc,) = exits()["processes"]
    assert proc["cmdline"] == SLEEPER
    import pwd

    assert proc["user"] == pwd.getpwuid(os.getuid()).pw_name
    assert proc["ours"] is False and proc["ours_reason"] == "no run_dir given"


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
        gpu_facts.parse_gpus("0, GPU-x, NVIDIA H200\n")


def test_unparsable_output_fails_with_a_message(smi, tmp_path):
    case = tmp_path / "short"
    case.mkdir()
    (case / "query-gpu.stdout").write_text("0, GPU-x, NVIDIA H200\n")
    smi(str(case))
    assert fails()["msg"].startswith("cannot parse nvidia-smi output")


def test_parse_mib_accepts_units_and_rejects_markers():
    assert gpu_facts.parse_mib("20998 MiB") == 20998
    assert gpu_facts.parse_mib(" 0") == 0
    assert gpu_facts.parse_mib("[N/A]") is None
    assert gpu_facts.parse_mib("[Not Supported]") is None


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
    assert gpu_facts.mask_cmdline(argv) == expected


def test_secret_in_a_real_cmdline_never_comes_back(smi, tmp_path, procs):
    leader, _child, _state = start_leader(procs, tmp_path)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: leader.pid}))
    result = exits({"run_dir": str(tmp_path)})
    assert "s3cret-leader" not in json.dumps(result)
    assert result["processes"][0]["cmdline"][-2:] == ["--api-key", "********"]


# ---------------------------------------------------------------- ours / foreign


def test_leader_and_its_child_are_ours_other_process_foreign(smi, tmp_path, procs):
    leader, child, _state = start_leader(procs, tmp_path)
    foreign = procs(SLEEPER)
    smi(case_from(tmp_path, "tree", ["h200-busy-tree", "h200-busy"],
                  {TREE_PIDS[0]: leader.pid, TREE_PIDS[1]: child, CAPTURED_PID: foreign.pid}))
    result = exits({"run_dir": str(tmp_path), "name": "sglang"})
    by_pid = {p["pid"]: p for p in result["processes"]}
    assert result["run_state_found"] is True
    assert by_pid[leader.pid]["ours"] is True and "leader" in by_pid[leader.pid]["ours_reason"]
    assert by_pid[child]["ours"] is True and "session" in by_pid[child]["ours_reason"]
    assert by_pid[foreign.pid]["ours"] is False
    assert by_pid[foreign.pid]["ours_reason"] == "not in our process tree"
    assert [p["pid"] for p in result["foreign"]] == [foreign.pid]
    assert result["foreign_mib_by_gpu"] == {"0": 20998}


def test_other_server_name_in_same_run_dir_is_foreign(smi, tmp_path, procs):
    leader, _child, _state = start_leader(procs, tmp_path, name="other")
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: leader.pid}))
    (proc,) = exits({"run_dir": str(tmp_path)})["processes"]
    assert proc["ours"] is False and proc["ours_reason"].startswith("no run state for sglang")


def test_reused_pid_is_not_ours(smi, tmp_path, procs):
    leader, _child, state = start_leader(procs, tmp_path)
    state["start_time"] -= 1  # the recorded process started at another time: the PID was reused
    sglang_proc.write_state(str(tmp_path), "sglang", state)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: leader.pid}))
    result = exits({"run_dir": str(tmp_path)})
    (proc,) = result["processes"]
    assert proc["ours"] is False and "reused" in proc["ours_reason"]
    assert result["run_state_found"] is True


def test_child_left_by_a_dead_leader_is_ours(smi, tmp_path, procs):
    leader, child, _state = start_leader(procs, tmp_path, exit_after_child=True)
    leader.wait()
    procs_child_alive = sglang_proc.pid_alive(child)
    try:
        smi(case_from(tmp_path, "orphan", ["h200-busy"], {CAPTURED_PID: child}))
        (proc,) = exits({"run_dir": str(tmp_path)})["processes"]
        assert procs_child_alive
        assert proc["ours"] is True and "left over from our leader" in proc["ours_reason"]
    finally:
        os.kill(child, signal.SIGKILL)


# ---------------------------------------------------------------- fail_on_foreign


def test_fail_on_foreign_names_pid_owner_command_and_mib(smi, tmp_path, procs):
    foreign = procs(SLEEPER)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: foreign.pid}))
    result = fails({"fail_on_foreign": True, "foreign_limit_mib": 1024})
    import pwd

    assert "GPU 0: 20998 MiB foreign (limit 1024 MiB)" in result["msg"]
    assert "PID %d" % foreign.pid in result["msg"]
    assert "user %s" % pwd.getpwuid(os.getuid()).pw_name in result["msg"]
    assert "time.sleep(120)" in result["msg"]
    assert foreign.poll() is None, "the module must never signal a process"


def test_fail_on_foreign_under_the_limit_passes(smi, tmp_path, procs):
    foreign = procs(SLEEPER)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: foreign.pid}))
    result = exits({"fail_on_foreign": True, "foreign_limit_mib": 20998})
    assert result["foreign_mib_by_gpu"] == {"0": 20998}


def test_fail_on_foreign_ignores_our_processes(smi, tmp_path, procs):
    leader, child, _state = start_leader(procs, tmp_path)
    smi(case_from(tmp_path, "tree", ["h200-busy-tree"], {TREE_PIDS[0]: leader.pid, TREE_PIDS[1]: child}))
    result = exits({"run_dir": str(tmp_path), "fail_on_foreign": True, "foreign_limit_mib": 0})
    assert result["foreign"] == [] and len(result["processes"]) == 2


def test_fail_on_foreign_looks_only_at_selected_gpus(smi, tmp_path, procs):
    foreign = procs(SLEEPER)
    two = case_from(tmp_path, "two", ["synthetic-2gpu"], {CAPTURED_PID: foreign.pid})
    smi(two)
    assert exits({"fail_on_foreign": True, "gpu_indices": [1]})["foreign_mib_by_gpu"] == {"0": 20998}
    smi(two)
    assert "GPU 0" in fails({"fail_on_foreign": True, "gpu_indices": [0, 1]})["msg"]


def test_foreign_processes_reported_without_fail_on_foreign(smi, tmp_path, procs):
    foreign = procs(SLEEPER)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: foreign.pid}))
    result = exits({"foreign_limit_mib": 0})
    assert [p["pid"] for p in result["foreign"]] == [foreign.pid]


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


def test_wait_for_release_times_out_with_per_gpu_figures(smi, tmp_path, procs):
    holder = procs(SLEEPER)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: holder.pid}))
    clock = FakeClock()
    result = fails({"wait_memory_below_mib": 1024, "wait_timeout": 1, "poll_interval": 0.25}, clock)
    assert result["msg"].startswith("GPU memory not below 1024 MiB after 1.0 s")
    assert "GPU 0: 21007 of 143771 MiB used" in result["msg"]
    assert "PID %d" % holder.pid in result["msg"]
    assert result["elapsed"] == pytest.approx(1.0) and result["polls"] == 5
    assert result["release_seconds"] is None
    assert holder.poll() is None


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


def test_check_mode_reads_the_same_and_changes_nothing(smi, tmp_path, procs):
    foreign = procs(SLEEPER)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: foreign.pid}))
    result = exits({"_ansible_check_mode": True})
    assert result["changed"] is False
    assert [p["pid"] for p in result["processes"]] == [foreign.pid]


def test_refusing_foreign_users_and_waiting_for_release_are_separate_modes(smi):
    smi("h200-idle")
    result = fails({"fail_on_foreign": True, "wait_memory_below_mib": 1024})
    assert "mutually exclusive" in result["msg"]
