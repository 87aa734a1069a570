# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's run, module side: data that flows one way. The options are checked into frozen Settings
(sglang_settings.validate), what is recorded is read (sglang_plan.look_recorded), the plan is made
(sglang_plan.plan_start, pure), the executors run (lock, stop, GPU release, launch, keep or attach, the verdict,
the watch), each with the Settings, the Host (every side effect, sglang_host_port) and what it acts on, each
returning its report; the result is built from the reports (sglang_reports.build_result). Here, not in the module
file, so that the play's one look (sglang_info with O(keep)) asks the very same code, in check mode, whether a run
would keep the server as it is.

:class:`ModelWaiter` is the module's facade: ``ModelWaiter(module, clock=..., sleep=..., popener=..., ...)`` builds
the Host from what is given (the unit tests' fakes), ``run()`` returns the result, ``result`` is the result so far
(also after a failure), ``runlock.unlock()`` lets the lock go.
"""

from __future__ import annotations

from ansible.module_utils import sglang_plan as plan
from ansible.module_utils import sglang_stop
from ansible.module_utils.sglang_host_port import make_host
from ansible.module_utils.sglang_input_checks import WaitError
from ansible.module_utils.sglang_keep import keep
from ansible.module_utils.sglang_launch import Supervision
from ansible.module_utils.sglang_lock import RunLock
from ansible.module_utils.sglang_reports import build_result, reports_of
from ansible.module_utils.sglang_settings import prove_it_runs, run_params, validate
from ansible.module_utils.sglang_status_file import Verdicts, read_status
from ansible.module_utils.sglang_stop import GpuRelease
from ansible.module_utils.sglang_serving_watch import watch_recorded


def run(params, check, host, runlock):
    """One run, as the reports it makes, in order (a generator: a failure ends it, with the failed executor's
    findings on the exception). ``runlock``: the RunLock the caller lets go."""
    s = validate(params, host, check)
    yield s.found()
    p = s.p
    if s.fresh and p["state"] == "stopped":
        yield {"msg": "nothing to stop: %s does not exist" % s.run_dir}
        return
    if check and p["state"] == "started" and (s.fresh or s.missing_files):
        yield {"changed": True, "restart_reason": "not running", "msg": "would start the server (%s)" % (
            "fresh host: %s does not exist yet" % p["log_dir"] if s.fresh
            else "fingerprint files not written yet: %s" % ", ".join(s.missing_files))}
        return
    if s.fresh:
        raise WaitError("no server of ours is recorded in %s (name %s): nothing to watch" % (s.run_dir, p["name"]))
    yield runlock.lock(s, host)
    if p["state"] == "started":
        parts, fp = plan.fingerprint(p, s.launcher)
        yield {"fingerprint": fp}
    recorded = plan.look_recorded(s)
    if recorded.stale:
        yield {"stale_state": recorded.stale}
    if p["state"] == "stopped":
        yield sglang_stop.stop_only(s, host, recorded)
    elif p["state"] == "watched":
        yield watch_recorded(s, host, recorded)
    else:
        yield from start(s, host, recorded, plan.plan_start(p, recorded, parts, fp))


def start(s, host, recorded, the_plan):
    """``state: started`` after its plan: keep (or attach to) the recorded server, or (re)start it."""
    p, state, ours = s.p, recorded.state, recorded.ours
    reason = the_plan.reason
    if the_plan.action in (plan.KEEP, plan.ATTACH):
        kept, report = keep(s, host, state, the_plan.resuming)
        yield report
        if kept:
            if recorded.judged_failed and not the_plan.resuming:
                # its smoke test failed while it kept answering: kept, but not as good (the role tests it again)
                yield {"judged_failed": recorded.judged_failed}
            return
        reason = plan.GONE  # nothing watches it and it does not answer: restarted under a supervisor
    if p["resume_attempt"] is not None and not the_plan.resuming:
        ended = plan.ended_between_steps(p, read_status(s))
        if ended is not None:  # a later step of a launch that ended meanwhile: its verdict is the answer
            yield {"restart_reason": None}
            verdicts = Verdicts(s, host)
            yield verdicts.service_stopped(ended, {}) if ended["verdict"] == "stopped" else \
                verdicts.service_failed(ended, {})
            return
    yield {"restart_reason": reason}
    plan.refuse_foreign_port(s.port, state, ours)  # before anything is touched
    yield {"changed": True}
    if s.check:
        if p["prove_launch"]:
            prove_it_runs(s, host.prober)
        yield {"msg": "would %s the server (%s)" % ("restart" if ours else "start", reason)}
        return
    prove_it_runs(s, host.prober)
    if state is not None or sglang_stop.unit_active(s, host):
        release = GpuRelease(s, host)
        wait, report = release.check()  # nvidia-smi lists the selected GPUs, before anything is stopped
        yield report
        stopped = sglang_stop.stop_recorded(s, host, state or {"pid": None, "unverified": True})
        yield stopped
        if wait:
            yield release.wait(stopped.get("stopped"))
    sup = Supervision(s, host)
    if s.launcher == "systemd":
        yield sup.launch_unit(the_plan.parts, the_plan.fingerprint)
    else:
        yield sup.launch(the_plan.parts, the_plan.fingerprint)


class ModelWaiter(object):
    """Launch / attach / wait / stop: the module's facade over :func:`run`. Clock, sleep, process launch, HTTP,
    /proc, cgroups, the lock, systemctl, the GPUs are injectable (keyword arguments: sglang_host_port.make_host)."""

    def __init__(self, module, **inject):
        self.module = module
        self.host = make_host(module, **inject)
        self.runlock = RunLock()  # <run_dir>/<name>.lock, held from the lock to the end of the run
        self.reports = []  # what the run found so far, in order

    @property
    def result(self):
        """The result from the reports so far (a failed run's too)."""
        return build_result(self.reports)

    def run(self):
        params = run_params(self.module.params)
        try:
            for report in run(params, self.module.check_mode, self.host, self.runlock):
                self.reports.append(report)
        except Exception as exc:
            self.reports.extend(reports_of(exc))
            raise
        finally:
            self.runlock.unlock()
        return self.result
