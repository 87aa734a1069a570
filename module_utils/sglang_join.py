# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's join of a multi-node server (stdlib only; used by the ``wait_for_model`` action plugin, never
shipped to a host).

Every node of one server runs its own ``wait_for_model`` launch (Ansible runs the hosts of a task at once); each node's
action plugin writes its node's word into one board on the controller and reads the others' between its steps:

* ``planned`` (the module's check-mode answer: keep or restart), so that a change on any node restarts every node;
* ``pending`` with the node's phase (``launching`` until its load begins: torch.distributed's rendezvous is done then);
* ``ready`` (a follower: its own load is done; rank 0: its ``/health_generate`` answered);
* ``failed`` with the failure's summary, or ``stopped`` (this node was stopped because another failed).

The board is a JSON file in a private directory of the controller (``board_dir()``: 0700, the user's own, no
symlink), one per launch task of one group in one run of Ansible (``board_name()``), updated under ``flock``. A node
counts only the others' words of the same ``round`` (a second launch of the same task in one run starts a new round).
The decisions (``group_failure``, ``never_joined``, ``all_ready``, ``all_planned``) are pure functions of the board.
Everything in it that a host or a log wrote is data: the words shown to the operator go through
``sglang_progress.operator_text`` by the caller.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import tempfile
import time

FINAL = ("ready", "failed", "stopped")
# A rank's NCCL error is most often what another rank's death did to it (a collective with a peer gone): when ranks
# fail together the NCCL one is named only when no other failure is there.
CONSEQUENCE_CLASSES = ("nccl",)
STALE_AFTER = 86400.0


class JoinError(Exception):
    """A join setting or the board's directory is wrong (nothing was launched)."""


def check_spec(join, host):
    """The plugin's ``join`` task argument, checked: ``{group, nodes, rank, timeout, step_time}``."""
    if not isinstance(join, dict):
        raise JoinError("join must be a dict with group, nodes, rank, timeout (got %s)" % type(join).__name__)
    unknown = sorted(set(join) - {"group", "nodes", "rank", "timeout", "step_time"})
    if unknown:
        raise JoinError("join: unknown keys %s (known: group, nodes, rank, timeout, step_time)" % ", ".join(unknown))
    group = join.get("group")
    nodes = join.get("nodes")
    if not isinstance(group, str) or not group:
        raise JoinError("join.group must be the inventory group's name")
    if not isinstance(nodes, list) or len(nodes) < 2 or not all(isinstance(n, str) and n for n in nodes):
        raise JoinError("join.nodes must list the group's hosts, at least two (group %s: %r)" % (group, nodes))
    if len(set(nodes)) != len(nodes):
        raise JoinError("join.nodes names a host twice: %r" % (nodes,))
    try:
        rank = int(join.get("rank"))
        timeout = float(join.get("timeout", 600))
        step_time = float(join.get("step_time", 2))
    except (TypeError, ValueError) as e:
        raise JoinError("join.rank, join.timeout and join.step_time must be numbers (%s)" % e)
    if not 0 <= rank < len(nodes) or nodes[rank] != host:
        raise JoinError("join.rank %s does not name this host (%s) in group %s %r" % (join.get("rank"), host, group, nodes))
    if not 0 < timeout <= 86400 or not 0 < step_time <= 600:
        raise JoinError("join.timeout must be in (0, 86400] and join.step_time in (0, 600] (got %s, %s)"
                        % (timeout, step_time))
    return {"group": group, "nodes": list(nodes), "rank": rank, "timeout": timeout, "step_time": step_time}


def board_dir(base=None, uid=None):
    """The controller's private directory for boards: created 0700, refused when it is a symlink, not a directory,
    another user's, or open to group or others."""
    uid = os.getuid() if uid is None else uid
    path = os.path.join(base or tempfile.gettempdir(), "eagle-deploy-join-%d" % uid)
    try:
        os.mkdir(path, 0o700)
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise JoinError("cannot create %s: %s" % (path, e.strerror))
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
        raise JoinError("%s is not a private directory of this user (a symlink, another owner, or mode %o): remove it"
                        % (path, stat.S_IMODE(st.st_mode)))
    return path


def board_name(task_uuid, group, nodes, run_id):
    """One board per launch task, group and run of Ansible (``run_id``: the controller's main process)."""
    key = json.dumps([str(task_uuid), group, sorted(nodes), str(run_id)])
    return "join-%s.json" % hashlib.sha256(key.encode()).hexdigest()[:32]


class Board:
    """The board file: ``{"nodes": {host: {"round", "state", "rank", "at", ...}}}``, read and written under flock."""

    def __init__(self, directory, name, clock=time.time):
        self.path = os.path.join(directory, name)
        self.lock_path = self.path + ".lock"
        self.clock = clock

    def _locked(self, fn):
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return fn()
        finally:
            os.close(fd)

    def _read(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {"nodes": {}}
        return data if isinstance(data, dict) and isinstance(data.get("nodes"), dict) else {"nodes": {}}

    def _write(self, data):
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)

    def read(self):
        return self._locked(self._read)

    def begin(self, host, rank):
        """This host joins: its round is one more than its last on this board. Returns the round."""
        def fn():
            data = self._read()
            old = data["nodes"].get(host) or {}
            rnd = int(old.get("round", 0)) + 1
            data["nodes"][host] = {"round": rnd, "rank": rank, "state": "joining", "at": self.clock(),
                                   "since": self.clock()}
            self._write(data)
            return rnd
        return self._locked(fn)

    def put(self, host, **word):
        def fn():
            data = self._read()
            entry = dict(data["nodes"].get(host) or {})
            entry.update(word, at=self.clock())
            data["nodes"][host] = entry
            self._write(data)
            return data
        return self._locked(fn)


def sweep(directory, now, keep=()):
    """Remove boards older than ``STALE_AFTER`` (not those in ``keep``)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not name.startswith("join-") or name in keep:
            continue
        path = os.path.join(directory, name)
        try:
            if now - os.lstat(path).st_mtime > STALE_AFTER:
                os.unlink(path)
        except OSError:
            pass


# ------------------------------------------------------------------ decisions (pure)
def current(board, nodes, rnd):
    """Each node's word of this round (None: not there yet)."""
    out = {}
    for host in nodes:
        word = (board.get("nodes") or {}).get(host)
        out[host] = word if isinstance(word, dict) and word.get("round") == rnd else None
    return out


def summary_of(result):
    """What a failed step says, for the board and the other nodes' messages (text only)."""
    keep = ("msg", "crash_class", "crash_cause", "crash_exception", "hint", "deciding_line", "deciding_lineno", "log_path",
            "phase")
    return {k: result[k] for k in keep if result.get(k) is not None}


def group_failure(words, nodes):
    """The failure to name for the group: (host, rank, word) of the first failed node, a failure that is another's
    consequence (``CONSEQUENCE_CLASSES``) named only when no other failure is there; None when none failed."""
    failed = [(h, w) for h, w in words.items() if w and w.get("state") == "failed"]
    if not failed:
        return None
    failed.sort(key=lambda hw: ((hw[1].get("failure") or {}).get("crash_class") in CONSEQUENCE_CLASSES,
                                float(hw[1].get("failed_at", hw[1].get("at", 0)) or 0), nodes.index(hw[0])))
    host, word = failed[0]
    return host, nodes.index(host), word


def heard_since(words, nodes, host, since):
    """Whether every node but ``host`` has had its say after ``since``: its word is final (ready, failed, stopped) or
    was written later (a step of its own ended after that moment, and it reported what that step found)."""
    for other in nodes:
        if other == host:
            continue
        w = words.get(other) or {}
        if w.get("state") not in FINAL and float(w.get("at", 0) or 0) <= since:
            return False
    return True


def joined(word):
    """A node has joined once its load began (past ``launching``), or it is ready (kept or loaded)."""
    if not word:
        return False
    if word.get("state") == "ready":
        return True
    return word.get("state") == "pending" and word.get("phase") not in (None, "launching")


def never_joined(words, nodes):
    """The nodes (host, rank) that have not joined. Rank 0 is named only when every other node joined: until then it
    waits for them at the rendezvous."""
    missing = [(h, nodes.index(h)) for h in nodes if not joined(words.get(h))]
    if len(missing) > 1:
        missing = [(h, r) for h, r in missing if r != 0]
    return missing


def all_planned(words):
    return all(w is not None and (w.get("state") in ("planned", "failed") or "restart" in w) for w in words.values())


def restart_needed(words, nodes):
    """(host, rank, reason) of the first node whose plan is a restart, or None: every node keeps its server."""
    for host in nodes:
        w = words.get(host) or {}
        if w.get("restart"):
            return host, nodes.index(host), w.get("reason") or "it would restart"
    return None


def all_ready(words):
    return all(w is not None and w.get("state") == "ready" for w in words.values())


def failure_text(host, rank, word):
    """The words for a node's failure (raw: the caller escapes them)."""
    f = word.get("failure") or {}
    text = "rank %d (%s) failed: %s" % (rank, host, f.get("msg") or "no message")
    if f.get("crash_class"):
        exc = (": " + str(f["crash_exception"])) if f.get("crash_exception") else ""
        text += " [crash class %s%s]" % (f["crash_class"], exc)
    return text
