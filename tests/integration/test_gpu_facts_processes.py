"""gpu_facts against real processes: owner and command line read from /proc, our leader and its child told
from foreign processes, a reused PID, a child left by a dead leader, and the module never signalling anyone.

nvidia-smi is a fake script on PATH (run through AnsibleModule.run_command for real) that replays outputs
captured on an NVIDIA H200 (tests/data/nvidia-smi), with the captured PIDs replaced by those of real child
processes of this test run; the run-state file is written with module_utils/sglang_proc.py, exactly as
wait_for_model writes it. The clock and sleep are fake. The pure tests are in tests/unit/test_gpu_facts.py.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys

import pytest

from ansible.module_utils import sglang_proc
from gpu_facts_harness import CAPTURED_PID, TREE_PIDS, FakeClock, case_dir, case_from, exits, fails
from module_harness import module_exits  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("module_exits")

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
        monkeypatch.setenv("FAKE_NVSMI_CASES", ",".join(case_dir(c) for c in cases))
        return tmp_path / "calls.log"

    return install


@pytest.fixture
def procs():
    """Start real processes; all are killed at teardown (the module itself must never signal them)."""
    started = []

    def start(argv, new_session=False, env=None):
        proc = subprocess.Popen(argv, start_new_session=new_session, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, text=True, env=env)
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
    # As wait_for_model launches it: the run token in its environment (and so in its child's).
    token = "%s:%s" % (name, "5a" * 16)
    leader = procs(LEADER_EXITS if exit_after_child else LEADER, new_session=True,
                   env=dict(os.environ, **{sglang_proc.RUN_TOKEN_VAR: token}))
    child = int(leader.stdout.readline())
    state = sglang_proc.identity(leader.pid)
    state.update(fingerprint="0" * 64, attempt=1, log_path=str(run_dir / ("%s_r1.log" % name)), started_at=0.0,
                 user=pwd.getpwuid(os.getuid()).pw_name, run_token=token)
    sglang_proc.write_state(str(run_dir), name, state)
    return leader, child, state


def test_busy_process_gets_owner_and_cmdline_from_proc(smi, tmp_path, procs):
    foreign = procs(SLEEPER)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: foreign.pid}))
    (proc,) = exits()["processes"]
    assert proc["cmdline"] == SLEEPER
    import pwd

    assert proc["user"] == pwd.getpwuid(os.getuid()).pw_name
    assert proc["ours"] is False and proc["ours_reason"] == "no run_dir given"


def test_secret_in_a_real_cmdline_never_comes_back(smi, tmp_path, procs):
    leader, _child, _state = start_leader(procs, tmp_path)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: leader.pid}))
    result = exits({"run_dir": str(tmp_path)})
    assert "s3cret-leader" not in json.dumps(result)
    assert result["processes"][0]["cmdline"][-2:] == ["--api-key", "********"]


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


def test_check_mode_reads_the_same_and_changes_nothing(smi, tmp_path, procs):
    foreign = procs(SLEEPER)
    smi(case_from(tmp_path, "busy", ["h200-busy"], {CAPTURED_PID: foreign.pid}))
    result = exits({"_ansible_check_mode": True})
    assert result["changed"] is False
    assert [p["pid"] for p in result["processes"]] == [foreign.pid]
