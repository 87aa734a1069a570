# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's plan: what the running server depends on (its fingerprint), what is recorded of it
(:func:`look_recorded`: the run state, whether it is ours), and whether a run keeps it (or attaches to its
supervisor's wait) or restarts it, and why (:func:`plan_start`, pure: the :class:`Plan`). Functions, module side
only: they read the run state and /proc, and never signal or write.
"""

from __future__ import annotations

import hashlib
import json
import pwd
from dataclasses import dataclass
from typing import Any, Dict, Optional

from ansible.module_utils import sglang_good_record, sglang_proc
from ansible.module_utils.sglang_input_checks import WaitError
from ansible.module_utils.sglang_paths import file_sha256


def _h(value):
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def fingerprint_parts(argv, environment, files, data, run_as, secret_environment=None, redact=None):
    parts = {"argv": _h(argv), "environment": _h(environment), "run_as": _h(run_as or "")}
    if secret_environment:
        parts["secret_environment"] = _h(secret_environment)
    if redact:
        parts["redact"] = _h(sorted(redact))
    for path in files:
        parts["file " + path] = file_sha256(path)
    for key in sorted(data):
        parts["data " + key] = _h(data[key])
    return parts


def fingerprint_of(parts):
    return _h(parts)


def describe_change(old_parts, new_parts):
    if not old_parts:
        return "fingerprint changed"
    keys = sorted(set(old_parts) | set(new_parts))
    changed = [k for k in keys if old_parts.get(k) != new_parts.get(k)]
    return "fingerprint changed: " + ", ".join(changed)


KEEP = "keep"
ATTACH = "attach"  # a later step of the launch this task started: its supervisor's word is awaited
RESTART = "restart"
# Why a kept server is restarted after all: detached, its supervisor gone, and it does not answer health (the module
# watches no server itself).
GONE = "its supervisor program is gone and the server does not answer health"


def fingerprint(p, launcher):
    """(parts, fingerprint) of what the server run with the options ``p`` depends on: argv, environment, the
    secret environment, redaction, the service user, ``fingerprint_files``' contents, ``fingerprint_data``, and
    the launcher when it is systemd."""
    parts = fingerprint_parts(p["argv"], p["environment"], p["fingerprint_files"], p["fingerprint_data"], p["run_as"],
                              p["secret_environment"], p["redact"])
    if launcher == "systemd":
        parts["launcher"] = _h("systemd")
    return parts, fingerprint_of(parts)


def resuming(p, state, ours):
    """Whether this call is a later step (``resume_attempt``) of the launch that the recorded server is."""
    return p["resume_attempt"] is not None and ours and p["resume_attempt"] == state.get("attempt")


def start_plan(p, state, ours, fp, parts):
    """(KEEP, None) for our recorded server with this fingerprint (``force_restart`` restarts it, except in a later
    step of its own launch), else (RESTART, why)."""
    same = ours and state.get("fingerprint") == fp
    if same and (not p["force_restart"] or resuming(p, state, ours)):
        return KEEP, None
    if not ours:
        return RESTART, "not running"
    if same:
        return RESTART, "force_restart"
    return RESTART, describe_change(state.get("fingerprint_parts"), parts)


def ended_between_steps(p, st):
    """A later step (``resume_attempt``) whose attempt ended between two steps (a stop, a crash): the status ``st``
    with that attempt's verdict, else None. Its verdict is the step's answer; starting again is not its to do."""
    if p["resume_attempt"] is None or not isinstance(st, dict):
        return None
    if st.get("attempt") == p["resume_attempt"] and st.get("verdict") not in (None, "ready"):
        return st
    return None


@dataclass(frozen=True)
class Recorded(object):
    """What is recorded of our server: its run ``state`` (None: none), whether it is ``ours`` (the same process
    we launched), why not (``stale``, None when ours or none), and why its smoke test failed when it was judged so
    (``judged_failed``, sglang_good_record: a kept server then says so, and its smoke test runs again)."""
    state: Optional[Dict[str, Any]]
    ours: bool
    stale: Optional[str] = None
    judged_failed: Optional[str] = None


@dataclass(frozen=True)
class Plan(object):
    """A start's plan: ``action`` KEEP (the recorded server, kept as it is, or attached to its supervisor's wait when
    it does not answer yet), ATTACH (a later step of the launch this task started: its supervisor's verdict is awaited)
    or RESTART, ``reason`` (why a restart: the result's restart_reason), ``resuming``
    (a later step of the launch the recorded server is), and the fingerprint (``parts``, ``fingerprint``)."""
    action: str
    reason: Optional[str]
    resuming: bool
    parts: Dict[str, str]
    fingerprint: str


def plan_start(p, recorded, parts, fp):
    """The plan of ``state: started`` from the options ``p``, what is ``recorded`` and this run's fingerprint."""
    action, reason = start_plan(p, recorded.state, recorded.ours, fp, parts)
    later_step = bool(resuming(p, recorded.state, recorded.ours))
    if action == KEEP and later_step:
        action = ATTACH
    return Plan(action, reason, later_step, parts, fp)


def look_recorded(s):
    """What is recorded of our server in the run dir of the Settings ``s`` (applies on_foreign_pid), with the
    judgement of its last smoke test when it failed."""
    state, ours, stale = existing(s.run_dir, s.p["name"], s.p["on_foreign_pid"])
    judged = sglang_good_record.judged_failed(s.run_dir, s.p["name"], state) if ours else None
    return Recorded(state, ours, stale, judged)


def existing(run_dir, name, on_foreign_pid):
    """(state, ours?, why not ours) of the recorded server. A recorded PID that a live process of another program
    now has is refused (``on_foreign_pid: fail``), naming the pidfile, unless the option says to ignore it."""
    state = sglang_proc.read_state(run_dir, name)
    if state is None:
        return None, False, None
    if state.get("untrusted"):
        raise WaitError(state["untrusted"])
    reason = sglang_proc.why_not_ours(state)
    if reason is None:
        return state, True, None
    pid = state.get("pid")
    foreign_alive = pid is not None and sglang_proc.pid_alive(pid) and (
        state.get("unverified") or state.get("boot_id") in (None, sglang_proc.boot_id()))
    if foreign_alive and on_foreign_pid == "fail":
        cmd = " ".join(sglang_proc.proc_cmdline(pid) or [])[:200]
        raise WaitError(
            "pidfile %s points at PID %d (%s), which is not the server we launched: %s. Nothing was "
            "signalled or launched. Remove the stale pidfile (or set on_foreign_pid: ignore)."
            % (sglang_proc.state_paths(run_dir, name)[0], pid, cmd or "?", reason))
    return state, False, reason


def refuse_foreign_port(port, state, ours):
    """Before anything is touched: WaitError when a process that is not ours listens on ``port`` (our old server's
    processes may hold it, an orphaned child that inherited the socket included)."""
    ours_pids = set(sglang_proc.our_tree(state)) if ours else set(sglang_proc.orphans_of(state))
    holders = sglang_proc.pids_holding_sockets(sglang_proc.listeners(port)) - ours_pids
    if holders:
        desc = ", ".join("PID %d (user %s: %s)" % (h, _user_of(h), " ".join(sglang_proc.proc_cmdline(h) or [])[:120])
                         for h in sorted(holders))
        raise WaitError("port %d is held by a process that is not ours: %s. Nothing was stopped or "
                        "launched; stop it or choose another port." % (port, desc))


def _user_of(pid):
    uid = sglang_proc.proc_uid(pid)
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, TypeError):
        return str(uid)
