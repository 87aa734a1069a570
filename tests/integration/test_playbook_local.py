"""The real playbook against this machine: `ansible-playbook playbooks/serve_eagle3.yml -i inventory/local`.

Real SGLang 0.5.23 files (installed --no-deps from the wheel cache, really patched), the SGLang EMULATOR as the
server. Every run uses its own prefix (a tmp dir) and a free port; the server is stopped at the end.
The tests share one host (a module-scoped prefix and port) but each sets up what it needs: ``converged`` runs the
first converge once, ``serving`` makes sure our server answers before a test that needs it, and every test reads
the run state it starts from. Any one of them runs alone (``-k``).

Results are found by task name where nothing else identifies the step (the launch, the args check, the config
file, the burst check,
the smoke watch, the patch, the install, the GPU read, the restart plan, the stop, the GPU release wait, the debug
line that shows the server's model info); what is asserted is their result keys, and a failure is asserted by
its message, not by the failing task's name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

from ansible_run import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
API_KEY = "local-rehearsal-key"  # inventory/local's sglang_server_api_key
LOOK = "Look at the host once (install, patch, server)"
LAUNCH = "Launch SGLang and wait for health"
# A failed launch: the failure is printed once, by this task; the task that fails after it says only that.
SHOWN = "Show why the server did not come up"
# Actions that run on the controller only: no module call on the host.
CONTROLLER_ONLY = frozenset("ansible.builtin." + a for a in (
    "assert", "debug", "fail", "set_fact", "meta", "include_tasks", "import_tasks", "include_role", "validate_argument_spec"))


class Run:
    """One ansible-playbook run, parsed from the json callback."""

    def __init__(self, proc, elapsed):
        self.rc = proc.returncode
        self.elapsed = elapsed
        self.stderr = proc.stderr
        try:
            self.out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("no JSON from ansible-playbook (rc=%s):\n%s\n%s"
                                 % (proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
        self.stats = self.out["stats"]["localhost"]
        # Task names without the "role : " prefix.
        self.tasks = [(t["task"]["name"].split(" : ", 1)[-1], t["hosts"].get("localhost", {}))
                      for play in self.out["plays"] for t in play["tasks"]]

    def results(self, name):
        return [r for n, r in self.tasks if n == name]

    def result(self, name):
        found = self.results(name)
        assert found, "task %r did not run; tasks: %s" % (name, [n for n, _ in self.tasks])
        return found[-1]

    def changed_tasks(self):
        return [n for n, r in self.tasks if r.get("changed")]

    def module_calls(self):
        """The tasks that ran a module on the host (every one that ran, but those the controller answers alone)."""
        return [n for n, r in self.tasks if not r.get("skipped") and r.get("action") not in CONTROLLER_ONLY]

    def failures(self):
        """The results of the tasks that failed (not ignored)."""
        return [r for _, r in self.tasks if r.get("failed") and not r.get("ignore_errors")]

    def failure_msgs(self):
        """One message per failed task (a loop's first failed item's)."""
        return [r.get("msg", "") if "results" not in r else
                [i.get("msg", "") for i in r["results"] if i.get("failed")][0] for r in self.failures()]

    def __repr__(self):
        failed = [(n, r.get("msg")) for n, r in self.tasks if r.get("failed")]
        return "rc=%s stats=%s changed=%s failed=%s" % (self.rc, self.stats, self.changed_tasks(), failed)


@pytest.fixture(scope="module")
def host():
    # Not under pytest's tmp dir: /tmp/pytest-of-root is 0700 and the service user must walk into the prefix.
    prefix = tempfile.mkdtemp(prefix="eagle-deploy-test-")
    os.chmod(prefix, 0o755)
    port = free_port()
    env = dict(os.environ)
    env.update({
        "PATH": BIN + os.pathsep + env.get("PATH", ""),
        "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_NOCOLOR": "1",
    })

    def play(*extra, playbook="serve_eagle3.yml", prefix_=prefix, port_=port, path_prepend=None, timeout=300):
        run_env = dict(env, PATH=path_prepend + os.pathsep + env["PATH"]) if path_prepend else env
        cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join("playbooks", playbook), "-i", "inventory/local",
               "-e", "eagle_deploy_prefix=%s" % prefix_, "-e", "sglang_server_port=%d" % port_] + list(extra)
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=timeout, check=False)
        return Run(proc, time.monotonic() - start)

    state = {"prefix": prefix, "port": port, "play": play}
    yield state
    rundir = os.path.join(prefix, "var/lib/eagle-deploy/run")
    ours = {}
    if os.path.exists(os.path.join(rundir, "sglang.json")):
        ours = _our_processes(run_state(state))
        assert len(ours) >= 2, ours  # the supervisor and the server (the last test leaves it serving)
    stopped = play(playbook="stop.yml")
    assert stopped.rc == 0, stopped
    assert not os.path.exists(os.path.join(rundir, "sglang.json"))
    assert not os.path.exists(os.path.join(rundir, "sglang.watcher.json"))  # it held the secret environment
    # Nothing of the tree is left, its supervisor included.
    assert not [pid for pid, start in ours.items() if _same_process(pid, start)], ours
    shutil.rmtree(prefix)


@pytest.fixture(scope="module")
def converged(host):
    """The first converge of the module's host (once, whichever test asks first)."""
    run = host["play"]()
    assert run.rc == 0, run
    return run


@pytest.fixture
def serving(host, converged):
    """Our server answers on the host's port (converged again if an earlier test left it dead)."""
    try:
        get(host, "/health")
    except OSError:
        run = host["play"]()
        assert run.rc == 0, run
    return run_state(host)


def run_dir(host):
    return os.path.join(host["prefix"], "var/lib/eagle-deploy/run")


def run_state(host):
    with open(os.path.join(run_dir(host), "sglang.json")) as f:
        return json.load(f)


def _link(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


def _fd_flags(pid, fd):
    with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
        return int([line.split()[1] for line in f if line.startswith("flags:")][0], 8)


def _same_process(pid, start_time):
    """Still that process, and not a zombie (dead, waiting for its parent - here PID 1 - to reap it)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat_ = f.read()
    except OSError:
        return False
    fields = stat_[stat_.rindex(")") + 2:].split()
    return fields[0] not in ("Z", "X") and int(fields[19]) == start_time


def _our_processes(state):
    """{pid: start_time} of the server's session (the whole tree: the emulator's children stay in it) and of its
    supervisor, from /proc."""
    found = {state["watcher"]["pid"]: state["watcher"]["start_time"]}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == state["pid"]:
                found[int(d)] = int(fields[19])
    return found


def get(host, path, key=API_KEY):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (host["port"], path))
    if key:
        req.add_header("Authorization", "Bearer " + key)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, json.loads(resp.read().decode() or "null")


def test_first_run_converges_and_serves(host, converged):
    run = converged
    # The operator sees that this is the emulator: the role shows what the server says it serves.
    assert '"emulator": true' in run.result("Show what the server did")["msg"]
    assert run.result("Launch SGLang and wait for health")["changed"] is True
    status, info = get(host, "/get_model_info")
    assert status == 200 and info["emulator"] is True
    # Real SGLang files, checked with the ast fallback (no torch in a --no-deps install).
    check = run.result("Check the server arguments against the installed SGLang")
    assert check["method"] == "ast" and check["sglang_version"] == "0.5.23"
    # The config file holds the key; it is 0600 and the service user's; the key is nowhere else.
    config = os.path.join(host["prefix"], "etc/sglang/sglang.yaml")
    st = os.stat(config)
    assert stat.S_IMODE(st.st_mode) == 0o600
    import pwd
    assert pwd.getpwuid(st.st_uid).pw_name == "sglang"
    with open(config) as f:
        assert API_KEY in f.read()
    state = run_state(host)
    assert state["user"] == "sglang"
    assert API_KEY not in " ".join(state["cmdline"])
    with open("/proc/%d/cmdline" % state["pid"], "rb") as f:
        assert API_KEY.encode() not in f.read()
    assert API_KEY not in json.dumps(run.out)
    # The server's output reaches its log through its supervisor (root, recorded as `watcher`), which masks the key:
    # the server's stdout and stderr are a pipe whose read end only the supervisor holds.
    assert "log_writer" not in state and state["launcher"] == "detached"
    sup = state["watcher"]
    assert run.result("Launch SGLang and wait for health")["supervisor_pid"] == sup["pid"] != state["pid"]
    # the program the role installed (tasks/program.yml: root's, 0644/0755), not a copy the module wrote
    program = os.path.join(run_dir(host), "supervisor")
    assert sup["cmdline"][1:] == ["-I", "-B", program, run_dir(host), "sglang"]
    assert not os.path.exists(os.path.join(run_dir(host), "watcher"))
    for path in [program] + [os.path.join(d, f) for d, ds, fs in os.walk(program) for f in ds + fs]:
        st_p = os.stat(path)
        assert st_p.st_uid == 0 and stat.S_IMODE(st_p.st_mode) == (0o755 if os.path.isdir(path) else 0o644), path
    with open("/proc/%d/cmdline" % sup["pid"], "rb") as f:
        assert f.read().split(b"\0")[:-1] == [a.encode() for a in sup["cmdline"]]
    assert os.stat("/proc/%d" % sup["pid"]).st_uid == 0 and os.stat("/proc/%d" % state["pid"]).st_uid == st.st_uid
    for pid in (sup["pid"], state["pid"]):
        with open("/proc/%d/environ" % pid, "rb") as f:
            assert API_KEY.encode() not in f.read()
    pipe = os.readlink("/proc/%d/fd/1" % state["pid"])
    assert pipe.startswith("pipe:") and os.readlink("/proc/%d/fd/2" % state["pid"]) == pipe
    ends = [fd for fd in os.listdir("/proc/%d/fd" % sup["pid"]) if _link("/proc/%d/fd/%s" % (sup["pid"], fd)) == pipe]
    assert len(ends) == 1 and _fd_flags(sup["pid"], ends[0]) & 3 == os.O_RDONLY
    ps = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True, check=True).stdout
    assert API_KEY not in ps and sup["cmdline"][2] in ps
    log_dir = os.path.join(host["prefix"], "var/log/sglang")
    for name in os.listdir(log_dir):
        if os.path.isfile(os.path.join(log_dir, name)):
            with open(os.path.join(log_dir, name), "rb") as f:
                assert API_KEY.encode() not in f.read(), name
    assert run.result("Check that every burst request generated tokens")["msg"].startswith("burst: 8/8")
    # The speculation check: the emulator's draft gives 2.5 tokens a verify step (the first token of each request is
    # the prefill's); the burst's own requests say so, and pass the default 1.3.
    burst = run.result("Check that every burst request generated tokens")["msg"]
    assert re.search(r"; accept length 2\.\d\d \(7 requests: \d+ tokens in \d+ verify steps\)$", burst), burst
    spec = run.result("Check that speculative decoding accepts drafted tokens")["msg"]
    assert re.match(r"speculation: accept length 2\.\d\d \(7 requests: .*\), at least 1\.3 asked$", spec), spec
    kept = run.result("Keep the speculation figure of the smoke test")["ansible_facts"]["sglang_server_speculation"]
    assert kept["source"] == "requests" and kept["min_accept_length"] == 1.3 and 2.0 < kept["accept_length"] < 2.6


def test_second_run_changes_nothing(host, converged):
    before = run_state(host)
    with open(os.path.join(host["prefix"], "etc/sglang/sglang.yaml"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    run = host["play"]()
    assert run.rc == 0, run
    assert run.stats["changed"] == 0, run.changed_tasks()
    assert run_state(host)["pid"] == before["pid"]
    # One module call on the host: the play's one look, which also asked wait_for_model's own code (check mode)
    # whether it would keep the server: ours, the same fingerprint, its supervisor watching, answering health.
    assert run.module_calls() == [LOOK], run.module_calls()
    look = run.result(LOOK)
    assert look["in_place"] is True and look["patch"]["in_place"] is True, look
    assert look["keep"]["kept"] is True and look["keep"]["pid"] == before["pid"], look["keep"]
    assert look["keep"]["fingerprint"] == before["fingerprint"]
    assert run.result("Run the roles where something is to change").get("skipped") is True
    assert API_KEY not in json.dumps(run.out)
    # The look found the argument check's verdict kept for these very inputs, and the config file as the template
    # would write it: the check and the template are skipped. The file's hash went to the module as a no_log option;
    # it is nowhere in the output.
    assert look["args_check"]["cached"] is True and look["args_check"]["config_file_in_place"] is True, look
    for skipped in ("Check the server arguments against the installed SGLang", "Write the server config file",
                    "Apply the EAGLEWorkerV2 early-init patch"):
        assert not run.results(skipped) or run.result(skipped).get("skipped") is True, (skipped, run.result(skipped))
    assert digest not in json.dumps(run.out)


def test_a_config_file_changed_behind_our_back_is_written_again(host, serving):
    before = serving
    config = os.path.join(host["prefix"], "etc/sglang/sglang.yaml")
    with open(config, "rb") as f:
        wanted = f.read()
    with open(config, "ab") as f:
        f.write(b"# an edit by hand\n")
    os.chmod(config, 0o644)
    run = host["play"]()
    assert run.rc == 0, run
    assert run.result(LOOK)["args_check"]["config_file_in_place"] is False
    assert run.changed_tasks() == ["Write the server config file"], run
    with open(config, "rb") as f:
        assert f.read() == wanted
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o600
    # The same content as the running server was started with: kept, not restarted.
    assert run.result("Launch SGLang and wait for health")["changed"] is False
    assert run_state(host)["pid"] == before["pid"]


def test_check_diff_on_the_converged_host_is_clean(host, converged):
    before = run_state(host)
    run = host["play"]("--check", "--diff")
    assert run.rc == 0, run
    assert run.stats["changed"] == 0, run.changed_tasks()
    assert run_state(host)["pid"] == before["pid"]
    assert run.module_calls() == [LOOK], run.module_calls()
    assert run.result(LOOK)["keep"]["kept"] is True


def _wait_gone(pid, start_time, timeout=10.0):
    deadline = time.monotonic() + timeout
    while _same_process(pid, start_time):
        assert time.monotonic() < deadline, "PID %d still there" % pid
        time.sleep(0.05)


def test_what_the_look_does_not_keep_the_roles_put_right(host, serving):
    """The one-call re-run is taken only where wait_for_model would keep the server: a killed supervisor program
    (the run puts one back, the server kept) and a killed server (restarted) each send the host through the roles."""
    before = serving
    sup = before["watcher"]
    os.kill(sup["pid"], signal.SIGKILL)
    _wait_gone(sup["pid"], sup["start_time"])
    run = host["play"]()
    assert run.rc == 0, run
    look = run.result(LOOK)["keep"]
    assert look["kept"] is False and "without its supervisor program" in look["why"], look
    assert LAUNCH in run.module_calls(), run.module_calls()
    after = run_state(host)
    assert after["pid"] == before["pid"] and after["watcher"]["pid"] != sup["pid"]  # adopted, not restarted
    assert _same_process(after["watcher"]["pid"], after["watcher"]["start_time"])
    again = host["play"]()  # and now nothing is to change: the one look
    assert again.rc == 0 and again.module_calls() == [LOOK], again.module_calls()

    os.kill(after["pid"], signal.SIGKILL)
    _wait_gone(after["pid"], after["start_time"])
    run = host["play"]()
    assert run.rc == 0, run
    look = run.result(LOOK)["keep"]
    assert look["kept"] is False, look
    assert run.result(LAUNCH)["changed"] is True
    assert run_state(host)["pid"] != after["pid"]
    assert get(host, "/health")[0] == 200


def test_an_argument_sglang_does_not_know_is_refused_by_a_fresh_check_and_nothing_restarts(host, serving):
    # The look has a verdict kept only for the arguments it was computed for: with one more, it has none, the
    # argument check runs (SGLang's real 0.5.23 sources) and refuses, before the config file or the server is touched.
    config = os.path.join(host["prefix"], "etc/sglang/sglang.yaml")
    with open(config, "rb") as f:
        before_config = f.read()
    run = host["play"]("-e", '{"sglang_server_extra_args": {"speculative-num-stepz": 3}}')
    assert run.rc != 0, run
    look = run.result(LOOK)
    assert look["args_check"]["cached"] is False and "args" in look["args_check"]["cache_miss"], look["args_check"]
    assert any("speculative-num-stepz" in m and "speculative-num-steps" in m for m in run.failure_msgs()), run
    assert not run.results(LAUNCH), run
    with open(config, "rb") as f:
        assert f.read() == before_config
    assert run_state(host)["pid"] == serving["pid"]


def test_changing_one_server_argument_restarts_exactly_once(host, serving):
    before = serving
    config = os.path.join(host["prefix"], "etc/sglang/sglang.yaml")
    steps = 6 if "speculative-num-steps: 4\n" in open(config).read() else 4
    run = host["play"]("-e", "sglang_server_speculative_num_steps=%d" % steps)
    assert run.rc == 0, run
    launch = run.result("Launch SGLang and wait for health")
    assert launch["changed"] is True
    assert "sglang.yaml" in launch["restart_reason"]
    state = run_state(host)
    assert state["pid"] != before["pid"]
    assert state["attempt"] == before["attempt"] + 1
    # The watch after the smoke burst saw the server this run launched.
    assert run.result("Watch the server after the requests (a crash on any of them is reported with its class)")["pid"] \
        == launch["pid"] == state["pid"]
    with open(config) as f:
        assert "speculative-num-steps: %d\n" % steps in f.read()


def test_eagle_scenario_without_the_patch_fails_at_smoke_with_the_attribute_error(host, converged):
    run = host["play"]("-e", "sglang_emulator_scenario=eagle", "-e", "sglang_patch_enabled=false")
    assert run.rc != 0, run
    # The first smoke request fails (the scheduler died on it); the rescue fails the play with the crash.
    assert len(run.failures()) == 2, run
    # The server itself came up (the crash is at the first real request), then the smoke test caught it.
    assert run.result("Launch SGLang and wait for health")["changed"] is True
    assert "why is shown just above" in run.failure_msgs()[-1]
    msg = run.result("Show why the smoke test failed")["msg"]
    assert "crash class: first_request_crash" in msg  # decided by the log classifier, not by a timeout
    assert "timed out" not in msg and "stalled" not in msg
    assert "(AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold')" in msg
    assert "early-init patch" in msg  # the hint
    assert "Traceback (most recent call last)" in msg
    assert API_KEY not in json.dumps(run.out)


def test_a_draft_that_never_accepts_fails_the_speculation_check_and_0_turns_it_off(host, converged):
    # The threshold is checked before anything is touched: an accept length counts at most the draft tokens of a step.
    # (Where the one look finds nothing to change, no role runs, and no smoke test: smoke_always makes the role run.)
    before = run_state(host) if os.path.exists(os.path.join(run_dir(host), "sglang.json")) else None
    run = host["play"]("-e", "sglang_server_min_accept_length=5", "-e", "sglang_server_smoke_always=true")
    assert run.rc != 0 and "sglang_server_min_accept_length=5 cannot be reached" in run.failure_msgs()[0], run
    assert not run.results(LAUNCH)
    assert (run_state(host) if before else None) == before
    # EAGLE3 with no draft of its own would load the target as its draft and crash at start (SGLang #36528): refused.
    # (No model role here: it would refuse the path first, as the model of two entries.)
    target = os.path.join(REPO, "tests/emulator/models/Kimi-K2.5-INT4")
    run = host["play"]("-e", "sglang_server_draft_model_path=%s/" % target, "-e", '{"sglang_model_models": []}',
                       "-e", "sglang_server_smoke_always=true")
    assert run.rc != 0 and "sglang_server_draft_model_path is the target itself" in run.failure_msgs()[0], run
    assert "SGLang #36528" in run.failure_msgs()[0] and not run.results(LAUNCH)
    assert (run_state(host) if before else None) == before
    # The emulator's draft never hits (1 token a verify step): the server decodes, the check fails the run.
    run = host["play"]("-e", "sglang_emulator_accept_length=1.0")
    assert run.rc != 0, run
    assert run.result(LAUNCH)["changed"] is True  # a new command: restarted
    msg = run.result("Show why the smoke test failed")["msg"]
    assert "at 'Check that speculative decoding accepts drafted tokens': spec_not_accepting: accept length 1.0" in msg
    assert "below sglang_server_min_accept_length=1.3" in msg
    assert "draft %s/tests/emulator/models/Kimi-K2.5-EAGLE3 (revision not given)" % REPO in msg
    assert "speculative-draft-attention-backend" in msg and "set sglang_server_min_accept_length to 0" in msg
    assert run.result("Check that every burst request generated tokens")["msg"].startswith("burst: 8/8")
    assert not run.results("Ask the watcher what happened to the server") or \
        run.result("Ask the watcher what happened to the server").get("skipped")
    # Not lost: the next run with nothing changed keeps the server (it answers), but not as good: the smoke test's
    # verdict was kept with its run state, so the smoke test runs again, and fails again.
    again = host["play"]("-e", "sglang_emulator_accept_length=1.0")
    assert again.rc != 0, again
    assert again.result(LAUNCH)["changed"] is False, again
    assert "spec_not_accepting: accept length 1.0" in again.result(LAUNCH)["judged_failed"]
    assert "spec_not_accepting: accept length 1.0" in again.result("Show why the smoke test failed")["msg"]
    # Off at 0: the same server (kept, not restarted), its figure shown.
    run = host["play"]("-e", "sglang_emulator_accept_length=1.0", "-e", "sglang_server_min_accept_length=0",
                       "-e", "sglang_server_smoke_always=true")
    assert run.rc == 0, run
    assert run.result(LAUNCH)["changed"] is False
    spec = run.result("Check that speculative decoding accepts drafted tokens")["msg"]
    assert re.match(r"speculation: accept length 1\.0\d \(7 requests: .*\) \(not checked: "
                    r"sglang_server_min_accept_length is 0\)$", spec), spec


def test_a_port_held_by_another_server_is_refused_before_a_launch(host, serving):
    # Another prefix = another run state: the running server on this port is not "ours" there. wait_for_model
    # refuses before anything is stopped or launched, and the server on the port keeps serving.
    other = os.path.join(host["prefix"], "other")
    try:
        run = host["play"](prefix_=other)
        assert run.rc != 0
        refusal = run.result(LAUNCH)  # the role prints its message once (SHOWN), then fails the play
        assert refusal["action"].endswith("wait_for_model") and "crash_class" not in refusal, run
        assert "port %d is held by a process that is not ours" % host["port"] in refusal["msg"]
        assert run.result(SHOWN)["msg"] == refusal["failure_message"] == refusal["msg"]
        assert run.failure_msgs() == ["server sglang did not come up: why is shown just above"], run
        assert not os.path.exists(os.path.join(other, "var/lib/eagle-deploy/run/sglang.json"))
        assert run_state(host)["pid"] == serving["pid"] and get(host, "/health")[0] == 200
    finally:
        shutil.rmtree(other, ignore_errors=True)


FAKE_NVIDIA_SMI = """#!/bin/sh
# Replays nvidia-smi output captured on an H200 (tests/data/nvidia-smi/%(case)s).
# The host fitness check's reads: a real H100's -q -x made two GPUs (tests/data/nvidia-smi/h100-fitness), its nvlink -s.
case "$1" in
  --query-gpu=*) f=query-gpu ;;
  --query-compute-apps=*) f=query-compute-apps ;;
  -q) exec cat "%(fitness)s/two-gpus-mismatched/q.xml" ;;
  nvlink) exec cat "%(fitness)s/../h100-80gb-hbm3/nvlink-s.txt" ;;
  *) exit 2 ;;
esac
cat "%(dir)s/$f.stdout" 2>/dev/null
exit 0
"""
FITNESS = os.path.join(REPO, "tests", "data", "nvidia-smi", "h100-fitness")


@pytest.mark.parametrize("tp, min_free, foreign_limit, expected", [
    (2, 100000, 30000, None),
    (2, 130000, 30000, "GPU 0 (NVIDIA H200) has 122150 MiB free"),
    (8, 100000, 30000, "found 2 GPUs, need 8"),
    # The default limit (1024 MiB): the foreign 20998 MiB process is refused, by PID, and never touched.
    (2, 100000, 1024, "foreign processes hold GPU memory"),
])
def test_gpu_preflight_on_replayed_nvidia_smi(host, converged, tmp_path, tp, min_free, foreign_limit, expected):
    case = "synthetic-2gpu"  # GPU 0 holds a foreign 20998 MiB process (PID 562), GPU 1 is idle
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI % {"case": case, "dir": os.path.join(REPO, "tests", "data", "nvidia-smi", case),
                                      "fitness": FITNESS})
    fake.chmod(0o755)
    run = host["play"]("--check", "--tags", "preflight", "-e", "sglang_server_gpu_expected=true",
                       "-e", "sglang_server_tp_size=%d" % tp, "-e", "sglang_server_min_free_gpu_memory_mib=%d" % min_free,
                       "-e", "sglang_server_foreign_gpu_limit_mib=%d" % foreign_limit,
                       path_prepend=str(bindir))
    if expected is None:
        assert run.rc == 0, run
        # The play's one look read them (gpu_facts' code and options); the role's own read is skipped.
        assert run.result(LOOK)["gpus"]["gpus"][1]["memory_free_mib"] == 143156
        assert run.result("Read the GPUs and who uses them").get("skipped") is True
        return
    assert run.rc != 0
    assert len(run.failures()) == 1, run
    (msg,) = run.failure_msgs()
    assert expected in msg
    if foreign_limit == 1024:
        assert "PID 562" in msg and "20998 MiB" in msg and "limit 1024 MiB" in msg
        # The play's one look read them and only reported the refusal; the preflight refused on it.
        assert run.result(LOOK)["gpus"]["foreign_mib_by_gpu"] == {"0": 20998}
        assert run.result(LOOK)["gpus"]["foreign_refusal"] == msg
    elif tp == 2:
        assert "PID 562" in msg
        assert [r["item"]["index"] for r in run.failures()[0]["results"] if r.get("failed")] == [0]


def test_check_diff_on_a_fresh_host_is_clean_and_touches_nothing(host):
    fresh = os.path.join(host["prefix"], "fresh")
    run = host["play"]("--check", "--diff", prefix_=fresh, port_=free_port())
    assert run.rc == 0, run
    assert run.stats["failures"] == 0
    assert run.result("Install the pinned SGLang into its versioned virtualenv")["changed"] is True
    launch = run.result("Launch SGLang and wait for health")
    assert launch["changed"] is True and launch["restart_reason"] == "not running" and "would start" in launch["msg"]
    assert not os.path.exists(fresh)


FAKE_NVIDIA_SMI_OURS = """#!/bin/sh
# One H200 on which our server's leader (from the pidfile) holds 20998 MiB while it is alive.
pid=$(cat %(run)s/sglang.pid 2>/dev/null)
used=9
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then used=21007; else pid=; fi
case "$1" in
  --query-gpu=index,memory.used) echo "0, $used" ;;
  --query-gpu=*) echo "0, GPU-8d9a908f-8223-a2b4-18a6-444d8fbdb0d2, NVIDIA H200, 143771, $used, $((143771 - used))" ;;
  --query-compute-apps=*) [ -n "$pid" ] && echo "$pid, python3, GPU-8d9a908f-8223-a2b4-18a6-444d8fbdb0d2, 20998" ;;
  -q) exec cat "%(fitness)s/../h100-80gb-hbm3/q.xml" ;;
  nvlink) exec cat "%(fitness)s/../h100-80gb-hbm3/nvlink-s.txt" ;;
  *) exit 2 ;;
esac
exit 0
"""


def test_restart_stops_our_old_server_and_waits_for_its_gpu_memory(host, serving, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI_OURS % {"run": os.path.join(host["prefix"], "var/lib/eagle-deploy/run"),
                                           "fitness": FITNESS})
    fake.chmod(0o755)
    old = serving["pid"]
    gpu = ["-e", "sglang_server_gpu_expected=true", "-e", "sglang_server_tp_size=1",
           "-e", "sglang_server_min_free_gpu_memory_mib=100000"]
    steps = 5 if "speculative-num-steps: 5" not in open(os.path.join(host["prefix"], "etc/sglang/sglang.yaml")).read() else 7
    run = host["play"](*(gpu + ["-e", "sglang_server_speculative_num_steps=%d" % steps]), path_prepend=str(bindir))
    assert run.rc == 0, run
    # Our server's 20998 MiB count as free for the preflight (it is ours), and are not "foreign".
    assert [p["ours"] for p in run.result(LOOK)["gpus"]["processes"]] == [True]  # the play's one look read them
    # One call stops our old server, waits for its GPU memory and launches the new one.
    launch = run.result("Launch SGLang and wait for health")
    assert launch["changed"] is True and launch["pid"] != old
    assert old in launch["stopped"]["signalled"]
    released = launch["gpu_release"]
    # The wait ended on the poll that saw the memory back (the fake nvidia-smi shows 9 MiB once our leader is gone).
    assert released["polls"] >= 1 and released["gpus"][0]["memory_used_mib"] == 9


def _patched_file(host):
    found = [os.path.join(d, f) for d, _, fs in os.walk(host["prefix"]) for f in fs
             if f == "eagle_worker_v2.py" and d.endswith("sglang/srt/speculative")]
    return found


def test_check_diff_shows_the_patch_where_it_is_not_applied(host, converged):
    run = host["play"]("-e", "sglang_patch_enabled=false")
    assert run.rc == 0, run
    (path,) = [p for p in _patched_file(host) if "venv-0.5.23" in p]
    before = open(path, "rb").read()
    assert b"eagle-deploy early-init patch" not in before
    run = host["play"]("--check", "--diff")
    assert run.rc == 0, run
    patch = run.result("Apply the EAGLEWorkerV2 early-init patch")
    assert patch["changed"] is True
    after_text = patch["diff"][0]["after"] if isinstance(patch["diff"], list) else patch["diff"]["after"]
    assert "self.spec_disable_batch_threshold = 0" in after_text
    assert open(path, "rb").read() == before  # check mode wrote nothing
    run = host["play"]()
    assert run.rc == 0, run
    assert b"self.spec_disable_batch_threshold = 0" in open(path, "rb").read()


def _good_record(host):
    with open(os.path.join(run_dir(host), "sglang.good.json")) as f:
        return json.load(f)["deployments"]


def test_a_failed_upgrade_rolls_back_and_the_fixed_upgrade_reinstalls_repatches_and_restarts(host, converged):
    # The last good deployment: SGLang 0.5.23, patched, the eagle scenario; its start passed the smoke test and the
    # speculation check, and recorded it (root, 0600, in the run dir).
    run = host["play"]("-e", "sglang_emulator_scenario=eagle", "-e", "sglang_server_smoke_always=true")
    assert run.rc == 0, run
    (path,) = [p for p in _patched_file(host) if "venv-0.5.23" in p]
    assert b"self.spec_disable_batch_threshold = 0" in open(path, "rb").read()
    assert run.result(LAUNCH)["pid"] == run_state(host)["pid"]
    assert run.result("Check that every burst request generated tokens")["msg"].startswith("burst: 8/8")
    good = run_state(host)
    (rec,) = _good_record(host)
    assert rec["fingerprint"] == good["fingerprint"] and rec["fingerprint_data"]["sglang_version"] == "0.5.23"
    assert stat.S_IMODE(os.stat(os.path.join(run_dir(host), "sglang.good.json")).st_mode) == 0o600
    # the key's one copy on disk is the server's config: the record's copy of it holds a mark in its place
    for top, _dirs, files in os.walk(run_dir(host)):
        for fname in files:
            with open(os.path.join(top, fname), "rb") as handle:
                assert API_KEY.encode() not in handle.read(), os.path.join(top, fname)
    new = ("-e", "sglang_emulator_scenario=eagle", "-e", "sglang_install_version=0.5.20",
           "-e", "sglang_patch_enabled=false", "-e", "sglang_server_rollback=true")
    # --check says what a failure of the start it would make would roll back to, and touches nothing
    check = host["play"](*new, "--check")
    assert check.rc == 0, check
    assert check.result("Say what a failed start would roll back to")["msg"] == (
        "if this start fails: would roll back to %s, SGLang 0.5.23" % good["fingerprint"][:16])
    assert run_state(host)["pid"] == good["pid"]
    # The incident as an upgrade: another SGLang version in its own venv, the patch off. The first decode crashes;
    # the last good deployment is put back (its venv, its files as recorded) and serves.
    run = host["play"](*new)
    assert run.rc != 0, run
    assert run.result("Install the pinned SGLang into its versioned virtualenv")["changed"] is True
    assert "crash class: first_request_crash" in run.result("Show why the smoke test failed")["msg"]
    msg = run.failure_msgs()[-1]
    now = run_state(host)
    assert now["fingerprint"] == good["fingerprint"] and now["pid"] != good["pid"]
    assert msg.endswith("why is shown just above; rolled back to %s, SGLang 0.5.23, serving, pid %d"
                        % (good["fingerprint"][:16], now["pid"])), msg
    assert get(host, "/health_generate")[0] == 200
    assert API_KEY not in json.dumps(run.out)
    # The next run with the fix (the patch on) tries the new version again: patched, one restart, and it serves;
    # it is the last good deployment now. The run after it changes nothing.
    run = host["play"](*new[:4], "-e", "sglang_server_rollback=true")
    assert run.rc == 0, run
    assert run.result("Apply the EAGLEWorkerV2 early-init patch")["changed"] is True
    (path,) = [p for p in _patched_file(host) if "venv-0.5.20" in p]
    assert b"self.spec_disable_batch_threshold = 0" in open(path, "rb").read()
    launch = run.result(LAUNCH)
    assert launch["changed"] is True and launch["pid"] != now["pid"] and "data sglang_version" in launch["restart_reason"]
    assert [d["fingerprint_data"]["sglang_version"] for d in _good_record(host)] == ["0.5.20"]
    again = host["play"](*new[:4], "-e", "sglang_server_rollback=true")
    assert again.rc == 0 and again.stats["changed"] == 0, again
