"""wait_for_model on a host shared with a less privileged service user, and with bad input (issue 8).

Fake clock, fake launcher, fake HTTP, fake /proc view (tests/unit/module_harness.py): no test spawns a
process or sleeps. Where a test needs a live process that is "ours", it records this test process's own
identity and replaces stop_tree with a recorder, so nothing is ever signalled."""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile

import pytest

from ansible.module_utils import sglang_proc

import wait_for_model as wfm
from ansible.module_utils import sglang_launch
from ansible.module_utils import sglang_plan
from ansible.module_utils import sglang_verdict
from ansible.module_utils import sglang_exec
from module_harness import (  # noqa: F401 - fixtures
    SCHED_CRASH, append, later, module_exits, record_self_as_server, run, serve, stops, world,
)

pytestmark = pytest.mark.usefixtures("module_exits")

NOBODY = 65534
SPAWN_WORKER = [sys.executable, "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
                "--multiprocessing-fork"]


# ------------------------------------------------------------------ item 2: run state only root can write
def test_state_file_written_by_another_user_is_refused_and_nothing_signalled(world, stops):
    record_self_as_server(world)
    os.chown(os.path.join(world.log_dir, "sglang.json"), NOBODY, NOBODY)
    status, r = run(world, state="stopped")
    assert status == "failed" and "not trusted" in r["msg"] and "uid %d" % NOBODY in r["msg"]
    assert stops == []


def test_run_dir_writable_by_others_is_refused(world, stops):
    record_self_as_server(world)
    os.chmod(world.log_dir, 0o777)
    status, r = run(world, state="stopped")
    assert status == "failed" and "writable by its group or by others" in r["msg"]
    assert stops == []
    status, r = run(world, force_restart=True)
    assert status == "failed" and "not trusted" in r["msg"]
    assert stops == [] and world.spawned == []


def test_state_file_that_is_a_symlink_is_refused(world, stops):
    state = record_self_as_server(world)
    real = os.path.join(world.log_dir, "elsewhere.json")
    os.rename(os.path.join(world.log_dir, "sglang.json"), real)
    os.symlink(real, os.path.join(world.log_dir, "sglang.json"))
    status, r = run(world, state="stopped")
    assert status == "failed" and "symlink" in r["msg"]
    assert stops == [] and state["pid"] == os.getpid()


def test_untrusted_state_is_never_ours_for_the_tree_helpers(world):
    record_self_as_server(world)
    os.chown(os.path.join(world.log_dir, "sglang.json"), NOBODY, NOBODY)
    state = sglang_proc.read_state(world.log_dir, "sglang")
    assert state["untrusted"] and state["pid"] is None
    assert "not trusted" in sglang_proc.why_not_ours(state)
    assert sglang_proc.our_tree(state) == {} and sglang_proc.orphans_of(state) == {}


@pytest.fixture
def secret(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("root-only") / "shadow")
    with open(path, "w") as fh:
        fh.write("root:SECRET-HASH:19000:0:99999:7:::\n")
    os.chmod(path, 0o600)
    return path


def test_log_path_outside_log_dir_is_never_read(world, stops, secret):
    record_self_as_server(world, log_path=secret)
    world.health = lambda t: 200
    status, r = run(world, state="watched")
    assert status == "failed" and "not under log_dir" in r["msg"]
    assert "SECRET" not in json.dumps(r)


def test_log_symlink_out_of_log_dir_is_never_followed(world, stops, secret):
    record_self_as_server(world)
    os.unlink(os.path.join(world.log_dir, "sglang_r1.log"))
    os.symlink(secret, os.path.join(world.log_dir, "sglang_r1.log"))
    world.health = lambda t: 200
    status, r = run(world, state="watched")
    assert status == "failed" and "not under log_dir" in r["msg"]
    assert "SECRET" not in json.dumps(r)


def test_log_the_service_user_cannot_read_is_never_printed(world, stops):
    # A root-only file inside log_dir (a hard link, say): the service user could not read it.
    record_self_as_server(world, log_text="root:SECRET-HASH\n", user="nobody")
    os.chmod(os.path.join(world.log_dir, "sglang_r1.log"), 0o600)
    world.health = lambda t: 200
    status, r = run(world, state="watched")
    assert status == "failed" and "service user can read" in r["msg"]
    assert "SECRET" not in json.dumps(r)


# ------------------------------------------------------------------ item 3: one run at a time
def _hold_lock(world, holder):
    fd = os.open(os.path.join(world.log_dir, "sglang.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: conflicts like another process
    os.write(fd, json.dumps(holder).encode())
    return fd


def test_lock_held_by_another_run_fails_after_lock_timeout_naming_the_holder(world, stops):
    record_self_as_server(world)
    fd = _hold_lock(world, {"pid": 4242, "since": 1767225600.0, "state": "started"})
    try:
        t0 = world.now
        status, r = run(world, force_restart=True, lock_timeout=5)
    finally:
        os.close(fd)
    assert status == "failed"
    assert "another run holds the lock for sglang since " in r["msg"] and "(pid 4242, state started)" in r["msg"]
    assert 5 <= world.now - t0 <= 5.5
    assert world.spawned == [] and stops == []


def test_injected_busy_lock_is_waited_for_then_taken(world):
    calls = []

    def locker(fd, op):
        calls.append(op)
        if len(calls) <= 10:
            raise BlockingIOError(errno.EWOULDBLOCK, "busy")
    world.health = lambda t: 200
    status, r = run(world, inject={"locker": locker}, lock_timeout=60)
    assert status == "ok" and len(world.spawned) == 1
    assert r["lock_wait"] == pytest.approx(2.0, abs=0.01)
    assert all(op == fcntl.LOCK_EX | fcntl.LOCK_NB for op in calls)
    holder = json.load(open(os.path.join(world.log_dir, "sglang.lock")))
    assert holder["pid"] == os.getpid() and holder["state"] == "started"


def test_check_mode_takes_the_lock_shared_and_creates_no_lock_file(world):
    ops = []
    status, r = run(world, check_mode=True, inject={"locker": lambda fd, op: ops.append(op)})
    assert status == "ok" and ops == [] and not os.path.exists(os.path.join(world.log_dir, "sglang.lock"))
    open(os.path.join(world.log_dir, "sglang.lock"), "w").close()
    status, r = run(world, check_mode=True, inject={"locker": lambda fd, op: ops.append(op)})
    assert ops == [fcntl.LOCK_SH | fcntl.LOCK_NB]


# ------------------------------------------------------------------ items 4, 5, 8: every input first
@pytest.mark.parametrize("args, needle", [
    ({"port": 99999}, "port 99999 is out of range"),
    ({"port": 70000}, "port 70000 is out of range"),
    ({"port": -1}, "port -1 is out of range"),
    ({"health_url": "http://127.0.0.1:99999/health_generate"}, "health_url"),
    ({"health_url": "http://127.0.0.1:http/health"}, "invalid port"),
    ({"stop_timeout": -1}, "stop_timeout must be >= 0"),
    ({"settle_time": -0.5}, "settle_time must be >= 0"),
    ({"child_grace": -1}, "child_grace must be >= 0"),
    ({"log_tail_lines": -1}, "log_tail_lines must be >= 0"),
    ({"keep_attempts": -1}, "keep_attempts must be >= 0"),
    ({"watch_time": -1}, "watch_time must be >= 0"),
    ({"lock_timeout": -1}, "lock_timeout must be >= 0"),
    ({"unhealthy_after": 0}, "unhealthy_after must be >= 1"),
    ({"health_timeout": 0}, "health_timeout must be > 0"),
    ({"poll_interval": float("nan")}, "poll_interval must be a finite number"),
    ({"name": "../x"}, "name '../x' is not allowed"),
    ({"name": "a/b"}, "name 'a/b' is not allowed"),
    ({"name": ".."}, "is not allowed"),
    ({"argv": ["/nonexistent/bin/python", "-m", "sglang.launch_server"]}, "argv[0] /nonexistent/bin/python was not found"),
    ({"argv": ["no-such-binary-eagle-deploy"]}, "argv[0] no-such-binary-eagle-deploy was not found"),
    ({"chdir": "/nonexistent/dir"}, "chdir /nonexistent/dir does not exist"),
])
def test_bad_input_is_refused_before_our_server_is_stopped(world, stops, args, needle):
    record_self_as_server(world)  # a healthy server of ours with another fingerprint: it would be restarted
    status, r = run(world, **args)
    assert status == "failed" and needle in r["msg"], r["msg"]
    assert "crash_class" not in r and "hint" not in r
    assert stops == [] and world.spawned == []
    assert sorted(os.listdir(world.log_dir)) == ["sglang.json", "sglang.pid", "sglang_r1.log"]


@pytest.mark.parametrize("state", ["stopped", "watched"])
def test_bad_name_is_refused_for_every_state(world, stops, state):
    status, r = run(world, state=state, name="../x")
    assert status == "failed" and "is not allowed" in r["msg"] and stops == []


def test_missing_argv_binary_leaves_no_log_files(world):
    status, r = run(world, argv=["/nonexistent/bin/python"])
    assert status == "failed" and "argv[0]" in r["msg"]
    assert os.listdir(world.log_dir) == []


def test_unwritable_run_dir_is_refused_before_anything(world, stops, monkeypatch):
    record_self_as_server(world)

    def mkstemp(prefix="", dir=None):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    status, r = run(world)
    assert status == "failed" and "run_dir %s is not writable (Read-only file system)" % world.log_dir in r["msg"]
    assert stops == [] and world.spawned == []


def test_full_disk_is_refused_before_anything(world, stops, monkeypatch):
    record_self_as_server(world)
    real = os.statvfs

    class Full(object):
        f_bavail, f_frsize = 10, 4096
    monkeypatch.setattr(wfm.os, "statvfs", lambda path: Full() if path == world.log_dir else real(path))
    status, r = run(world)
    assert status == "failed" and "0 MiB free, less than min_free_space_mib (64)" in r["msg"]
    assert stops == [] and world.spawned == []


def test_state_write_failure_kills_the_server_just_started(world, monkeypatch):
    def full(run_dir, name, state):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(sglang_proc, "write_state", full)
    world.health = lambda t: 200
    status, r = run(world)
    assert status == "failed"
    assert "could not record the run state" in r["msg"] and "No space left on device" in r["msg"]
    assert "was killed" in r["msg"] and "crash_class" not in r
    assert world.rc is not None  # the supervisor ended the server it had just started (nobody could stop it later)


# ------------------------------------------------------------------ item 6: watched is careful
# A watch waits on the supervisor's status file (module_harness.serve: a fake supervisor that serves on) and asks
# health itself; it stops nothing, whatever it finds (the supervisor ends a server whose failure it decided).
def _hangs_after(world, seconds, text=SCHED_CRASH):
    """A crash line ``seconds`` from now, after which the server answers no health request (nothing exits)."""
    later(world, seconds, append(os.path.join(world.log_dir, "sglang.log"), text))
    later(world, seconds, lambda: setattr(world, "health", lambda t: None))


def test_watched_in_check_mode_never_signals(world, stops):
    serve(world)
    _hangs_after(world, 0.5)
    status, r = run(world, state="watched", check_mode=True, watch_time=5)
    assert status == "failed" and r["crash_class"] == "nccl", r
    # the watch's own requests failed in a row, named by the crash line that stands; the supervisor, for which
    # failed health while serving is only a question (busy or stuck), stops nothing, and check mode signals nothing
    assert "would_stop" not in r and "stopped_after_failure" not in r
    assert stops == [] and world.rc is None


def test_watched_a_single_failed_poll_at_the_end_is_not_unhealthy(world, stops):
    serve(world)
    t0 = world.now
    seen = []

    def http(url, headers, timeout):
        seen.append((world.now - t0, timeout))
        # slow answers (timeouts) for 2 polls right at the end of the window, then 200 again
        return None if world.now - t0 >= 3 and len([s for s in seen if s[0] >= 3]) <= 2 else 200
    status, r = run(world, state="watched", watch_time=3, inject={"http": http})
    assert status == "ok", r["msg"]
    assert r["health_polls"] == {"polls": len(seen), "failed_in_a_row": 0, "last": 200}
    assert stops == [] and len([s for s in seen if s[0] >= 3]) == 3  # two failed, the third answered
    assert all(timeout == 25.0 for _, timeout in seen)  # health_timeout raised past the server's 20 s window


def test_watched_unhealthy_after_consecutive_failed_polls(world, stops):
    serve(world)
    polls = []
    status, r = run(world, state="watched", watch_time=3, unhealthy_after=4,
                    inject={"http": lambda url, headers, timeout: polls.append(world.now) or 503})
    assert status == "failed" and r["crash_class"] == "unhealthy"
    assert r["health_polls"]["failed_in_a_row"] == 4 and len(polls) == 4
    assert all(b - a >= 1.0 for a, b in zip(polls, polls[1:]))  # failed polls are at least 1 s apart
    assert stops == []


def test_watched_from_an_offset_ignores_an_old_crash_and_echoed_prompts(world, stops):
    serve(world)
    old = ("[2026-12-02 10:00:00] Receive: obj=GenerateReqInput(rid='1', text='Traceback (most recent call last): "
           "torch.OutOfMemoryError: CUDA out of memory')\n" + SCHED_CRASH)
    log = os.path.join(world.log_dir, "sglang.log")
    later(world, 0.5, append(log, old))
    for _ in range(20):
        world.sleep(0.1)  # the supervisor reads it, asks health (200) and sets the crash line aside
    end = os.path.getsize(log)
    status, r = run(world, state="watched", log_offset=end)
    assert status == "ok", r["msg"]
    assert r["log_watched_from"] == end and r["log_offset"] == end and "log_crash" not in r
    status, r = run(world, state="watched", log_offset=0)
    assert status == "ok" and r["log_crash"]["class"] == "nccl" and r["log_crash"]["acted_on"] is False
    assert stops == []


def test_watched_from_the_end_then_a_new_crash_is_caught_once_health_fails(world, stops):
    # A crash whose processes hang: the log explains, health failing in a row proves it (the supervisor's requests).
    serve(world)
    status, mark = run(world, state="watched", watch_time=0, log_offset=-1)
    assert status == "ok"
    _hangs_after(world, 0.2)
    status, r = run(world, state="watched", log_offset=mark["log_offset"], watch_time=3)
    assert status == "failed" and r["crash_class"] == "nccl" and r["log_watched_from"] == mark["log_offset"]
    assert r["evidence"].startswith("the health URL failed 3 requests in a row")
    assert stops == []  # the supervisor ends the failed tree, the module stops nothing


def test_a_crash_line_on_a_serving_server_that_keeps_answering_is_never_acted_on(world, stops):
    serve(world)
    later(world, 0.2, append(os.path.join(world.log_dir, "sglang.log"), SCHED_CRASH))
    status, r = run(world, state="watched", log_offset=0, watch_time=3)
    assert status == "ok" and r["log_crash"]["class"] == "nccl" and r["log_crash"]["acted_on"] is False
    assert stops == [] and world.rc is None and world.supervisors[0].poll() is None


def test_a_short_watch_waits_for_the_health_budget_before_it_says_anything_of_a_crash_line(world, stops):
    # One probe fits in a 0.2 s window; the crash needs unhealthy_after failures, so the watch goes on past it.
    serve(world, unhealthy_after=3, health_timeout=10)
    _hangs_after(world, 0.0)
    t0 = world.now
    status, r = run(world, state="watched", log_offset=0, watch_time=0.2, unhealthy_after=3, health_timeout=10)
    assert status == "failed" and r["crash_class"] == "nccl"
    assert world.now - t0 >= 2.0  # 3 requests, at least 1 s apart
    assert stops == []


def test_offset_inside_a_line_starts_at_the_next_line(world, stops):
    serve(world)
    log = os.path.join(world.log_dir, "sglang.log")
    start = os.path.getsize(log)
    text = "[2026-12-02 10:00:00] Receive: obj=GenerateReqInput(text='Scheduler hit an exception: Traceback')\nnext\n"
    later(world, 0.1, append(log, text))
    for _ in range(3):
        world.sleep(0.1)
    status, r = run(world, state="watched", log_offset=start + 30)
    assert status == "ok" and r["log_watched_from"] == start + text.index("next")


def test_started_returns_the_log_offset_when_it_keeps_the_server(world, stops):
    argv = [sys.executable, "-m", "sglang.launch_server", "--config", "/etc/sglang.yaml"]  # run()'s default
    parts = sglang_plan.fingerprint_parts(argv, {}, [], {}, None, {})
    record_self_as_server(world, fingerprint=sglang_plan.fingerprint_of(parts), log_text="line one\nline two\n")
    world.health = lambda t: 200
    status, r = run(world, argv=argv)
    assert status == "ok" and r["changed"] is False
    assert r["log_offset"] == len("line one\nline two\n") and r["log_tail"] == ["line one", "line two"]
    assert stops == [] and world.spawned == []


# ------------------------------------------------------------------ item 8: a worker that dies young
def test_scheduler_that_dies_within_child_grace_is_child_died_not_stalled(world):
    world.children = {4100: 111, 4101: 222}
    world.cmdlines = {4100: SPAWN_WORKER, 4101: SPAWN_WORKER}
    world.write(0.2, "[2026-12-02 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n")
    world.at(1.0, lambda: world.children.pop(4100))
    status, r = run(world, child_grace=2.0, stall_timeout=900)
    assert status == "failed" and r["crash_class"] == "child_died" and r["dead_child_pid"] == 4100
    assert r["elapsed"] < 2


def test_sglang_titled_worker_is_long_lived_from_birth(world):
    world.children = {4100: 111}
    world.cmdlines = {4100: ["sglang::scheduler_TP0"]}
    world.at(0.5, lambda: world.children.pop(4100))
    status, r = run(world, child_grace=2.0)
    assert status == "failed" and r["crash_class"] == "child_died"


# ------------------------------------------------------------------ process tree: our own cgroup
class FakeCgroups(object):
    def __init__(self, joined=True):
        self.joined = joined
        self.created = []
        self.removed = []

    def create(self, name):
        self.created.append("/eagle-deploy-" + name)
        return "/sys/fs/cgroup", self.created[-1]

    def of(self, pid):
        return self.created[-1] if self.joined else "/user.slice/session-3.scope"

    def remove(self, mount, path):
        self.removed.append(path)
        return True


def _deployment_cgroup(run_dir, name="sglang"):
    return "/eagle-deploy-%s-%s" % (name, hashlib.sha256(os.path.realpath(run_dir).encode()).hexdigest()[:12])


def test_launch_in_our_own_cgroup_is_recorded(world):
    world.health = lambda t: 200
    status, r = run(world, inject={"cgroups": FakeCgroups()})
    assert status == "ok" and r["tree_tracking"] == "cgroup"
    rel = _deployment_cgroup(world.log_dir)
    # the supervisor is born in the deployment's cgroup; the server it starts is its child there
    assert world.supervisor_cgroup_procs == "/sys/fs/cgroup%s/cgroup.procs" % rel
    state = json.load(open(os.path.join(world.log_dir, "sglang.json")))
    assert state["cgroup"] == {"mount": "/sys/fs/cgroup", "path": rel, "dedicated": True}
    assert state["tree_tracking"] == "cgroup"


def test_server_that_did_not_join_its_cgroup_falls_back_to_the_session(world):
    world.health = lambda t: 200
    cg = FakeCgroups(joined=False)
    world.supervisor_joins = False
    status, r = run(world, inject={"cgroups": cg})
    assert status == "ok" and r["tree_tracking"] == "session" and "did not join" in r["tree_tracking_note"]
    assert cg.removed == [_deployment_cgroup(world.log_dir)]
    assert json.load(open(os.path.join(world.log_dir, "sglang.json")))["cgroup"] is None


def test_host_without_cgroups_tracks_the_session_and_says_why(world):
    world.health = lambda t: 200
    status, r = run(world)
    assert status == "ok" and r["tree_tracking"] == "session" and "Read-only file system" in r["tree_tracking_note"]
    assert world.spawned[0]["cgroup_procs"] is None


# ------------------------------------------------------------------ a run dir nobody else can swap
def test_run_dir_that_is_a_planted_symlink_signals_nothing_and_writes_nothing(world, stops, tmp_path_factory):
    # The service user replaced its run dir with a symlink to a root-owned directory holding another
    # deployment's (trusted) run state.
    record_self_as_server(world)
    planted = str(tmp_path_factory.mktemp("service-home") / "run")
    os.symlink(world.log_dir, planted)
    before = sorted(os.listdir(world.log_dir))
    status, r = run(world, state="stopped", run_dir=planted)
    assert status == "failed" and "is a symlink" in r["msg"] and "nothing is signalled" in r["msg"]
    status, r = run(world, force_restart=True, run_dir=planted)
    assert status == "failed" and "is a symlink" in r["msg"]
    assert stops == [] and world.spawned == [] and sorted(os.listdir(world.log_dir)) == before


def test_run_dir_inside_the_service_users_home_is_refused(world, stops, tmp_path_factory):
    home = str(tmp_path_factory.mktemp("home"))
    run_dir = os.path.join(home, "run")
    os.mkdir(run_dir, 0o755)
    record_self_as_server(world)
    sglang_proc.write_state(run_dir, "sglang", json.load(open(os.path.join(world.log_dir, "sglang.json"))))
    os.chown(home, NOBODY, NOBODY)  # the service user owns the directory above the (root-owned) run dir
    status, r = run(world, state="stopped", run_dir=run_dir)
    assert status == "failed" and "above it is owned by uid %d" % NOBODY in r["msg"]
    assert stops == [] and sorted(os.listdir(run_dir)) == ["sglang.json", "sglang.pid"]


# ------------------------------------------------------------------ every launch precondition, as the service user
@pytest.fixture
def shared_tmp():
    """A directory under /tmp that every user can enter (pytest's own tmp dirs are root's, mode 0700)."""
    path = tempfile.mkdtemp(prefix="eagle-deploy-test-", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def _script(path, text, mode=0o755):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, mode)
    return path


@pytest.mark.parametrize("interpreter, needle", [
    ("/nonexistent/venv/bin/python", "/nonexistent does not exist"),
    ("venv-link", "/python3.99-gone does not exist"),       # the venv's python: a symlink to a removed python
    ("/usr/bin/env no-such-interpreter-eagle", "'env no-such-interpreter-eagle'"),
    ("", "empty #! line"),
])
def test_console_script_whose_interpreter_is_gone_stops_nothing(world, stops, shared_tmp, interpreter, needle):
    record_self_as_server(world)
    if interpreter == "venv-link":
        interpreter = os.path.join(shared_tmp, "venv", "bin", "python")
        os.makedirs(os.path.dirname(interpreter))
        os.symlink("/usr/bin/python3.99-gone", interpreter)
    script = _script(os.path.join(shared_tmp, "venv", "bin", "sglang"), "#!%s\nimport sys\n" % interpreter)
    status, r = run(world, argv=[script, "serve"])
    assert status == "failed" and needle in r["msg"] and "Nothing was stopped or launched" in r["msg"], r["msg"]
    assert "cannot be run by" in r["msg"]
    assert stops == [] and world.spawned == [] and world.probed == []
    assert sorted(os.listdir(world.log_dir)) == ["sglang.json", "sglang.pid", "sglang_r1.log"]


def test_program_under_a_directory_the_service_user_cannot_enter_stops_nothing(world, stops, shared_tmp):
    record_self_as_server(world)
    private = os.path.join(shared_tmp, "private")
    os.mkdir(private, 0o700)  # root's
    exe = _script(os.path.join(private, "bin", "server"), "#!/bin/sh\nexit 0\n")
    status, r = run(world, argv=[exe], run_as="nobody")
    assert status == "failed" and "cannot be run by nobody" in r["msg"], r["msg"]
    assert "directory %s cannot be entered" % private in r["msg"] and "Nothing was stopped or launched" in r["msg"]
    assert stops == [] and world.spawned == []


def test_script_the_service_user_cannot_read_stops_nothing(world, stops, shared_tmp):
    record_self_as_server(world)
    exe = _script(os.path.join(shared_tmp, "bin", "server"), "#!/bin/sh\nexit 0\n", mode=0o711)
    status, r = run(world, argv=[exe], run_as="nobody")
    assert status == "failed" and "is not readable by the user" in r["msg"], r["msg"]
    assert stops == [] and world.spawned == []


def test_chdir_the_service_user_cannot_enter_stops_nothing(world, stops, shared_tmp):
    record_self_as_server(world)
    exe = _script(os.path.join(shared_tmp, "bin", "server"), "#!/bin/sh\nexit 0\n")
    work = os.path.join(shared_tmp, "work")
    os.mkdir(work, 0o700)
    status, r = run(world, argv=[exe], chdir=work, run_as="nobody")
    assert status == "failed" and "chdir %s cannot be entered by nobody" % work in r["msg"], r["msg"]
    assert stops == [] and world.spawned == []


def test_interpreter_that_does_not_start_stops_nothing(world, stops, shared_tmp):
    record_self_as_server(world)
    exe = _script(os.path.join(shared_tmp, "venv", "bin", "sglang"), "#!%s\nimport sys\n" % sys.executable)
    world.probe_rc, world.probe_output = 1, "Fatal Python error: init_fs_encoding: failed to get the Python codec"
    status, r = run(world, argv=[exe, "serve"])
    assert status == "failed" and "does not run as" in r["msg"] and "init_fs_encoding" in r["msg"], r["msg"]
    assert "Nothing was stopped or launched" in r["msg"]
    assert world.probed == [[sys.executable, "-c", ""]]
    assert stops == [] and world.spawned == []


def test_a_runnable_env_script_is_proven_then_launched(world, stops, shared_tmp):
    record_self_as_server(world)
    exe = _script(os.path.join(shared_tmp, "bin", "server"), "#!/usr/bin/env python3\nimport sys\n")
    world.health = lambda t: 200
    status, r = run(world, argv=[exe], run_as="nobody")
    assert status == "ok", r["msg"]
    assert len(world.probed) == 1 and os.path.basename(world.probed[0][0]).startswith("python3")
    assert world.probed[0][1:] == ["-c", ""]
    assert stops == [os.getpid()] and len(world.spawned) == 1


def test_check_mode_proves_nothing_by_running_it(world, stops, shared_tmp):
    record_self_as_server(world)
    exe = _script(os.path.join(shared_tmp, "venv", "bin", "sglang"), "#!%s\n" % sys.executable)
    status, r = run(world, argv=[exe], check_mode=True)
    assert status == "ok" and r["changed"] is True and world.probed == [] and stops == []


# ------------------------------------------------------------------ a run token marks what we launched
def test_every_launch_carries_a_fresh_run_token_in_its_environment_and_record(world):
    world.health = lambda t: 200
    tokens = []
    for _ in range(2):
        status, r = run(world, force_restart=True, stop_timeout=1)
        assert status == "ok", r["msg"]
        state = json.load(open(os.path.join(world.log_dir, "sglang.json")))
        assert world.spawned[-1]["env"]["EAGLE_DEPLOY_RUN"] == state["run_token"]
        tokens.append(state["run_token"])
    assert tokens[0] != tokens[1] and all(t.startswith("sglang:") and len(t) == len("sglang:") + 32 for t in tokens)


def test_the_run_token_variable_cannot_be_set_by_the_caller(world, stops):
    status, r = run(world, environment={"EAGLE_DEPLOY_RUN": "sglang:forged"})
    assert status == "failed" and "set by wait_for_model itself" in r["msg"] and world.spawned == []


# ------------------------------------------------------------------ one cgroup per deployment
def test_two_deployments_of_one_name_ask_for_two_cgroups(world, tmp_path_factory):
    other = str(tmp_path_factory.mktemp("other-run"))
    cg = FakeCgroups()
    world.health = lambda t: 200
    for run_dir in (world.log_dir, other):
        status, r = run(world, run_dir=run_dir, inject={"cgroups": cg})
        assert status == "ok", r["msg"]
    assert cg.created == [_deployment_cgroup(world.log_dir), _deployment_cgroup(other)]
    assert cg.created[0] != cg.created[1]


# ------------------------------------------------------------------ names and keys match as a whole
@pytest.mark.parametrize("state", ["started", "stopped", "watched"])
def test_name_with_a_trailing_newline_is_refused(world, stops, state):
    record_self_as_server(world)
    status, r = run(world, state=state, name="sglang\n", force_restart=True)
    assert status == "failed" and "is not allowed" in r["msg"], r["msg"]
    assert stops == [] and world.spawned == []
    assert sorted(os.listdir(world.log_dir)) == ["sglang.json", "sglang.pid", "sglang_r1.log"]


@pytest.mark.parametrize("source", ["environment", "secret_environment"])
def test_variable_name_with_a_trailing_newline_is_refused(world, stops, source):
    status, r = run(world, **{source: {"FOO\n": "1"}})
    assert status == "failed" and "is not a valid variable name" in r["msg"] and world.spawned == []


def test_exec_problem_follows_env_options_and_nested_interpreters(shared_tmp):
    ids = (NOBODY, [NOBODY])
    path = "/usr/bin:/bin"
    env_s = _script(os.path.join(shared_tmp, "env-s"), "#!/usr/bin/env -S python3 -u\n")
    assert sglang_exec.exec_problem(env_s, ids, path, "/") == (None, "/usr/bin/python3")
    # A script whose interpreter is itself a script (allowed by the kernel a few levels deep).
    inner = _script(os.path.join(shared_tmp, "inner"), "#!/bin/sh\nexec \"$@\"\n")
    outer = _script(os.path.join(shared_tmp, "outer"), "#!%s\n" % inner)
    assert sglang_exec.exec_problem(outer, ids, path, "/") == (None, "/bin/sh")
    loop = _script(os.path.join(shared_tmp, "loop"), "#!%s\n" % os.path.join(shared_tmp, "loop"))
    why, program = sglang_exec.exec_problem(loop, ids, path, "/")
    assert "nested #! interpreters" in why and program is None
    text = _script(os.path.join(shared_tmp, "data.txt"), "just text\n")
    why, _ = sglang_exec.exec_problem(text, ids, path, "/")
    assert why is None or "neither a program (ELF) nor a script" in why  # binfmt_misc may run anything


def test_walk_as_resolves_symlinks_and_dot_dot_like_the_kernel(shared_tmp):
    real = os.path.join(shared_tmp, "real", "bin")
    os.makedirs(real)
    os.symlink(real, os.path.join(shared_tmp, "link"))
    ids = (NOBODY, [NOBODY])
    # link -> real/bin, so link/.. is real (not shared_tmp, as a lexical normpath would say)
    assert sglang_exec.walk_as(os.path.join(shared_tmp, "link", "..", "bin"), ids) == (real, None)
    os.chmod(os.path.join(shared_tmp, "real"), 0o700)
    real_path, why = sglang_exec.walk_as(os.path.join(shared_tmp, "link", "x"), ids)
    assert real_path is None and "directory %s cannot be entered" % os.path.join(shared_tmp, "real") in why
    assert sglang_exec.walk_as(os.path.join(shared_tmp, "link", "x"), (0, [0]))[1] == "%s/x does not exist" % real


def test_a_check_mode_plan_with_prove_launch_fails_when_the_new_server_could_not_start(world, stops, shared_tmp):
    # The role's GPU path: a check-mode plan, then a stop of our server to free its GPUs, then the launch. The plan
    # proves the launch, so a venv whose Python does not start fails before the stop.
    record_self_as_server(world)
    exe = _script(os.path.join(shared_tmp, "venv", "bin", "sglang"), "#!%s\n" % sys.executable)
    world.probe_rc, world.probe_output = 127, "error while loading shared libraries: libpython3.12.so.1.0"
    status, r = run(world, argv=[exe], check_mode=True, prove_launch=True)
    assert status == "failed" and "libpython3.12" in r["msg"] and "Nothing was stopped or launched" in r["msg"]
    assert world.probed == [[sys.executable, "-c", ""]] and stops == [] and world.spawned == []
    gone = _script(os.path.join(shared_tmp, "venv", "bin", "sglang2"), "#!/nonexistent/venv/bin/python\n")
    status, r = run(world, argv=[gone], check_mode=True, prove_launch=True)
    assert status == "failed" and "cannot be run by" in r["msg"] and stops == []
    world.probe_rc = 0
    status, r = run(world, argv=[exe], check_mode=True, prove_launch=True)
    assert status == "ok" and r["changed"] is True and "would restart" in r["msg"] and stops == []


def test_a_log_name_with_a_trailing_newline_is_no_attempt_of_ours(world):
    # The service user owns log_dir and may create any name there: it never counts as an attempt, nor is it pruned.
    planted = os.path.join(world.log_dir, "sglang_r99999.log\n")
    open(planted, "w").close()
    assert sglang_verdict.next_attempt(world.log_dir, "sglang") == 1
    assert sglang_verdict.prune_attempts(world.log_dir, "sglang", 1) == [] and os.path.exists(planted)


# ------------------------------------------------------------------ the recorded supervisor
def test_a_supervisor_is_recognised_and_signalled_only_as_the_recorded_process(monkeypatch):
    sent = []
    monkeypatch.setattr(sglang_proc, "signal_verified", lambda pid, start, sig: sent.append((pid, start, sig)) or True)
    me = sglang_proc.identity(os.getpid())
    state = dict(me, watcher=dict(me))
    sups = sglang_launch.Supervisors()
    assert sups.alive(state)
    sups.terminate(state)
    assert sent == [(os.getpid(), me["start_time"], signal.SIGTERM)]  # through the pidfd-checked signal, never kill()
    for other in (dict(state, watcher=dict(me, start_time=me["start_time"] + 1)),  # a reused PID
                  dict(state, watcher=dict(me, cmdline=["other"])),
                  dict(state, boot_id="another boot"),
                  dict(state, untrusted="written by someone else")):
        assert not sups.alive(other)
        sups.terminate(other)
    assert len(sent) == 1
