# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model keeps our recorded server (the plan's KEEP or ATTACH): a warning when the installed supervisor
program is not this eagle-deploy's (the role's copy brings it up to date; no restart), then ready when it answers,
else its supervisor's word (a later step's verdict, or an attach). A detached one whose supervisor is gone is given
one back (``--adopt``) when it answers. :func:`keep` takes the Settings, the Host, the recorded state and whether
this is a later step of its launch, and returns (kept?, report).

Module side only.
"""

from __future__ import annotations

from ansible.module_utils import sglang_proc, sglang_progress
from ansible.module_utils.sglang_host_port import ask_health
from ansible.module_utils.sglang_input_checks import WaitError
from ansible.module_utils.sglang_launch import Supervision
from ansible.module_utils.sglang_reports import findings
from ansible.module_utils.sglang_status_file import (
    StatusWait, Verdicts, progress_of, read_status, record_load,
)


def keep(s, host, state, resuming):
    """Our server with the same fingerprint: (True, report) when it is kept (ready, or its supervisor's word);
    (False, report) when it is not: detached, its supervisor gone and it does not answer (the module watches no
    server itself, so it is restarted)."""
    with findings() as report:
        return _keep(s, host, state, resuming, report), report


def _keep(s, host, state, resuming, report):
    p = s.p
    sup = Supervision(s, host)
    problem = (s.launcher == "systemd" or state.get("watcher")) and sup.program_problem()
    if problem:  # the role's copy brings it up to date (no restart: its next start uses it); the module writes none
        host.say(problem)
    systemd = state.get("launcher") == "systemd"
    alone = not systemd and not host.supervisors.alive(state)
    # A later step of the launch this task started, its supervisor there: the supervisor's word comes first, and
    # its verdict ends the step at once. A request of ours before it would hold the step as long as the server
    # holds it (one whose scheduler died holds /health_generate until SGLang ends its tree).
    heeds_supervisor = resuming and not alone and not s.check
    code = None if heeds_supervisor else ask_health(p, s.run_dir, host, p["health_timeout"])
    report.update(pid=state["pid"], log_path=state.get("log_path"), attempt=state.get("attempt"),
                  restart_reason=None, tree_tracking=state.get("tree_tracking", "session"))
    report.update(serving_state(s, host, state))
    if sglang_proc.log_writer_of(state) is not None:
        # a run state of an eagle-deploy older than the supervisor: its server's output goes through a log writer
        # process, recorded as `log_writer` (stop_tree ends it last), kept and reported, and stopped cleanly.
        report["log_writer_pid"] = state["log_writer"]["pid"]
    if alone and code != 200:
        report["supervisor"] = "gone"
        return False
    supervisor = None if systemd else (lambda: None if host.supervisors.alive(state) else -1)
    if alone:
        report.update(sup.supervisor_gone(state, healthy=True))
    elif resuming and not s.check:
        # A later step of the launch this task started: its supervisor's verdict (and the load's times) is the
        # answer, also when our own probe was answered first; its ready still needs an answer of this run's own.
        report.update(StatusWait(s, host).wait_service(
            None, attached=False, attempt=state.get("attempt"), supervisor=supervisor))
        answered(s, host, state, code, report, probed=not heeds_supervisor)
        return True
    if code == 200:
        report.update(ready_now(s, host, state, resuming))
        return True
    if s.check:
        report["msg"] = "server with the same fingerprint is running but not healthy yet; would wait for it"
        return True
    # its supervisor decides: wait on its status file
    report.update(StatusWait(s, host).wait_service(
        None, attached=not resuming, attempt=state.get("attempt"), supervisor=supervisor))
    answered(s, host, state, code, report)
    return True


def serving_state(s, host, state):
    """A kept server its supervisor finds busy or stuck (its status's ``serving.activity``): said in the report
    (``serving_state``) and a warning, so that the next run tells what the supervisor saw. Nothing is stopped
    for it here: a stuck server is restarted only by its supervisor (serve_stuck_action: restart)."""
    report = {}
    try:
        st = read_status(s) or {}
    except WaitError:
        return report
    if st.get("attempt") != state.get("attempt") or st.get("verdict") != "ready":
        return report
    serving = st.get("serving") if isinstance(st.get("serving"), dict) else {}
    act = serving.get("activity") if isinstance(serving.get("activity"), dict) else {}
    if act.get("state") in ("busy", "stuck"):
        report["serving_state"] = act["state"]
        host.say("the serving server (PID %s) is %s by its supervisor's word: %s" % (
            state.get("pid"), act["state"], st.get("status") or act["state"]))
    return report


def answered(s, host, state, code, report, probed=True):
    """The supervisor's ``ready`` taken only with an answer of this run's own: a health request this run sent
    (after it began) answered 200. A standing ``ready`` is the supervisor's word from before; a server that
    stopped answering since (its process stopped or hung) is never reported healthy. One request at a time,
    through ask_health (the probe gate: each given more than the server's own health window), at most
    ``unhealthy_after`` in all with the first one of keep(). None answered: the task fails, saying so; nothing
    is stopped (a busy server answers health late, and is not a dead one). ``report``: keep's, the verdict's
    included, completed here."""
    p = s.p
    if code == 200 or report.get("failed") or report.get("pending") or report.get("phase") != "ready":
        return
    # keep()'s own first probe counts; a later step of this run's launch sent none (``probed`` False)
    polls, last, t0 = (1 if probed else 0), code, host.clock()
    while polls < max(2 if probed else 1, p["unhealthy_after"]):
        last = ask_health(p, s.run_dir, host, p["health_timeout"])
        polls += 1
        if last == 200:
            report["health_polls"] = {"polls": polls, "failed_in_a_row": 0, "last": 200}
            return
        if host.clock() - t0 < 1.0:
            host.sleep(1.0)  # refused at once: at least 1 s between two requests
    report["health_polls"] = {"polls": polls, "failed_in_a_row": polls, "last": last}
    report.pop("msg", None)  # the supervisor's words ("became healthy"): not this run's finding
    raise WaitError(sglang_progress.not_answering_words(
        state.get("pid"), polls, round(host.clock() - t0), last, Verdicts(s, host).supervisor_words()))


def ready_now(s, host, state, resuming):
    """Our kept server answered: ready, with its log's tail and end (the smoke watch's mark). Returns the report."""
    report = {}
    tail, offset = Verdicts(s, host).tail_of(state)
    report.update(elapsed=0.0, phases=[], phase="ready", log_tail=tail, log_offset=offset)
    st = {"verdict": "ready", "phase": "ready", "attempt": state.get("attempt"), "started_at": state.get("started_at")}
    if resuming and state.get("launcher") != "systemd":
        # the launch a previous step waited for answered between two steps: its load is done
        try:
            prior = read_status(s) or {}
        except WaitError:
            prior = {}
        if prior.get("attempt") == state.get("attempt"):
            st.update(phases=prior.get("phases") or [], shards=prior.get("shards"))
            record_load(s, host, state, st)
    report["progress"] = progress_of(s, host, st, state.get("launcher") or "detached")
    return report
