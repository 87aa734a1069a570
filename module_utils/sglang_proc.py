# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Linux /proc helpers: who is this PID, is it ours, and stop our process tree (only ours).

Standard library only. "Ours" is decided from the run-state file that ``wait_for_model`` writes
(see docs/DESIGN.md): a leader PID is ours only if its start time (field 22 of /proc/PID/stat),
the boot id and its command line all match what we recorded when we launched it. A PID that was
reused by another program after our server died therefore never matches, and is never signalled.

The run state is trusted only when nobody less privileged than this module could have written it:
its directory and files must be owned by root or by the module's own user and writable by no one else
(checked on the opened descriptors, so a path swapped between check and use does not count).

The run dir is reached from ``/`` one component at a time, never through a symlink, and every directory
on the way must be root's (or the module's user's) and writable by no one else, unless it is sticky (see
:func:`open_run_dir`): so nobody less privileged can swap the run dir or anything above it.

Where the host has a writable cgroup v2 hierarchy, the server runs in a cgroup of its own, named per
deployment (``eagle-deploy-<name>-<hash of the run dir>``, created by :func:`create_cgroup`); every process
in it is ours, also one that left the session (double fork + ``setsid``). A cgroup we did not create is
never taken as proof. Every launch also gets a random run token in the server's environment
(``EAGLE_DEPLOY_RUN``), inherited by its children: after the leader died, a process of its old session
is ours only if it carries that token, runs as the recorded user and started after the leader
(:func:`orphans_of`), never by its session id alone.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pwd
import re
import signal
import stat
import time

PROC = "/proc"
CGROUP_PREFIX = "eagle-deploy-"
# Anchored with \A and \Z (``$`` would also match before a trailing newline).
SAFE_NAME = r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z"
# The variable that carries a launch's run token in the server's environment (and so in its children's).
RUN_TOKEN_VAR = "EAGLE_DEPLOY_RUN"
# The systemd unit of a deployment (wait_for_model's launcher: systemd): sglang-<name>.service
UNIT_RX = re.compile(r"\Asglang-[A-Za-z0-9._-]{1,64}\.service\Z")


def safe_name(name):
    """Whether ``name`` may name run-state, lock and log files: letters, digits, ``.``, ``_``, ``-``, no ``..``."""
    return isinstance(name, str) and re.match(SAFE_NAME, name) is not None and ".." not in name


def deployment_name(name, run_dir):
    """``<name>-<first 12 hex of sha256(real path of run_dir)>``: two deployments of one name (two run dirs)
    on a host never share it. Names the server's cgroup."""
    return "%s-%s" % (name, hashlib.sha256(os.path.realpath(run_dir).encode("utf-8")).hexdigest()[:12])


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


def proc_environ_has(pid, key, value):
    """Whether the environment PID was started with holds ``key=value`` (False when it cannot be read)."""
    data = _read(os.path.join(PROC, str(pid), "environ"), "rb")
    return bool(data) and ("%s=%s" % (key, value)).encode("utf-8") in data.split(b"\x00")


def proc_uid(pid):
    data = _read(os.path.join(PROC, str(pid), "status"))
    if not data:
        return None
    for line in data.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


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
class UntrustedState(Exception):
    """The run state could have been written by someone less privileged than this module."""


def _why_untrusted(st, what, path):
    if st.st_uid not in (0, os.geteuid()):
        return "%s %s is owned by uid %d, not by root or uid %d (the user running this module)" % (
            what, path, st.st_uid, os.geteuid())
    if st.st_mode & 0o022:
        return "%s %s is writable by its group or by others (mode %04o)" % (what, path, stat.S_IMODE(st.st_mode))
    return None


def _why_untrusted_above(st, path, elsewhere="choose another run_dir"):
    """Why a directory above the run dir lets someone else swap what lies below it, or None. A sticky
    directory (``/tmp``, mode 1777) is fine: nobody but its owner and an entry's owner may rename or remove
    an entry in it."""
    if st.st_uid not in (0, os.geteuid()):
        return ("directory %s above it is owned by uid %d, not by root or uid %d (the user running this module); "
                "chown root: %s, or %s" % (path, st.st_uid, os.geteuid(), path, elsewhere))
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return ("directory %s above it is writable by its group or by others (mode %04o) and not sticky; chmod go-w %s, "
                "or %s" % (path, stat.S_IMODE(st.st_mode), path, elsewhere))
    return None


def open_run_dir(run_dir):
    """A descriptor of ``run_dir`` after checking that only root (or this module's user) can write it or
    swap it: opened from ``/`` one component at a time with ``O_NOFOLLOW`` (a symlink anywhere on the path
    is refused), each directory checked on its descriptor. The run dir itself must be owned by root (or
    this module's user) and writable by no one else (sticky or not); every directory above it likewise,
    except that a sticky directory owned by root (``/tmp``) may be writable by others.

    Raises :class:`UntrustedState` (naming the fix) or OSError (missing)."""
    fix = ("run state there is not trusted, so nothing is signalled. Keep run_dir where only root can write, on a "
           "path without symlinks (e.g. /run/eagle-deploy or /var/lib/eagle-deploy/run, root-owned, mode 0755)")
    return open_trusted_dir(run_dir, "run_dir", fix, "choose another run_dir",
                            "chown root: %s; chmod 0755 %s" % (run_dir, run_dir))


def open_trusted_dir(directory, what, fix, elsewhere, fix_here):
    """A descriptor of ``directory``, checked as :func:`open_run_dir` checks the run dir (its rules), for any
    directory whose files this module writes as root where someone less privileged must not swap them. Messages
    name it as ``what``, end with ``fix`` (what the refusal means, where to keep it instead), and say how to fix a
    directory above it (``chown``/``chmod``, or ``elsewhere``) or the directory itself (``fix_here``).

    Raises :class:`UntrustedState` (naming the fix) or OSError (missing)."""
    path = directory if os.path.isabs(directory) else os.path.join(os.getcwd(), directory)
    parts = [c for c in path.split("/") if c not in ("", ".")]
    if ".." in parts:
        raise UntrustedState("%s %s contains '..': give its real path" % (what, directory))
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    cur = "/"
    try:
        for comp in parts + [None]:
            st = os.fstat(fd)
            if comp is None:
                reason = _why_untrusted(st, what, directory)
                if reason:
                    raise UntrustedState("%s: %s (%s)" % (reason, fix, fix_here))
                return fd
            reason = _why_untrusted_above(st, cur, elsewhere)
            if reason:
                raise UntrustedState("%s %s: %s: %s" % (what, directory, reason, fix))
            nxt = os.path.join(cur, comp)
            try:
                nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(os.lstat(comp, dir_fd=fd).st_mode):
                    raise UntrustedState("%s %s: %s is a symlink (to %s): %s" % (
                        what, directory, nxt, os.readlink(comp, dir_fd=fd), fix))
                raise
            os.close(fd)
            fd, cur = nfd, nxt
    except BaseException:
        os.close(fd)
        raise


def _read_trusted(dir_fd, run_dir, fname, limit=1 << 20, raw=False):
    """Text of ``fname`` in the opened run dir (its first ``limit`` bytes; ``raw``: the bytes), or None when it
    does not exist.
    Symlinks, other file types and files writable by others raise :class:`UntrustedState`."""
    try:
        fd = os.open(fname, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        if e.errno == errno.ELOOP:
            raise UntrustedState("%s/%s is a symlink: run state is never read through one; remove it" % (run_dir, fname))
        raise
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        path = os.path.join(run_dir, fname)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedState("%s is not a regular file; remove it" % path)
        reason = _why_untrusted(st, "run-state file", path)
        if reason:
            raise UntrustedState("%s: it is not trusted and nothing is signalled; remove it if it is not yours" % reason)
        data = fh.read(limit)
        return data if raw else data.decode("utf-8", "replace")


def state_paths(run_dir, name):
    return (os.path.join(run_dir, "%s.pid" % name), os.path.join(run_dir, "%s.json" % name))


def read_state(run_dir, name):
    """The run-state record written by wait_for_model, or None. A bare pidfile without its JSON
    record is returned as {"pid": N, "unverified": True}: such a PID is never taken as ours.
    A record that someone less privileged could have written is returned as
    {"pid": None, "untrusted": reason}: never ours either (see :func:`open_run_dir`)."""
    try:
        dir_fd = open_run_dir(run_dir)
    except UntrustedState as e:
        return {"pid": None, "untrusted": str(e)}
    except OSError:
        return None
    try:
        data = _read_trusted(dir_fd, run_dir, "%s.json" % name)
        if data:
            try:
                st = json.loads(data)
                if isinstance(st, dict) and isinstance(st.get("pid"), int):
                    return st
            except ValueError:
                pass
        raw = _read_trusted(dir_fd, run_dir, "%s.pid" % name)
    except UntrustedState as e:
        return {"pid": None, "untrusted": str(e)}
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    if raw and raw.strip().isdigit():
        return {"pid": int(raw.strip()), "unverified": True}
    return None


def write_state(run_dir, name, state):
    """Write the record atomically (temp file + rename, relative to the checked run dir)."""
    write_files(run_dir, ((("%s.json" % name), json.dumps(state, indent=1, sort_keys=True)),
                          ("%s.pid" % name, "%d\n" % state["pid"])))


def write_files(run_dir, files, mode=0o644, fsync=False):
    """Write each (file name, text or bytes) in the trusted run dir atomically: a temporary name created with O_EXCL,
    then a rename relative to the checked directory. ``mode`` 0o600 for a file that holds secrets; ``fsync``: each
    file's data reaches the disk before its rename (a record that must survive a crash)."""
    dir_fd = open_run_dir(run_dir)
    try:
        for fname, text in files:
            tmp = fname + ".tmp"
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    raise
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
            with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as fh:
                os.fchmod(fh.fileno(), mode)
                fh.write(text)
                fh.flush()
                if fsync:
                    os.fsync(fh.fileno())
            os.rename(tmp, fname, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def read_file(run_dir, fname, limit=1 << 20, raw=False):
    """Text of ``fname`` in the trusted run dir (its first ``limit`` bytes), None when it does not exist;
    :class:`UntrustedState` when the directory or the file could have been written by someone less privileged
    (see :func:`open_run_dir`)."""
    dir_fd = open_run_dir(run_dir)
    try:
        return _read_trusted(dir_fd, run_dir, fname, limit, raw)
    finally:
        os.close(dir_fd)


def read_json(run_dir, fname):
    """The JSON object in ``fname`` of the trusted run dir, or None (missing, not an object, not JSON)."""
    text = read_file(run_dir, fname)
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def remove_file(run_dir, fname):
    """Remove ``fname`` from the trusted run dir (nothing when it does not exist)."""
    dir_fd = open_run_dir(run_dir)
    try:
        os.unlink(fname, dir_fd=dir_fd)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
    finally:
        os.close(dir_fd)


def clear_state(run_dir, name):
    """Remove the record (relative to the checked run dir)."""
    for fname in ("%s.pid" % name, "%s.json" % name):
        remove_file(run_dir, fname)


def why_not_ours(state):
    """None if the recorded leader is alive and provably ours, else the reason (a string)."""
    if not state:
        return "no run state"
    if state.get("untrusted"):
        return state["untrusted"]
    if state.get("unverified"):
        return "pidfile without a run-state record: cannot prove PID %s is ours" % state.get("pid")
    pid = state["pid"]
    if not pid_alive(pid):
        return "PID %d is not running" % pid
    if state.get("boot_id") and state.get("boot_id") != boot_id():
        return "recorded before a reboot"
    if proc_start_time(pid) != state.get("start_time"):
        return "PID %d was reused by another process (start time differs)" % pid
    other = command_line_differs(pid, state.get("start_time"), state.get("cmdline"))
    if other == "gone":
        return "PID %d is not running" % pid
    if other:
        return "PID %d runs a different command line than the one we launched" % pid
    return None


def command_line_differs(pid, start_time, cmdline):
    """Whether PID (alive, of ``start_time``) no longer runs the recorded ``cmdline``: None when it does (or nothing
    was recorded), "gone" when it exited meanwhile, "other" when another command line runs under it.

    Nothing to read is no evidence of another program: the process exited since (no /proc/PID), or it is exiting (its
    memory, argv included, already released; no zombie yet). Asked again: gone is "gone"; the same PID with the same
    start time is still the process recorded, on its way out."""
    if not cmdline:
        return None
    now = proc_cmdline(pid)
    if not now:
        return "gone" if not pid_alive(pid) or proc_start_time(pid) != start_time else None
    return "other" if now != cmdline else None


def state_is_alive_and_ours(state):
    return why_not_ours(state) is None


# ------------------------------------------------------------------ cgroup v2
def cgroup2_mount(mountinfo=None):
    """Mount point of the cgroup v2 hierarchy (mounted read-write at its root), or None.

    ``mountinfo``: the text of /proc/self/mountinfo (read when None). /sys/fs/cgroup wins over
    another mount (the "unified" one of a hybrid host)."""
    text = _read(os.path.join(PROC, "self/mountinfo")) if mountinfo is None else mountinfo
    best = None
    for line in (text or "").splitlines():
        left, sep, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if not sep or len(f) < 6 or not r or r[0] != "cgroup2":
            continue
        root, point, opts = f[3], f[4].replace("\\040", " "), f[5].split(",")
        if root != "/" or "rw" not in opts:
            continue
        if best is None or point == "/sys/fs/cgroup":
            best = point
    return best


def proc_cgroup(pid):
    """cgroup v2 path of PID (the "0::/path" line of /proc/PID/cgroup), or None."""
    data = _read(os.path.join(PROC, str(pid), "cgroup"))
    for line in (data or "").splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def _cgroup_dir(mount, rel):
    return os.path.join(mount, rel.lstrip("/"))


def cgroup_pids(mount, rel):
    """PIDs in the cgroup and in every cgroup below it."""
    out = set()
    top = _cgroup_dir(mount, rel)
    for dirpath, _dirs, files in os.walk(top):
        if "cgroup.procs" in files:
            for tok in (_read(os.path.join(dirpath, "cgroup.procs")) or "").split():
                if tok.isdigit():
                    out.add(int(tok))
    return out


def create_cgroup(name, mount=None, parent=None):
    """Create our server's own cgroup, ``<parent>/eagle-deploy-<name>``, and return its path
    relative to the hierarchy (``name``: the deployment's :func:`deployment_name`, so that two
    deployments never share one; ``mount``: the cgroup v2 mount, found when None; ``parent``: the
    cgroup of this process when None). An existing one is reused only when no process is in it.
    Raises OSError (with the reason) when the host does not allow it."""
    mount = mount or cgroup2_mount()
    if not mount:
        raise OSError(errno.ENOENT, "no writable cgroup v2 hierarchy is mounted")
    parent = parent if parent is not None else proc_cgroup("self")
    if parent is None:
        raise OSError(errno.ENOENT, "this process is not in a cgroup v2 hierarchy")
    rel = parent.rstrip("/") + "/" + CGROUP_PREFIX + name
    path = _cgroup_dir(mount, rel)
    made = False
    try:
        os.mkdir(path, 0o755)
        made = True
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.geteuid()):
            raise OSError(errno.EPERM, "%s exists and is not a cgroup of ours" % path)
        if cgroup_pids(mount, rel):
            raise OSError(errno.EBUSY, "%s still holds processes %s" % (path, sorted(cgroup_pids(mount, rel))))
    if not os.path.exists(os.path.join(path, "cgroup.procs")):
        if made:
            os.rmdir(path)
        raise OSError(errno.ENOTSUP, "%s is not a cgroup v2 directory" % path)
    return rel


def remove_cgroup(mount, rel):
    """Remove our (empty) cgroup and the cgroups below it; True when it is gone."""
    top = _cgroup_dir(mount, rel)
    for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass
    return not os.path.exists(top)


def dedicated_cgroup(state):
    """(mount, path) of the cgroup we created for this server, from a trusted run state, or None.

    Only a cgroup named ``eagle-deploy-<...>`` that this module created and recorded counts; a shared
    cgroup (an ssh session's, a container's root) never proves that a process is ours."""
    cg = state.get("cgroup") if state else None
    if not isinstance(cg, dict) or not cg.get("dedicated") or state.get("untrusted") or state.get("unverified"):
        return None
    mount, rel = cg.get("mount"), cg.get("path")
    if not isinstance(mount, str) or not isinstance(rel, str) or ".." in rel.split("/"):
        return None
    base = os.path.basename(rel.rstrip("/"))
    unit = cg.get("unit")
    # ours: a cgroup this module created, or the systemd unit that runs the server (the watcher records it)
    if not base.startswith(CGROUP_PREFIX) and not (isinstance(unit, str) and base == unit and UNIT_RX.match(unit)):
        return None
    if state.get("boot_id") and state.get("boot_id") != boot_id():
        return None
    path = _cgroup_dir(mount, rel)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, os.geteuid()):
        return None
    return mount, rel


def cgroup_members(state, table=None):
    """{pid: info} of the live processes in our dedicated cgroup (empty when there is none)."""
    cg = dedicated_cgroup(state)
    if cg is None:
        return {}
    pids = cgroup_pids(*cg)
    if not pids:
        return {}
    table = table if table is not None else process_table()
    return dict((pid, table[pid]) for pid in pids if pid in table and table[pid]["state"] not in ("Z", "X"))


# ------------------------------------------------------------------ our process tree
def our_tree(state, table=None):
    """{pid: info} of our server's processes: the verified leader, every process of its session,
    every process of its dedicated cgroup and every descendant of those. Empty if the leader is gone
    or not ours.

    While the verified leader lives, a session id equal to its PID is its own session: Linux hands out
    no PID that is still some live process's session id, so no other program can have made it. Once the
    leader is dead that no longer holds; for that case see :func:`orphans_of`."""
    if why_not_ours(state) is not None:
        return {}
    table = table if table is not None else process_table()
    leader = state["pid"]
    members = set([leader]) | set(cgroup_members(state, table))
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


def _uid_of(user):
    try:
        return pwd.getpwnam(user).pw_uid if isinstance(user, str) and user else None
    except KeyError:
        return None


def orphans_of(state, table=None):
    """Processes left from our server after its leader died: every process still in its dedicated
    cgroup; and every process of the leader's old session (or a descendant of one found) that carries
    the launch's run token (``EAGLE_DEPLOY_RUN`` in /proc/PID/environ), runs as the recorded user and
    started no earlier than the leader. A session id alone never makes a process ours: once the leader
    is dead its PID, and so its session id, can be taken by any daemon that calls ``setsid``."""
    if not state or state.get("unverified") or state.get("untrusted") or state.get("boot_id") not in (None, boot_id()):
        return {}
    table = table if table is not None else process_table()
    out = cgroup_members(state, table)
    leader = state["pid"]
    if pid_alive(leader):
        # The leader PID is alive: either it is ours (use our_tree) or it was reused by someone
        # else, whose session must never be taken for ours. (Linux does not hand out a PID that
        # is still in use as a session id, so real orphans imply a dead leader PID.)
        return out
    token, uid = state.get("run_token"), _uid_of(state.get("user"))
    if not isinstance(token, str) or not token or uid is None:
        return out
    start = state.get("start_time") or 0

    def carries_our_token(pid, info):
        return (pid != leader and info["state"] not in ("Z", "X") and info["start_time"] >= start
                and proc_uid(pid) == uid and proc_environ_has(pid, RUN_TOKEN_VAR, token))

    found = dict((pid, info) for pid, info in table.items() if info["sid"] == leader and carries_our_token(pid, info))
    changed = True
    while changed:
        changed = False
        for pid, info in table.items():
            if pid not in found and pid not in out and (info["ppid"] in found or info["ppid"] in out) \
                    and carries_our_token(pid, info):
                found[pid] = info
                changed = True
    out.update(found)
    return out


def recorded_process(state, key):
    """PID of a helper process recorded under ``key`` in a trusted run state (``watcher``: the supervisor program;
    ``log_writer``: the log writer of an older version) while it is still that process (boot id, start time,
    command line); else None. What a run checks before it waits for or signals it (then through
    :func:`signal_verified`)."""
    proc = state.get(key) if state else None
    if not isinstance(proc, dict) or state.get("untrusted") or state.get("unverified"):
        return None
    pid = proc.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not pid_alive(pid):
        return None
    if state.get("boot_id") and state.get("boot_id") != boot_id():
        return None
    if proc.get("start_time") is None or proc_start_time(pid) != proc.get("start_time"):
        return None
    if command_line_differs(pid, proc.get("start_time"), proc.get("cmdline")):
        return None
    return pid


def log_writer_of(state):
    """PID of the server's log writer recorded in a trusted run state while it is still the process we started.

    Only run states written by an eagle-deploy older than the supervisor program (``sglang_supervisor``, whose
    ``LogCopy`` thread copies the log now) record a ``log_writer``: kept so that a host upgraded with such a server
    still running reports it and stops it cleanly (:func:`stop_tree`). Current versions record none."""
    return recorded_process(state, "log_writer")


class NoPidfd(Exception):
    """This system has no pidfd (Python < 3.9, Linux < 5.3, or a seccomp filter refusing ``pidfd_open``)."""


def open_pidfd(pid, start_time=None, opener=None):
    """A pidfd of PID while PID is still the process that started at ``start_time`` (clock ticks; None: an unreaped
    child of ours, which cannot have been reused). The descriptor is opened first and the identity checked after:
    what the check proves is then what the descriptor names, for good (a PID reused later is another process, which
    the descriptor never reaches). Returns the fd (close it), None when PID is gone or another process, and raises
    ``NoPidfd`` when pidfds are missing here. ``opener``: ``os.pidfd_open`` (injectable)."""
    opener = opener if opener is not None else getattr(os, "pidfd_open", None)
    if opener is None:
        raise NoPidfd("os.pidfd_open is missing (Python < 3.9)")
    try:
        fd = opener(pid)
    except ProcessLookupError:
        return None
    except OSError as e:  # ENOSYS (Linux < 5.3), EPERM/EACCES (seccomp), EINVAL
        raise NoPidfd("pidfd_open: %s" % e)
    if start_time is not None and not (pid_alive(pid) and proc_start_time(pid) == start_time):
        os.close(fd)
        return None
    return fd


def signal_verified(pid, start_time, sig, opener=None, sender=None, kill=None):
    """Send ``sig`` to PID only while it is the process that started at ``start_time``; True when sent.

    Through a pidfd opened before the identity check (:func:`open_pidfd`) and ``signal.pidfd_send_signal``: a
    process that exits after the check and whose PID is handed to another process meanwhile is never hit. Where
    pidfds are missing, the same check and ``os.kill`` (the small window between them stays). ``opener``,
    ``sender``, ``kill``: ``os.pidfd_open``, ``signal.pidfd_send_signal``, ``os.kill`` (injectable)."""
    if start_time is None:
        return False  # nothing to prove its identity with
    sender = sender if sender is not None else getattr(signal, "pidfd_send_signal", None)
    kill = kill if kill is not None else os.kill
    fd = None
    if sender is not None:
        try:
            fd = open_pidfd(pid, start_time, opener)
        except NoPidfd:
            fd = -1
        if fd is None:
            return False
    if fd is None or fd < 0:
        if not (pid_alive(pid) and proc_start_time(pid) == start_time):
            return False
        try:
            kill(pid, sig)
            return True
        except OSError:
            return False
    try:
        sender(fd, sig)
        return True
    except OSError:  # exited meanwhile (ESRCH), or not ours to signal (EPERM)
        return False
    finally:
        os.close(fd)


# Seconds the log writer (a run state of an older eagle-deploy: log_writer_of) has, after the server's processes are
# gone, to write their last output and end.
WRITER_DRAIN = 5.0


def _sleep(seconds):
    """time.sleep looked up when called (not bound at import): the unit-test guard that forbids sleeping sees it."""
    time.sleep(seconds)


def stop_tree(state, grace=30.0, clock=time.monotonic, sleep=None, poll=0.1):
    """SIGTERM our whole tree, wait up to ``grace`` seconds, SIGKILL what is left.

    Only processes proven ours are signalled, each through a pidfd opened before its identity is checked
    (:func:`signal_verified`), so a PID reused meanwhile is never hit. Processes that join the tree while it stops (a
    worker forked during shutdown) are picked up too. The log writer of a run state written by an older
    eagle-deploy (:func:`log_writer_of`; current versions have none) is signalled last: it ignores SIGTERM and
    ends by itself once every server process has closed its pipe; only if it is still there ``WRITER_DRAIN`` s
    after them is it SIGKILLed. Returns {"signalled": [...], "killed": [...], "remaining": [...], "seconds": float}."""
    if sleep is None:
        sleep = _sleep
    t0 = clock()
    result = {"signalled": [], "killed": [], "remaining": [], "seconds": 0.0}
    leader_ours = why_not_ours(state) is None
    writer = log_writer_of(state)
    writer_start = proc_start_time(writer) if writer is not None else None
    tree = _StoppingTree(state, leader_ours, writer)
    first = tree.members()
    if first:
        tree.idents = dict((pid, info["start_time"]) for pid, info in first.items())
        tree.stop(result, t0 + grace, clock, sleep, poll)
    if writer is not None:
        _end_log_writer(writer, writer_start, result, clock, sleep, poll)
    result["seconds"] = round(clock() - t0, 3)
    return result


class _StoppingTree(object):
    """The members of one run's tree while stop_tree stops it: each PID with the start time it was first seen
    with (``idents``), signalled only while it is still that process."""

    def __init__(self, state, leader_ours, writer):
        self.state = state
        self.leader_ours = leader_ours
        self.writer = writer
        self.idents = {}

    def members(self):
        found = our_tree(self.state) if self.leader_ours else {}
        if not found:
            found = orphans_of(self.state)
        found.pop(self.writer, None)  # in our cgroup too; it is ended last, below
        return found

    def refresh(self):
        if self.leader_ours or dedicated_cgroup(self.state) is not None:
            for pid, info in self.members().items():
                self.idents.setdefault(pid, info["start_time"])

    def still_same(self, pid):
        return pid_alive(pid) and proc_start_time(pid) == self.idents[pid]

    def send(self, sig, into):
        for pid in sorted(self.idents):
            if pid not in into and self.still_same(pid) and signal_verified(pid, self.idents[pid], sig):
                into.append(pid)

    def stop(self, result, deadline, clock, sleep, poll):
        """SIGTERM until ``deadline`` (joiners too), then SIGKILL; ``result``'s signalled, killed and remaining."""
        self.send(signal.SIGTERM, result["signalled"])
        while clock() < deadline:
            self.refresh()
            self.send(signal.SIGTERM, result["signalled"])
            if not any(self.still_same(pid) for pid in self.idents):
                break
            sleep(poll)
        self.refresh()
        self.send(signal.SIGKILL, result["killed"])
        # SIGKILL is not instant for a process in uninterruptible sleep (a GPU driver call): wait a bit.
        kill_deadline = clock() + 10.0
        while clock() < kill_deadline and any(self.still_same(pid) for pid in self.idents):
            sleep(poll)
            self.refresh()
            self.send(signal.SIGKILL, result["killed"])
        result["remaining"] = [pid for pid in sorted(self.idents) if self.still_same(pid)]


def _end_log_writer(pid, start_time, result, clock, sleep, poll):
    """Give the log writer ``WRITER_DRAIN`` s to end at end of file, then SIGKILL it (added to ``result``)."""
    def alive():
        return pid_alive(pid) and proc_start_time(pid) == start_time

    deadline = clock() + WRITER_DRAIN
    while alive() and clock() < deadline:
        sleep(poll)
    if not alive():
        return
    if signal_verified(pid, start_time, signal.SIGKILL):
        result["killed"].append(pid)
    deadline = clock() + 10.0
    while alive() and clock() < deadline:
        sleep(poll)
    if alive():
        result["remaining"].append(pid)


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


def module_source(mod):
    """Source of a module_utils module (bytes), also from inside an AnsiballZ zip: what an installed program's copy
    is compared with (sglang_program.drift)."""
    loader = getattr(mod, "__loader__", None)
    source = loader.get_source(mod.__name__) if loader is not None else None
    if source is None:
        with open(mod.__file__, "rb") as fh:
            return fh.read()
    return source.encode("utf-8") if isinstance(source, str) else source
