# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's one port to the host: every side effect a run has (the clock, sleeping, the wall clock, starting
the supervisor, HTTP, /proc, cgroups, the lock, systemctl, the GPUs, the interpreter's proof, warnings, commands) in
one :class:`Host`. The executors take it; the unit tests give a fake one (through ModelWaiter's keyword arguments).
Also the health request through the deployment's probe gate (:func:`ask_health`). Module side only.
"""

from __future__ import annotations

import fcntl
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ansible.module_utils import sglang_gpus, sglang_probe, sglang_progress
from ansible.module_utils.sglang_input_checks import Prober
from ansible.module_utils.sglang_launch import Cgroups, Popener, Supervisors
from ansible.module_utils.sglang_unit_facts import CallerWatch, Systemctl, systemd_here
from ansible.module_utils.sglang_verdict import ProcView, http_status


def _sleep(seconds):
    """time.sleep looked up when called (not bound at import): the unit-test guard that forbids sleeping sees it."""
    time.sleep(seconds)


@dataclass
class Host(object):
    """Every side effect of a run. ``real_sleep``: the real clock (a wait may end early on an event); ``events``:
    False polls every poll_interval (no Waker; the benches' baseline); ``background_health``: False runs health
    requests inline (unit tests' fake clock)."""
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    wall: Callable[[], float]
    popener: Any  # starts the supervisor program (Popener)
    http: Callable  # (url, headers, timeout) -> HTTP status or None
    fetch: Optional[Callable]  # /v1/loads for the probe gate's idle check
    procs: Any  # the /proc view (ProcView)
    cgroups: Any
    locker: Callable  # flock
    systemctl: Any  # (*args) -> (rc, out, err); .show(unit) -> {property: value}
    booted: Callable  # () -> (systemd runs this host?, why not)
    caller_gone: Callable[[], bool]
    gpu_smi: Callable  # () -> sglang_gpus.Smi
    prober: Any  # runs the server's interpreter once (Prober)
    supervisors: Any  # the recorded detached supervisor (Supervisors)
    unit_dirs: Optional[list]  # where systemd reads units (None: unit_dir + UNIT_DIRS)
    warn: Callable[[str], None]  # the module's warning, as given
    run_command: Callable  # the module's run_command (journalctl)
    real_sleep: bool = True
    events: bool = True
    background_health: bool = True

    def say(self, text):
        """A warning, its control characters escaped: it may quote the server's log (a client's prompt)."""
        self.warn(sglang_progress.operator_text(text))


def make_host(module, clock=time.monotonic, sleep=None, popener=None, http=http_status, procs=None, wall=time.time,
              cgroups=None, locker=fcntl.flock, prober=None, background_health=True, systemctl=None,
              booted=systemd_here, caller_gone=None, unit_dirs=None, events=True, supervisors=None, gpu_smi=None,
              fetch=None):
    """The Host of a module run: the real one, but for what is given (the unit tests' fakes)."""
    smi = [gpu_smi]

    def get_smi():
        if smi[0] is None:
            smi[0] = sglang_gpus.Smi(module, module.get_bin_path("nvidia-smi"))
        return smi[0]
    return Host(
        clock=clock, sleep=sleep or _sleep, wall=wall, popener=popener or Popener(), http=http,
        # an injected HTTP comes with its own fetch, or none
        fetch=fetch if fetch is not None or http is not http_status else sglang_probe.http_get,
        procs=procs or ProcView(), cgroups=cgroups or Cgroups(), locker=locker,
        systemctl=systemctl or Systemctl(module), booted=booted, caller_gone=caller_gone or CallerWatch(),
        gpu_smi=get_smi, prober=prober or Prober(), supervisors=supervisors or Supervisors(), unit_dirs=unit_dirs,
        warn=module.warn, run_command=module.run_command, real_sleep=sleep is None, events=events,
        background_health=background_health)


def headers(p):
    """The health request's headers: the API key, when there is one."""
    return {"Authorization": "Bearer %s" % p["api_key"]} if p["api_key"] else {}


def ask_health(p, run_dir, host, timeout):
    """One health request (a generation in SGLang 0.5.23) through the deployment's probe gate
    (sglang_probe.ProbeGate, shared with the supervisor: never two of our requests in the server, none while an
    unanswered one may still be resident there), waiting for it, with a client timeout that outlasts the server's
    health window (its ``SGLANG_HEALTH_CHECK_TIMEOUT`` as configured, default 20 s). None: no answer."""
    url, hdrs = p["health_url"], headers(p)
    env = dict(p.get("environment") or {})
    env.update(p.get("secret_environment") or {})
    window = sglang_probe.health_window(env)
    timeout = sglang_probe.probe_timeout(timeout, window)
    gate = sglang_probe.ProbeGate(run_dir, p["name"], window, clock=host.clock,
                                  idle=sglang_probe.idle_check(host.fetch, url, hdrs))
    ask = sglang_probe.gated(lambda t: host.http(url, hdrs, t), gate, host.clock)
    end = host.clock() + window + sglang_probe.MARGIN + timeout + 1.0  # an abandoned one's window, or one in flight
    while True:
        code = ask(timeout)
        if code != sglang_probe.GATED:
            return code
        now = host.clock()
        if now >= end:
            return None
        wait = gate.free_at - now if gate.free_at is not None else 0.5
        host.sleep(max(0.05, min(wait, end - now)))
