"""sglang_proc: the server's own cgroup v2, against a fake /sys/fs/cgroup tree (a tmp dir), and the
trust checks of the run state. No process is spawned or signalled."""
from __future__ import annotations

import errno
import os

import pytest

from ansible.module_utils import sglang_proc as sp

HYBRID = """\
24 31 0:22 / /sys fs rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
33 24 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
35 33 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
"""
PURE_V2 = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
READ_ONLY = "29 23 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n"
SUBTREE = "29 23 0:26 /kubepods/pod1 /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n"


@pytest.mark.parametrize("text, mount", [
    (HYBRID, "/sys/fs/cgroup/unified"),
    (PURE_V2, "/sys/fs/cgroup"),
    (HYBRID + PURE_V2, "/sys/fs/cgroup"),
    (READ_ONLY, None),
    (SUBTREE, None),
    ("", None),
])
def test_cgroup2_mount_is_found_only_when_writable_at_its_root(text, mount):
    assert sp.cgroup2_mount(text) == mount


def _cg(root, rel, pids=()):
    path = os.path.join(str(root), rel.lstrip("/"))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "cgroup.procs"), "w") as fh:
        fh.write("".join("%d\n" % p for p in pids))
    return path


def test_create_reuses_an_empty_cgroup_of_ours_and_refuses_a_busy_one(tmp_path):
    _cg(tmp_path, "/user.slice/session-3.scope", [111, 222])
    _cg(tmp_path, "/user.slice/session-3.scope/eagle-deploy-sglang")
    rel = sp.create_cgroup("sglang", mount=str(tmp_path), parent="/user.slice/session-3.scope")
    assert rel == "/user.slice/session-3.scope/eagle-deploy-sglang"
    _cg(tmp_path, rel, [333])
    with pytest.raises(OSError) as e:
        sp.create_cgroup("sglang", mount=str(tmp_path), parent="/user.slice/session-3.scope")
    assert e.value.errno == errno.EBUSY and "333" in str(e.value)


def test_create_in_a_directory_that_is_no_cgroup_fails_and_leaves_nothing(tmp_path):
    # A plain directory (no cgroup.procs appears after mkdir): not cgroup v2.
    with pytest.raises(OSError) as e:
        sp.create_cgroup("sglang", mount=str(tmp_path), parent="/")
    assert "not a cgroup v2 directory" in str(e.value)
    assert os.listdir(str(tmp_path)) == []


def test_create_without_a_cgroup2_mount_fails(monkeypatch):
    monkeypatch.setattr(sp, "cgroup2_mount", lambda mountinfo=None: None)
    with pytest.raises(OSError) as e:
        sp.create_cgroup("sglang", parent="/")
    assert "no writable cgroup v2" in str(e.value)


def _state(tmp_path, rel, **extra):
    st = dict(sp.identity(os.getpid()), cgroup={"mount": str(tmp_path), "path": rel, "dedicated": True})
    st.update(extra)
    return st


def _table(*rows):
    """A fake process table: (pid, ppid, sid[, start_time])."""
    out = {}
    for row in rows:
        pid, ppid, sid = row[:3]
        out[pid] = {"ppid": ppid, "pgid": sid, "sid": sid, "state": "S", "start_time": row[3] if len(row) > 3 else 1}
    return out


def test_a_process_that_left_the_session_is_ours_when_it_is_in_our_cgroup(tmp_path):
    me = os.getpid()
    rel = "/eagle-deploy-sglang"
    _cg(tmp_path, rel, [me, 900001])
    _cg(tmp_path, rel + "/nested", [900002])  # a cgroup the server made below ours
    table = _table((me, 1, me), (900001, 1, 900001), (900002, 1, 900002), (900003, 1, 900003))
    tree = sp.our_tree(_state(tmp_path, rel), table)
    assert set(tree) == {me, 900001, 900002}  # 900001/2: double fork + setsid, still ours; 900003 is not


def test_a_shared_cgroup_never_makes_a_process_ours(tmp_path):
    me = os.getpid()
    table = _table((me, 1, me), (900001, 1, 900001))
    for rel, dedicated in (("/", True), ("/user.slice/session-3.scope", True), ("/eagle-deploy-sglang", False)):
        _cg(tmp_path, rel, [me, 900001])
        state = _state(tmp_path, rel)
        state["cgroup"]["dedicated"] = dedicated
        assert sp.dedicated_cgroup(state) is None
        assert set(sp.our_tree(state, table)) == {me}


def test_our_cgroup_is_not_trusted_from_a_record_that_is_not(tmp_path):
    rel = "/eagle-deploy-sglang"
    _cg(tmp_path, rel, [900001])
    assert sp.dedicated_cgroup(_state(tmp_path, rel)) == (str(tmp_path), rel)
    assert sp.dedicated_cgroup(_state(tmp_path, rel, boot_id="another-boot")) is None
    assert sp.dedicated_cgroup(_state(tmp_path, rel, untrusted="forged")) is None
    assert sp.dedicated_cgroup(_state(tmp_path, "/eagle-deploy-sglang/../user.slice")) is None


def test_orphans_in_our_cgroup_are_found_after_the_leader_died(tmp_path):
    rel = "/eagle-deploy-sglang"
    _cg(tmp_path, rel, [900001])
    state = _state(tmp_path, rel, pid=4000001)  # a leader PID that is not running
    table = _table((900001, 1, 900001), (900002, 1, 4000001, 5))
    state["start_time"] = 1
    # 900002 shares the dead leader's session id but carries no run token: not ours
    assert set(sp.orphans_of(state, table)) == {900001}


# ------------------------------------------------------------------ orphans: never by session id alone
@pytest.fixture
def procs_env(monkeypatch):
    """Fake /proc/PID/environ and uid: {pid: (uid, [VAR=value, ...])}."""
    procs = {}
    monkeypatch.setattr(sp, "proc_environ_has", lambda pid, key, value: "%s=%s" % (key, value) in procs.get(pid, (0, []))[1],
                        raising=False)
    monkeypatch.setattr(sp, "proc_uid", lambda pid: procs[pid][0] if pid in procs else None)
    return procs


def _dead_leader_state(**extra):
    st = {"pid": 4000001, "start_time": 100, "boot_id": sp.boot_id(), "cmdline": ["python3", "-m", "sglang.launch_server"],
          "user": "root", "run_token": "sglang:0123abcd"}
    st.update(extra)
    return st


def test_a_daemon_that_took_the_dead_leaders_session_id_is_not_an_orphan(procs_env):
    # PID 4000001 (our dead leader) was reused by a daemon that called setsid and forked: its workers have
    # our old session id, started after our leader, run as root, but carry no run token of ours.
    table = _table((900001, 1, 4000001, 200), (900002, 900001, 4000001, 201))
    procs_env.update({900001: (0, ["HOME=/root"]), 900002: (0, ["EAGLE_DEPLOY_RUN=other:99"])})
    assert sp.orphans_of(_dead_leader_state(), table) == {}


def test_an_orphan_needs_our_token_our_user_and_a_later_start(procs_env):
    token = "EAGLE_DEPLOY_RUN=sglang:0123abcd"
    table = _table(
        (900001, 1, 4000001, 200),       # ours: session, token, root, started after the leader
        (900002, 900001, 900002, 210),   # ours: a child of 900001 that left the session, token
        (900003, 1, 4000001, 200),       # another user (nobody)
        (900004, 1, 4000001, 50),        # started before our leader
        (900005, 900001, 900005, 220),   # a child of ours without the token (cleared environment)
        (900006, 1, 4000001, 300),       # another launch's token
    )
    procs_env.update({900001: (0, [token]), 900002: (0, [token]), 900003: (65534, [token]), 900004: (0, [token]),
                      900005: (0, []), 900006: (0, ["EAGLE_DEPLOY_RUN=sglang:ffff"])})
    assert set(sp.orphans_of(_dead_leader_state(), table)) == {900001, 900002}
    # A record without a token (or of an unknown user) adopts nothing by session.
    assert sp.orphans_of(_dead_leader_state(run_token=None), table) == {}
    assert sp.orphans_of(_dead_leader_state(user="no-such-user-eagle"), table) == {}


def test_proc_environ_has_reads_the_nul_separated_environment(monkeypatch, tmp_path):
    os.makedirs(str(tmp_path / "77"))
    (tmp_path / "77" / "environ").write_bytes(b"A=1\x00EAGLE_DEPLOY_RUN=sglang:ab\x00B=2\x00")
    monkeypatch.setattr(sp, "PROC", str(tmp_path))
    assert sp.proc_environ_has(77, "EAGLE_DEPLOY_RUN", "sglang:ab")
    assert not sp.proc_environ_has(77, "EAGLE_DEPLOY_RUN", "sglang:a")
    assert not sp.proc_environ_has(78, "EAGLE_DEPLOY_RUN", "sglang:ab")


# ------------------------------------------------------------------ one cgroup per deployment
def test_deployment_name_differs_per_run_dir_and_is_stable(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert sp.deployment_name("sglang", a) != sp.deployment_name("sglang", b)
    assert sp.deployment_name("sglang", a) == sp.deployment_name("sglang", a + "/")
    assert sp.deployment_name("sglang", a).startswith("sglang-") and len(sp.deployment_name("sglang", a)) == 19


def test_remove_cgroup_removes_the_empty_tree(tmp_path):
    rel = "/eagle-deploy-sglang"
    top = os.path.join(str(tmp_path), rel.lstrip("/"))
    os.makedirs(os.path.join(top, "nested"))
    assert sp.remove_cgroup(str(tmp_path), rel) is True and not os.path.exists(top)


def test_proc_cgroup_reads_the_v2_line(monkeypatch, tmp_path):
    os.makedirs(str(tmp_path / "77"))
    (tmp_path / "77" / "cgroup").write_text("4:memory:/x\n0::/user.slice/session-3.scope\n")
    monkeypatch.setattr(sp, "PROC", str(tmp_path))
    assert sp.proc_cgroup(77) == "/user.slice/session-3.scope"
    assert sp.proc_cgroup(78) is None


# ------------------------------------------------------------------ trust of the run state
def test_state_written_by_us_in_a_private_dir_is_trusted(tmp_path):
    sp.write_state(str(tmp_path), "s", {"pid": 5})
    assert sp.read_state(str(tmp_path), "s") == {"pid": 5}
    assert oct(os.stat(str(tmp_path / "s.json")).st_mode & 0o777) == "0o644"


@pytest.mark.parametrize("spoil, needle", [
    (lambda d: os.chown(os.path.join(d, "s.json"), 65534, 65534), "owned by uid 65534"),
    (lambda d: os.chmod(os.path.join(d, "s.json"), 0o666), "writable by its group or by others"),
    (lambda d: os.chmod(d, 0o770), "run_dir"),
    (lambda d: os.chown(d, 65534, 65534), "run_dir"),
])
def test_state_anyone_else_could_write_is_untrusted(tmp_path, spoil, needle):
    d = str(tmp_path)
    sp.write_state(d, "s", {"pid": os.getpid()})
    spoil(d)
    state = sp.read_state(d, "s")
    assert state["pid"] is None and needle in state["untrusted"]
    assert sp.why_not_ours(state) == state["untrusted"]


def test_write_state_refuses_an_untrusted_dir(tmp_path):
    os.chmod(str(tmp_path), 0o777)
    with pytest.raises(sp.UntrustedState):
        sp.write_state(str(tmp_path), "s", {"pid": 5})


def test_write_files_takes_text_or_bytes_and_fsyncs_when_asked(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(sp.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    d = str(tmp_path)
    os.chmod(d, 0o755)
    sp.write_files(d, (("t", "text\n"),))
    assert synced == [] and open(os.path.join(d, "t")).read() == "text\n"
    assert oct(os.stat(os.path.join(d, "t")).st_mode & 0o777) == "0o644"
    sp.write_files(d, (("b", b"\x00bytes\xff"), ("t", "again")), mode=0o600, fsync=True)
    assert len(synced) == 2 and sorted(os.listdir(d)) == ["b", "t"]  # no temporary file left
    assert open(os.path.join(d, "b"), "rb").read() == b"\x00bytes\xff" and open(os.path.join(d, "t")).read() == "again"
    assert {oct(os.stat(os.path.join(d, f)).st_mode & 0o777) for f in ("b", "t")} == {"0o600"}


# ------------------------------------------------------------------ the path to the run dir
def _trusted_dir(path, mode=0o755):
    os.makedirs(path)
    os.chmod(path, mode)
    return path


def test_run_dir_reached_through_a_symlink_is_untrusted(tmp_path):
    real = _trusted_dir(str(tmp_path / "real"))
    sp.write_state(real, "s", {"pid": os.getpid()})
    os.symlink(real, str(tmp_path / "link"))
    state = sp.read_state(str(tmp_path / "link"), "s")
    assert state["pid"] is None and "is a symlink" in state["untrusted"]
    with pytest.raises(sp.UntrustedState):
        sp.write_state(str(tmp_path / "link"), "s", {"pid": 5})


def test_a_symlink_anywhere_above_the_run_dir_is_untrusted(tmp_path):
    _trusted_dir(str(tmp_path / "real" / "run"))
    sp.write_state(str(tmp_path / "real" / "run"), "s", {"pid": os.getpid()})
    os.symlink(str(tmp_path / "real"), str(tmp_path / "up"))
    state = sp.read_state(str(tmp_path / "up" / "run"), "s")
    assert "%s is a symlink" % (tmp_path / "up") in state["untrusted"]


@pytest.mark.parametrize("spoil, needle", [
    # the service user's home above a root-owned run dir: it could rename run/ and plant a symlink
    (lambda parent: os.chown(parent, 65534, 65534), "above it is owned by uid 65534"),
    (lambda parent: os.chmod(parent, 0o777), "writable by its group or by others (mode 0777) and not sticky"),
    (lambda parent: os.chmod(parent, 0o775), "not sticky"),
])
def test_a_directory_above_the_run_dir_that_someone_else_controls_is_untrusted(tmp_path, spoil, needle):
    parent = _trusted_dir(str(tmp_path / "home"))
    run_dir = _trusted_dir(os.path.join(parent, "run"))
    sp.write_state(run_dir, "s", {"pid": os.getpid()})
    spoil(parent)
    state = sp.read_state(run_dir, "s")
    assert state["pid"] is None and needle in state["untrusted"]
    with pytest.raises(sp.UntrustedState):
        sp.open_run_dir(run_dir)


def test_a_root_dir_under_a_sticky_world_writable_dir_is_trusted_but_a_sticky_run_dir_is_not(tmp_path):
    # /tmp/eagle-deploy/var/lib/eagle-deploy/run: /tmp is sticky (1777), so nobody else can rename root's entries there.
    sticky = _trusted_dir(str(tmp_path / "tmp"), 0o1777)
    run_dir = _trusted_dir(os.path.join(sticky, "eagle-deploy", "run"))
    sp.write_state(run_dir, "s", {"pid": 5})
    assert sp.read_state(run_dir, "s") == {"pid": 5}
    state = sp.read_state(sticky, "s")
    assert state is None or "writable by its group or by others" in state["untrusted"]
    with pytest.raises(sp.UntrustedState) as e:
        sp.open_run_dir(sticky)
    assert "run_dir %s is writable by its group or by others (mode 1777)" % sticky in str(e.value)


def test_run_dir_with_dot_dot_is_untrusted(tmp_path):
    _trusted_dir(str(tmp_path / "run"))
    with pytest.raises(sp.UntrustedState) as e:
        sp.open_run_dir(str(tmp_path / "x" / ".." / "run"))
    assert "contains '..'" in str(e.value)


def test_clear_state_never_follows_a_swapped_path(tmp_path):
    run_dir = _trusted_dir(str(tmp_path / "run"))
    sp.write_state(run_dir, "s", {"pid": 5})
    os.symlink(run_dir, str(tmp_path / "link"))
    with pytest.raises(sp.UntrustedState):
        sp.clear_state(str(tmp_path / "link"), "s")
    assert sorted(os.listdir(run_dir)) == ["s.json", "s.pid"]
    sp.clear_state(run_dir, "s")
    assert os.listdir(run_dir) == []


@pytest.mark.parametrize("name, ok", [
    ("sglang", True), ("a.b_c-1", True), ("sglang\n", False), ("\nsglang", False), ("a/b", False), ("..", False),
    ("a..b", False), ("x" * 64, True), ("x" * 65, False), ("", False), (None, False),
])
def test_safe_name_is_anchored_at_both_ends(name, ok):
    assert sp.safe_name(name) is ok


# ------------------------------------------------------------------ is the recorded leader ours (a fake /proc)
def _fake_proc(root, pid, state="S", start=4242, cmdline=b"python\x00-m\x00sglang.launch_server\x00"):
    d = root / str(pid)
    d.mkdir()
    fields = [state, "1", str(pid), str(pid)] + ["0"] * 15 + [str(start)] + ["0"] * 20
    (d / "stat").write_text("%d (python) %s\n" % (pid, " ".join(fields)))
    if cmdline is not None:
        (d / "cmdline").write_bytes(cmdline)


def _launched(pid, start=4242):
    return {"pid": pid, "start_time": start, "cmdline": ["python", "-m", "sglang.launch_server"]}


@pytest.fixture
def proc(tmp_path, monkeypatch):
    monkeypatch.setattr(sp, "PROC", str(tmp_path))
    return tmp_path


def test_the_leader_we_launched_is_ours(proc):
    _fake_proc(proc, 700)
    assert sp.why_not_ours(_launched(700)) is None


def test_a_leader_that_is_exiting_is_still_ours_not_foreign(proc):
    # Its memory is released (cmdline reads empty) but it is no zombie yet: the same PID and start time.
    _fake_proc(proc, 701, state="R", cmdline=b"")
    assert sp.why_not_ours(_launched(701)) is None


def test_a_leader_gone_between_the_reads_is_not_running_not_foreign(proc, monkeypatch):
    _fake_proc(proc, 702, cmdline=None)  # stat read, then the process is gone when cmdline is read
    reads = {"n": 0}
    real = sp._stat_fields

    def stat_then_gone(pid):
        reads["n"] += 1
        return real(pid) if reads["n"] <= 2 else None
    monkeypatch.setattr(sp, "_stat_fields", stat_then_gone)
    assert sp.why_not_ours(_launched(702)) == "PID 702 is not running"


@pytest.mark.parametrize("cmdline, start, why", [
    (b"bash\x00-c\x00sleep 1000\x00", 4242, "runs a different command line"),
    (b"python\x00-m\x00sglang.launch_server\x00", 4243, "was reused by another process"),
])
def test_another_process_under_the_pid_is_not_ours(proc, cmdline, start, why):
    _fake_proc(proc, 703, start=start, cmdline=cmdline)
    assert why in sp.why_not_ours(_launched(703))


def test_the_recorded_supervisor_exiting_is_still_found_and_another_program_is_not(proc):
    # The same identity check as the leader's: the supervisor on its way out (argv released) is still the one recorded
    # (waited for or signalled through its pidfd), another command line under its PID is not.
    _fake_proc(proc, 704, state="R", cmdline=b"")
    _fake_proc(proc, 705, cmdline=b"bash\x00-c\x00sleep 1000\x00")
    watcher = {"start_time": 4242, "cmdline": ["python", "-m", "sglang.launch_server"]}
    assert sp.recorded_process({"watcher": dict(watcher, pid=704)}, "watcher") == 704
    assert sp.recorded_process({"watcher": dict(watcher, pid=705)}, "watcher") is None
