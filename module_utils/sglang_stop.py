# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model stops a deployment: through systemd (its unit's cgroup) or, detached, its supervisor (SIGTERM to
the verified process) and the recorded tree; ``state: stopped`` also forgets the supervisor's config. Before a
restart's launch, GpuRelease waits until the stopped server's GPU memory is back (``gpu_release_*``).

Module side only. Never signals a process that is not ours, never in check mode. Each executor takes the Settings,
the Host and what it acts on, and returns its report (``stopped``, ``gpu_release``, ...).
"""

from __future__ import annotations

import os

from ansible.module_utils import sglang_contract
from ansible.module_utils import sglang_gpus
from ansible.module_utils import sglang_proc
from ansible.module_utils import sglang_unit_guard
from ansible.module_utils.sglang_unit_facts import unit_name
from ansible.module_utils.sglang_input_checks import WaitError
from ansible.module_utils.sglang_reports import findings


def unit_active(s, host):
    """Whether our unit (systemd launcher) is loaded and not inactive: it may run a server with no run state yet."""
    if s.launcher != "systemd" or not os.path.exists(sglang_unit_guard.unit_path(s.p)):
        return False
    return host.systemctl.show(unit_name(s.p["name"])).get("ActiveState", "inactive") not in ("inactive", "failed")


def stop_recorded(s, host, state, disable=False):
    """Stop our recorded server (its tree, or what is left of it) and forget it. A bare pidfile
    proves nothing and is only removed. A server our unit runs is stopped by systemd (its cgroup). Returns the
    report: ``stopped`` (what was stopped, when anything was)."""
    p, run_dir = s.p, s.run_dir
    with findings() as report:
        if os.path.exists(sglang_unit_guard.unit_path(p)) and (state.get("launcher") == "systemd" or s.launcher == "systemd"):
            report.update(stop_unit(s, host, disable))
            if not state.get("unverified") and state.get("pid") is not None:
                left = sorted(set(sglang_proc.our_tree(state)) | set(sglang_proc.orphans_of(state)))
                if left:
                    raise WaitError("systemd stopped %s but PIDs %s of our server are still there"
                                    % (unit_name(p["name"]), left))
            sglang_proc.clear_state(run_dir, p["name"])
            return report
        if not state.get("unverified"):
            # the detached supervisor ends the server's session itself and writes `stopped` (without a cgroup it is
            # no member of the tree stop_tree signals)
            host.supervisors.terminate(state)
            stopped = sglang_proc.stop_tree(state, grace=p["stop_timeout"], clock=host.clock, sleep=host.sleep)
            # the supervisor (in a session of its own) ends once its server is gone: wait for it, so that nothing of
            # the deployment runs when the stop returns
            killed = host.supervisors.wait_gone(state, grace=max(5.0, float(p["stop_timeout"])),
                                                clock=host.clock, sleep=host.sleep)
            if killed is not None and killed not in stopped["killed"]:
                stopped["killed"].append(killed)
            if stopped["signalled"] or stopped["killed"]:
                report["stopped"] = stopped
            left = stopped["remaining"] + ([killed] if killed is not None and host.supervisors.alive(state) else [])
            if left:
                raise WaitError("could not stop our server: PIDs %s survived SIGKILL" % left)
            cg = sglang_proc.dedicated_cgroup(state)
            if cg is not None:
                host.cgroups.remove(*cg)
        sglang_proc.clear_state(run_dir, p["name"])
        return report


def stop_unit(s, host, disable=False):
    """``systemctl stop`` (``disable --now`` for state=stopped) of our own deployment's unit only: systemd
    signals the unit's whole cgroup, waits TimeoutStopSec (stop_timeout), then SIGKILLs what is left. Returns the
    report: ``stopped``."""
    unit = unit_name(s.p["name"])
    args = ("disable", "--now", unit) if disable else ("stop", unit)
    sglang_unit_guard.check_unit_still_ours(s.p, s.run_dir, " ".join(args[:-1]))
    t0 = host.clock()
    rc, _out, err = host.systemctl(*args)
    if rc != 0:
        raise WaitError("systemctl %s failed (rc=%s): %s" % (" ".join(args), rc, (err or "").strip()[-300:]))
    report = {}
    report["stopped"] = {"unit": unit, "seconds": round(host.clock() - t0, 3), "how": "systemctl " + args[0]}
    return report


def stop_only(s, host, recorded):
    """``state: stopped``: our recorded server (``recorded``: sglang_plan.Recorded) stopped and forgotten, the
    supervisor's config with it; our unit disabled. Returns the report."""
    state, ours = recorded.state, recorded.ours
    name = s.p["name"]
    with findings() as report:
        if s.launcher == "systemd" and os.path.exists(sglang_unit_guard.unit_path(s.p)):
            # The unit goes down (and stays down at boot); systemd stops its whole cgroup.
            show = host.systemctl.show(unit_name(name))
            enabled = show.get("UnitFileState") == "enabled"
            if show.get("ActiveState", "inactive") in ("inactive", "failed") and not enabled and state is None:
                if not s.check and forget_watcher_config(s):
                    report["changed"] = True
                return report
            if s.check:
                report.update(changed=True, msg="would stop and disable %s" % unit_name(name))
                return report
            report.update(stop_recorded(s, host, state or {"pid": None, "unverified": True}, disable=True))
            forget_watcher_config(s)
            report.update(changed=True, pid=(state or {}).get("pid"), unit=unit_name(name))
            return report
        if state is None:
            if not s.check and forget_watcher_config(s):
                report["changed"] = True
            return report
        if s.check:
            report["changed"] = True
            report["msg"] = "would stop PID %s" % state.get("pid") if ours else "would remove stale run state"
            return report
        report.update(stop_recorded(s, host, state))
        forget_watcher_config(s)
        report["changed"] = True
        report["pid"] = state.get("pid")
        return report


def forget_watcher_config(s):
    """``state: stopped``: the watcher program's config (``<name>.watcher.json``, the secret_environment values)
    goes with the server, so that no file of the run dir holds a secret once it is stopped. A later start
    writes it again. Returns whether there was one."""
    fname = sglang_contract.CONFIG % s.p["name"]
    try:
        there = os.path.lexists(os.path.join(s.run_dir, fname))
        sglang_proc.remove_file(s.run_dir, fname)
        return there
    except (OSError, sglang_proc.UntrustedState) as e:
        raise WaitError("the server is stopped, but %s/%s (it holds the server's secret environment) could not be "
                        "removed: %s" % (s.run_dir, fname, e))


class GpuRelease(object):
    """wait_for_model's GPU release (options ``gpu_release_*``): after our old server was stopped and before the new
    one is launched, wait until every selected GPU's memory.used is below ``gpu_release_below_mib``. ``check()``
    runs before anything is stopped (nvidia-smi answers and lists the selected GPUs), ``wait()`` after the stop;
    RV(gpu_release) says what was seen. Never in check mode (the caller sees to it)."""

    def __init__(self, s, host):
        self.s = s  # the Settings
        self.host = host  # the Host: clock, sleep, nvidia-smi

    @property
    def smi(self):
        return self.host.gpu_smi()

    def wanted(self):
        return self.s.p["gpu_release_indices"]

    def poll(self):
        return sglang_gpus.parse_used(self.smi.query("--query-gpu=" + sglang_gpus.USED_QUERY))

    def check(self):
        """Before the stop: (whether to wait after it, report). No option: no. No nvidia-smi: no, with a note.
        Otherwise one query, which must list every selected GPU (WaitError, nothing stopped)."""
        p = self.s.p
        report = {}
        if p["gpu_release_below_mib"] is None:
            return False, report
        if not self.smi.path:
            report["gpu_release"] = {"below_mib": p["gpu_release_below_mib"], "seconds": 0.0, "polls": 0,
                                     "gpus": [], "note": "nvidia-smi not found: no GPU memory to wait for"}
            return False, report
        try:
            gpus = self.poll()
        except (sglang_gpus.NvidiaSmiError, ValueError) as e:
            raise WaitError("gpu_release_below_mib: cannot read the GPUs' memory (%s). Nothing was stopped or "
                            "launched." % e)
        unknown = sglang_gpus.unknown_indices(self.wanted(), gpus)
        if unknown:
            raise WaitError("gpu_release_indices %s not found: nvidia-smi lists %s. Nothing was stopped or launched; "
                            "fix gpu_release_indices." % (", ".join(str(i) for i in unknown),
                                                          ", ".join(str(g["index"]) for g in gpus) or "no GPU"))
        return True, report

    def wait(self, stopped):
        """After the stop (``stopped``: the stop's report of it), before the launch: poll until the memory is back,
        or fail (the old server is stopped, nothing launched). Returns the report: ``gpu_release``."""
        p, host = self.s.p, self.host
        limit, wanted = p["gpu_release_below_mib"], self.wanted()
        stopped = "our old server is stopped (%s), nothing was launched" % describe_stopped(stopped)
        report = {}
        try:
            ok, gpus, seconds, polls, elapsed = sglang_gpus.wait_below(self.poll, wanted, limit, p["gpu_release_timeout"],
                                                                       p["poll_interval"], host.clock, host.sleep)
        except (sglang_gpus.NvidiaSmiError, ValueError) as e:
            raise WaitError("cannot read the GPUs' memory while waiting for its release (%s): %s" % (e, stopped))
        selected = [g for g in gpus if wanted is None or g["index"] in wanted]
        report["gpu_release"] = {"below_mib": limit, "seconds": seconds if ok else elapsed, "polls": polls,
                                 "gpus": selected}
        if not ok:
            exc = WaitError(
                "GPU memory not below %d MiB %s s after our old server was stopped: %s; %s. Free the GPUs "
                "(gpu_facts shows who holds them) and run again, or raise gpu_release_timeout."
                % (limit, elapsed, sglang_gpus.figures(sglang_gpus.held(gpus, wanted, limit)), stopped))
            exc.findings = [report]
            raise exc
        return report


def describe_stopped(stopped):
    if not stopped:
        return "no process was left"
    if stopped.get("unit"):
        return "%s of %s" % (stopped.get("how", "systemctl stop"), stopped["unit"])
    return "PIDs %s" % ", ".join(str(pid) for pid in (stopped.get("signalled") or []) + (stopped.get("killed") or []))
