# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Linux /proc helpers: who is this PID, is it ours, and stop our process tree (only ours).

Standard library only. "Ours" is decided from the run-state file that ``wait_for_model`` writes
(see docs/DESIGN.md): a leader PID is ours only if its start time (field 22 of /proc/PID/stat),
the boot id and its command line all match what we recorded when we launched it. A PID that was
reused by another program after our server died therefore never matches, and is never signalled.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import time

PROC = "/proc"


def _read(path, mode="r"):
    try:
        with open(path, mode) as fh:
            return fh.read()
    except (IOError, OSError):
        return None


def boot_id():
    data = _read(os.path.join(PROC, "sys/kernel/random/boot_id"))
    return data.strip() if data else ""


def _stat_fields(pid):
    """Fields of /proc/PID/stat after the command name (which may hold spaces and parentheses)."""
    data = _read(os.path.join(PROC, str(pid), "stat"))
    if not data:
        return None
    rpar = data.rfind(")")
    if rpar < 0:
        return None
    # fields[0] is field 3 (state)
    return data[rpar + 2:].split()


def proc_state(pid):
    f = _stat_fields(pid)
    return f[0] if f else None


def proc_ppid(pid):
    f = _stat_fields(pid)
    return int(f[1]) if f else None


def proc_pgid(pid):
    f = _stat_fields(pid)
    return int(f[2]) if f else None


def proc_sid(pid):
    f = _stat_fields(pid)
    return int(f[3]) if f else None


def proc_start_time(pid):
    """Start time in clock ticks after boot (field 22): with the PID, a process's identity."""
    f = _stat_fields(pid)
    return int(f[19]) if f else None


def proc_cmdline(pid):
    data = _read(os.path.join(PROC, str(pid), "cmdline"), "rb")
    if data is None:
        return None
    parts = data.split(b"\x00")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "replace") for p in parts]


def proc_uid(pid):
    data = _read(os.path.join(PROC, str(pid), "status"))
    if not data:
        return None
    for line in data.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


def proc_rss_kib(pid):
    data = _read(os.path.join(PROC, str(pid), "status"))
    if not data:
        return None
    for line in data.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pid_alive(pid):
    """True if PID exists and is not a zombie."""
    st = proc_state(pid)
    return st is not None and st not in ("Z", "X")


def all_pids():
    out = []
    for name in os.listdir(PROC):
        if name.isdigit():
            out.append(int(name))
    return out


def process_table():
    """{pid: {"ppid", "sid", "pgid", "state", "start_time"}} for every live process."""
    table = {}
    for pid in all_pids():
        f = _stat_fields(pid)
        if not f:
            continue
        table[pid] = {"ppid": int(f[1]), "pgid": int(f[2]), "sid": int(f[3]), "state": f[0],
                      "start_time": int(f[19])}
    return table


def identity(pid):
    """What we record to recognise this process later."""
    return {"pid": pid, "start_time": proc_start_time(pid), "boot_id": boot_id(), "cmdline": proc_cmdline(pid)}


# ------------------------------------------------------------------ run state
def state_paths(run_dir, name):
    return (os.path.join(run_dir, "%s.pid" % name), os.path.join(run_dir, "%s.json" % name))


def read_state(run_dir, name):
    """The run-state record written by wait_for_model, or None. A bare pidfile without its JSON
    record is returned as {"pid": N, "unverified": True}: such a PID is never taken as ours."""
    pidfile, statefile = state_paths(run_dir, name)
    data = _read(statefile)
    if data:
        try:
            st = json.loads(data)
            if isinstance(st, dict) and isinstance(st.get("pid"), int):
                return st
        except ValueError:
            pass
    raw = _read(pidfile)
    if raw and raw.strip().isdigit():
        return {"pid": int(raw.strip()), "unverified": True}
    return None


def write_state(run_dir, name, state):
    pidfile, statefile = state_paths(run_dir, name)
    for path, text in ((statefile, json.dumps(state, indent=1, sort_keys=True)), (pidfile, "%d\n" % state["pid"])):
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)


def clear_state(run_dir, name):
    for path in state_paths(run_dir, name):
        try:
            os.unlink(path)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise


def why_not_ours(state):
    """None if the recorded leader is alive and provably ours, else the reason (a string)."""
    if not state:
        return "no run state"
    if state.get("unverified"):
        return "pidfile without a run-state record: cannot prove PID %s is ours" % state.get("pid")
    pid = state["pid"]
    if not pid_alive(pid):
        return "PID %d is not running" % pid
    if state.get("boot_id") and state.get("boot_id") != boot_id():
        return "recorded before a reboot"
    if proc_start_time(pid) != state.get("start_time"):
        return "PID %d was reused by another process (start time differs)" % pid
    if state.get("cmdline") and proc_cmdline(pid) != state.get("cmdline"):
        return "PID %d runs a different command line than the one we launched" % pid
    return None


def state_is_alive_and_ours(state):
    return why_not_ours(state) is None


def our_tree(state, table=None):
    """{pid: info} of our server's processes: the verified leader, every process of its session
    and every descendant of those. Empty if the leader is gone or not ours.

    A process whose leader died but which still runs in the session (an orphaned scheduler that
    holds GPU memory) is found by its session id alone only while the leader is verified; for the
    leader-dead case see :func:`orphans_of`."""
    if why_not_ours(state) is not None:
        return {}
    table = table if table is not None else process_table()
    leader = state["pid"]
    members = set([leader])
    for pid, info in table.items():
        if info["sid"] == leader:
            members.add(pid)
    changed = True
    while changed:
        changed = False
        for pid, info in table.items():
            if pid not in members and info["ppid"] in members:
                members.add(pid)
                changed = True
    return dict((pid, table[pid]) for pid in members if pid in table)


def orphans_of(state, table=None):
    """Processes left from our server after its leader died: same session id as the recorded
    leader, started after it (so a reused session id cannot match), not zombies."""
    if not state or state.get("unverified") or state.get("boot_id") not in (None, boot_id()):
        return {}
    leader = state["pid"]
    if pid_alive(leader):
        # The leader PID is alive: either it is ours (use our_tree) or it was reused by someone
        # else, whose session must never be taken for ours. (Linux does not hand out a PID that
        # is still in use as a session id, so real orphans imply a dead leader PID.)
        return {}
    table = table if table is not None else process_table()
    start = state.get("start_time") or 0
    out = {}
    for pid, info in table.items():
        if pid == leader:
            continue
        if info["sid"] == leader and info["start_time"] >= start and info["state"] not in ("Z", "X"):
            out[pid] = info
    return out


def stop_tree(state, grace=30.0, clock=time.monotonic, sleep=time.sleep, poll=0.1):
    """SIGTERM our whole tree, wait up to ``grace`` seconds, SIGKILL what is left.

    Only processes proven ours are signalled. Returns {"signalled": [...], "killed": [...],
    "remaining": [...], "skipped_reason": str|None, "seconds": float}."""
    t0 = clock()
    result = {"signalled": [], "killed": [], "remaining": [], "skipped_reason": None, "seconds": 0.0}
    members = our_tree(state)
    if not members:
        result["skipped_reason"] = why_not_ours(state)
        members = orphans_of(state)
        if not members:
            return result
    idents = dict((pid, info["start_time"]) for pid, info in members.items())

    def still_same(pid):
        return pid_alive(pid) and proc_start_time(pid) == idents[pid]

    for pid in sorted(idents):
        if still_same(pid):
            try:
                os.kill(pid, signal.SIGTERM)
                result["signalled"].append(pid)
            except OSError:
                pass
    deadline = t0 + grace
    while clock() < deadline:
        if not any(still_same(pid) for pid in idents):
            break
        sleep(poll)
    for pid in sorted(idents):
        if still_same(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                result["killed"].append(pid)
            except OSError:
                pass
    # SIGKILL is not instant for a process in uninterruptible sleep (a GPU driver call): wait a bit.
    kill_deadline = clock() + 10.0
    while clock() < kill_deadline and any(still_same(pid) for pid in idents):
        sleep(poll)
    result["remaining"] = [pid for pid in sorted(idents) if still_same(pid)]
    result["seconds"] = round(clock() - t0, 3)
    return result


def listeners(port):
    """Inodes of sockets listening on TCP ``port`` (v4 and v6), from /proc/net/tcp*."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        data = _read(os.path.join(PROC, "net", name))
        if not data:
            continue
        for line in data.splitlines()[1:]:
            parts = line.split()
            if len(parts) < 10:
                continue
            local, st = parts[1], parts[3]
            if st != "0A":  # LISTEN
                continue
            if int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    return inodes


def pids_holding_sockets(inodes):
    """PIDs that have any of these socket inodes open (needs root to see other users' fds)."""
    want = set("socket:[%s]" % i for i in inodes)
    out = set()
    if not want:
        return out
    for pid in all_pids():
        fd_dir = os.path.join(PROC, str(pid), "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(os.path.join(fd_dir, fd)) in want:
                    out.add(pid)
                    break
            except OSError:
                continue
    return out
