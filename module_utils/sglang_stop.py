# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model stops a deployment: through systemd (its unit's cgroup) or, detached, its supervisor (SIGTERM to
the verified process) and the recorded tree; ``state: stopped`` also forgets the supervisor's config.

Module side only. Never signals a process that is not ours, never in check mode.
"""

from __future__ import annotations

import os

from ansible.module_utils import sglang_contract
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
