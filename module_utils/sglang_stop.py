# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model stops a deployment: through systemd (its unit's cgroup) or, detached, its supervisor (SIGTERM to
the verified process) and the recorded tree; ``state: stopped`` also forgets the supervisor's config. Before a
restart's launch, GpuRelease waits until the stopped server's GPU memory is back (``gpu_release_*``).

Module side only. Never signals a process that is not ours, never in check mode.
"""

from __future__ import annotations

import os

from ansible.module_utils import sglang_contract
from ansible.module_utils import sglang_gpus
from ansible.module_utils import sglang_proc
from ansible.module_utils.sglang_unit import unit_name
from ansible.module_utils.sglang_inputs import WaitError


class Stopper(object):
    def __init__(self, w):
        self.w = w  # the ModelWaiter: options, result, injected clock and tools

    def unit_active(self):
        """Whether our unit (systemd launcher) is loaded and not inactive: it may run a server with no run state yet."""
        if self.w.launcher != "systemd" or not os.path.exists(self.w.unit.unit_path()):
            return False
        return self.w.systemctl.show(unit_name(self.w.p["name"])).get("ActiveState", "inactive") not in ("inactive", "failed")

    def _stop(self, state, disable=False):
        """Stop our recorded server (its tree, or what is left of it) and forget it. A bare pidfile
        proves nothing and is only removed. A server our unit runs is stopped by systemd (its cgroup)."""
        if os.path.exists(self.w.unit.unit_path()) and (state.get("launcher") == "systemd" or self.w.launcher == "systemd"):
            self.stop_unit(disable)
            if not state.get("unverified") and state.get("pid") is not None:
                left = sorted(set(sglang_proc.our_tree(state)) | set(sglang_proc.orphans_of(state)))
                if left:
                    raise WaitError("systemd stopped %s but PIDs %s of our server are still there"
                                    % (unit_name(self.w.p["name"]), left))
            sglang_proc.clear_state(self.w.run_dir, self.w.p["name"])
            return
        if not state.get("unverified"):
            # the detached supervisor ends the server's session itself and writes `stopped` (without a cgroup it is
            # no member of the tree stop_tree signals)
            self.w.supervisors.terminate(state)
            stopped = sglang_proc.stop_tree(state, grace=self.w.p["stop_timeout"], clock=self.w.clock, sleep=self.w.sleep)
            # the supervisor (in a session of its own) ends once its server is gone: wait for it, so that nothing of
            # the deployment runs when the stop returns
            killed = self.w.supervisors.wait_gone(state, grace=max(5.0, float(self.w.p["stop_timeout"])),
                                                  clock=self.w.clock, sleep=self.w.sleep)
            if killed is not None and killed not in stopped["killed"]:
                stopped["killed"].append(killed)
            if stopped["signalled"] or stopped["killed"]:
                self.w.result["stopped"] = stopped
            left = stopped["remaining"] + ([killed] if killed is not None and self.w.supervisors.alive(state) else [])
            if left:
                raise WaitError("could not stop our server: PIDs %s survived SIGKILL" % left)
            self._remove_cgroup(state)
        sglang_proc.clear_state(self.w.run_dir, self.w.p["name"])

    def _remove_cgroup(self, state):
        cg = sglang_proc.dedicated_cgroup(state)
        if cg is not None:
            self.w.cgroups.remove(*cg)

    def stop_unit(self, disable=False):
        """``systemctl stop`` (``disable --now`` for state=stopped) of our own deployment's unit only: systemd
        signals the unit's whole cgroup, waits TimeoutStopSec (stop_timeout), then SIGKILLs what is left."""
        unit = unit_name(self.w.p["name"])
        args = ("disable", "--now", unit) if disable else ("stop", unit)
        self.w.unit.check_unit_still_ours(" ".join(args[:-1]))
        t0 = self.w.clock()
        rc, _out, err = self.w.systemctl(*args)
        if rc != 0:
            raise WaitError("systemctl %s failed (rc=%s): %s" % (" ".join(args), rc, (err or "").strip()[-300:]))
        self.w.result["stopped"] = {"unit": unit, "seconds": round(self.w.clock() - t0, 3), "how": "systemctl " + args[0]}

    def stop_only(self):
        state, ours = self.w._existing()
        if self.w.launcher == "systemd" and os.path.exists(self.w.unit.unit_path()):
            # The unit goes down (and stays down at boot); systemd stops its whole cgroup.
            show = self.w.systemctl.show(unit_name(self.w.p["name"]))
            enabled = show.get("UnitFileState") == "enabled"
            if show.get("ActiveState", "inactive") in ("inactive", "failed") and not enabled and state is None:
                if not self.w.module.check_mode and self.forget_watcher_config():
                    self.w.result["changed"] = True
                return self.w.result
            if self.w.module.check_mode:
                self.w.result.update(changed=True, msg="would stop and disable %s" % unit_name(self.w.p["name"]))
                return self.w.result
            self._stop(state or {"pid": None, "unverified": True}, disable=True)
            self.forget_watcher_config()
            self.w.result.update(changed=True, pid=(state or {}).get("pid"), unit=unit_name(self.w.p["name"]))
            return self.w.result
        if state is None:
            if not self.w.module.check_mode and self.forget_watcher_config():
                self.w.result["changed"] = True
            return self.w.result
        if self.w.module.check_mode:
            self.w.result["changed"] = True
            self.w.result["msg"] = "would stop PID %s" % state.get("pid") if ours else "would remove stale run state"
            return self.w.result
        self._stop(state)
        self.forget_watcher_config()
        self.w.result["changed"] = True
        self.w.result["pid"] = state.get("pid")
        return self.w.result

    def forget_watcher_config(self):
        """``state: stopped``: the watcher program's config (``<name>.watcher.json``, the secret_environment values)
        goes with the server, so that no file of the run dir holds a secret once it is stopped. A later start
        writes it again. Returns whether there was one."""
        fname = sglang_contract.CONFIG % self.w.p["name"]
        try:
            there = os.path.lexists(os.path.join(self.w.run_dir, fname))
            sglang_proc.remove_file(self.w.run_dir, fname)
            return there
        except (OSError, sglang_proc.UntrustedState) as e:
            raise WaitError("the server is stopped, but %s/%s (it holds the server's secret environment) could not be "
                            "removed: %s" % (self.w.run_dir, sglang_contract.CONFIG % self.w.p["name"], e))


class GpuRelease(object):
    """wait_for_model's GPU release (options ``gpu_release_*``): after our old server was stopped and before the new
    one is launched, wait until every selected GPU's memory.used is below ``gpu_release_below_mib``. ``check()``
    runs before anything is stopped (nvidia-smi answers and lists the selected GPUs), ``wait()`` after the stop;
    RV(gpu_release) says what was seen. Never in check mode (the caller sees to it)."""

    def __init__(self, w, smi=None):
        self.w = w  # the ModelWaiter: options, result, injected clock and sleep
        self._smi = smi

    @property
    def smi(self):
        if self._smi is None:
            self._smi = sglang_gpus.Smi(self.w.module, self.w.module.get_bin_path("nvidia-smi"))
        return self._smi

    def wanted(self):
        return self.w.p["gpu_release_indices"]

    def poll(self):
        return sglang_gpus.parse_used(self.smi.query("--query-gpu=" + sglang_gpus.USED_QUERY))

    def check(self):
        """Before the stop: whether to wait after it. No option: no. No nvidia-smi: no, with a note. Otherwise one
        query, which must list every selected GPU (WaitError, nothing stopped)."""
        p = self.w.p
        if p["gpu_release_below_mib"] is None:
            return False
        if not self.smi.path:
            self.w.result["gpu_release"] = {"below_mib": p["gpu_release_below_mib"], "seconds": 0.0, "polls": 0,
                                            "gpus": [], "note": "nvidia-smi not found: no GPU memory to wait for"}
            return False
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
        return True

    def wait(self):
        """After the stop, before the launch: poll until the memory is back, or fail (the old server is stopped,
        nothing launched)."""
        p = self.w.p
        limit, wanted = p["gpu_release_below_mib"], self.wanted()
        stopped = "our old server is stopped (%s), nothing was launched" % describe_stopped(self.w.result.get("stopped"))
        try:
            ok, gpus, seconds, polls, elapsed = sglang_gpus.wait_below(self.poll, wanted, limit, p["gpu_release_timeout"],
                                                                       p["poll_interval"], self.w.clock, self.w.sleep)
        except (sglang_gpus.NvidiaSmiError, ValueError) as e:
            raise WaitError("cannot read the GPUs' memory while waiting for its release (%s): %s" % (e, stopped))
        selected = [g for g in gpus if wanted is None or g["index"] in wanted]
        self.w.result["gpu_release"] = {"below_mib": limit, "seconds": seconds if ok else elapsed, "polls": polls,
                                        "gpus": selected}
        if not ok:
            raise WaitError("GPU memory not below %d MiB %s s after our old server was stopped: %s; %s. Free the GPUs "
                            "(gpu_facts shows who holds them) and run again, or raise gpu_release_timeout."
                            % (limit, elapsed, sglang_gpus.figures(sglang_gpus.held(gpus, wanted, limit)), stopped))


def describe_stopped(stopped):
    if not stopped:
        return "no process was left"
    if stopped.get("unit"):
        return "%s of %s" % (stopped.get("how", "systemctl stop"), stopped["unit"])
    return "PIDs %s" % ", ".join(str(pid) for pid in (stopped.get("signalled") or []) + (stopped.get("killed") or []))
