# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Health that never harms the server: one health request per server at a time, never abandoned inside SGLang's own
window, and, while it serves, the questions that cost it nothing (is it busy or stuck?).

Standard library only. Used by the supervisor program (``sglang_supervisor``, installed with this file: sglang_program)
and by ``wait_for_model`` (its attach, its ``state: watched`` requests): both go through the same gate.

SGLang 0.5.23's ``/health`` and ``/health_generate`` send a real one-token request and wait up to
``SGLANG_HEALTH_CHECK_TIMEOUT`` (20 s) for any output of the detokenizer; its scheduler skips health requests while
it is busy, and a request whose client gave up stays resident in the scheduler (SGLang #35884: piled-up probes
crashed paged prefill). Hence:

* :func:`health_window`: the server's window, from its environment as configured (default 20 s);
  :func:`probe_timeout` / :func:`serve_interval`: a client timeout and a serving interval no shorter than the window
  plus :data:`MARGIN`;
* :class:`ProbeGate`: ``flock`` on the root-owned ``<run_dir>/<name>.probe.lock`` (opened in the checked run dir,
  ``O_NOFOLLOW``, ours and writable by nobody else, or replaced) held for the whole request, with the last request's
  send time in it: a request that got no answer (its client gave up, or died) keeps the gate shut until its window
  on the server is over. A request the gate keeps back is not sent (:data:`GATED`), never counted as a failure;
* :class:`Activity`: while serving, what moves (the log, ``/v1/loads``, the token counters of ``/metrics``): failed
  health is ``busy`` while something moved within ``serve_stuck_seconds``, else ``stuck``.
"""

from __future__ import annotations

import errno
import fcntl
import http.client as http_client
import json
import os
import re
import ssl
import stat
import time
from urllib.parse import urlparse

from . import sglang_proc

WINDOW_VAR = "SGLANG_HEALTH_CHECK_TIMEOUT"
DEFAULT_WINDOW = 20.0  # s: SGLang 0.5.23's default SGLANG_HEALTH_CHECK_TIMEOUT
MARGIN = 5.0  # s past the server's window before our client gives a health request up
GATE = "%s.probe.lock"
GATED = "gated"  # what a gated ask returns when the gate kept the request back (none sent)
ABANDONED_SHARE = 0.9  # an unanswered request that took this share of its timeout timed out (else: refused at once)
RESIDENT_BLIND = 3  # windows (+ margin) after which a possibly resident request is taken as gone, where no idle shows
STUCK_DEFAULT = 300.0  # s: SGLang's --watchdog-timeout default
STUCK_ACTIONS = ("report", "restart")
_TLS = []


def health_window(env):
    """The server's health window in seconds: ``SGLANG_HEALTH_CHECK_TIMEOUT`` of its environment as configured (a
    dict; a value that is not a positive number is SGLang's default, as SGLang reads it)."""
    value = (env or {}).get(WINDOW_VAR)
    try:
        window = float(value)
    except (TypeError, ValueError):
        return DEFAULT_WINDOW
    return window if 0 < window < 86400 else DEFAULT_WINDOW


def probe_timeout(configured, window):
    """A client timeout that outlasts the server's window (never abandoned inside it)."""
    return max(float(configured or 0), window + MARGIN)


def serve_interval(configured, window):
    """The interval between two health requests to a serving server: no shorter than the window plus the margin."""
    return max(float(configured or 0), window + MARGIN)


# ------------------------------------------------------------------------------ the gate
class ProbeGate(object):
    """One health request per server in flight (see the module docstring). ``clock``: CLOCK_MONOTONIC, the same for
    every process of a boot (the record carries the boot id: after a reboot it is void). ``run_dir`` None: no gate
    (no run dir given).

    A request that failed after waiting out the server's window (a 503 from SGLang's handler, or our timeout) may
    still be resident in the scheduler, which keeps a health request it skipped while busy: the record says
    ``resident`` and the gate stays shut until something shows the server idle: ``idle()`` (None: cannot tell, True:
    no request running or waiting, from ``/v1/loads``, which is no generation) says True, or, where it can never tell
    (no ``/v1/loads``), :data:`RESIDENT_BLIND` windows have passed. A new server process starts with none
    (:meth:`forget`)."""

    def __init__(self, run_dir, name, window, clock=time.monotonic, locker=fcntl.flock, idle=None):
        self.run_dir, self.name, self.window = run_dir, name, window
        self.clock, self.locker, self.idle = clock, locker, idle
        self.boot = sglang_proc.boot_id()
        self.kept_back = 0  # requests the gate held back (for tests and the status)
        self.free_at = None  # when an earlier unanswered request's window ends (the record's word), or None

    def _open(self):
        dir_fd = sglang_proc.open_run_dir(self.run_dir)
        try:
            fname = GATE % self.name
            for _try in range(2):
                flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0)
                fd = os.open(fname, flags, 0o600, dir_fd=dir_fd)
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022:
                    return fd
                os.close(fd)  # not ours (the run dir is checked: nobody else could have made it), replaced
                os.unlink(fname, dir_fd=dir_fd)
            raise OSError(errno.EPERM, "cannot make %s ours" % fname)
        finally:
            os.close(dir_fd)

    def _record(self, fd):
        try:
            data = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
        except (ValueError, UnicodeDecodeError, OSError):
            return {}
        return data if isinstance(data, dict) else {}

    @staticmethod
    def _write(fd, record):
        text = json.dumps(record, sort_keys=True).encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)

    def enter(self):
        """A held gate (pass it to ``leave``), or None: another request is in flight, or an earlier one that got no
        answer may still be resident in the server (``free_at`` says until when)."""
        if self.run_dir is None:
            return -1
        try:
            fd = self._open()
        except (OSError, sglang_proc.UntrustedState):
            return -1  # no trusted run dir to keep a gate in: this process's own requests are still one at a time
        try:
            self.locker(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            self.kept_back += 1
            return None
        rec = self._record(fd)
        now = self.clock()
        until = rec.get("until")
        if rec.get("boot") != self.boot:
            rec = {}
        shut = (not rec.get("answered", True) and isinstance(until, (int, float))
                and rec.get("sent", now) <= now < until)
        if not shut and rec.get("resident"):
            shut = not self._resident_gone(rec, now)
        if shut:
            self.free_at = until if isinstance(until, (int, float)) and now < until else now + 1.0
            self.locker(fd, fcntl.LOCK_UN)
            os.close(fd)
            self.kept_back += 1
            return None
        self.free_at = None
        try:
            self._write(fd, {"sent": now, "until": now + self.window + MARGIN, "answered": False, "boot": self.boot,
                             "pid": os.getpid()})
        except OSError:
            pass
        return fd

    def _resident_gone(self, rec, now):
        """Whether a request the record calls resident can no longer be in the server: it is seen idle, or, where
        nothing can tell, RESIDENT_BLIND windows have passed since it was sent."""
        idle = self.idle() if self.idle is not None else None
        if idle is None:
            sent = rec.get("sent")
            return not isinstance(sent, (int, float)) or now - sent >= RESIDENT_BLIND * (self.window + MARGIN)
        return bool(idle)

    def forget(self):
        """A new server process: no request of ours is in it (the record is emptied)."""
        if self.run_dir is None:
            return
        try:
            fd = self._open()
        except (OSError, sglang_proc.UntrustedState):
            return
        try:
            self.locker(fd, fcntl.LOCK_EX)
            self._write(fd, {})
            self.locker(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        finally:
            os.close(fd)

    def leave(self, fd, answered, resident=False):
        """The request ended: ``answered`` (anything came back, or it never reached the server) frees the gate at once,
        unless it may be ``resident`` (it failed after waiting out the server's window): then the gate stays shut
        until the server is seen idle; else (no answer) its record keeps the gate shut until its window on the server
        is over."""
        if fd is None or fd < 0:
            return
        try:
            if resident:
                rec = self._record(fd)
                rec.update(answered=True, resident=True)
                self._write(fd, rec)
            elif answered:
                rec = self._record(fd)
                rec["answered"] = True
                self._write(fd, rec)
        except OSError:
            pass
        finally:
            try:
                self.locker(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def gated(ask, gate, clock=time.monotonic):
    """``ask(timeout)`` through ``gate``: GATED when it kept the request back. A request that got no answer after
    most of its timeout (it timed out, the server may hold it) keeps the gate shut for its window; one refused at once
    never reached a scheduler."""
    def run(timeout):
        held = gate.enter()
        if held is None:
            return GATED
        code, sent = None, clock()
        try:
            code = ask(timeout)
        finally:
            taken = clock() - sent
            # failed after waiting out the server's window (its 503, or our timeout past it): it may stay resident.
            # A start's short request (a timeout under the window) keeps the gate shut for its window, as before.
            resident = code != 200 and taken >= ABANDONED_SHARE * gate.window
            gate.leave(held, code is not None or taken < ABANDONED_SHARE * timeout, resident=resident)
        return code
    return run


# ------------------------------------------------------------------------------ what costs the server nothing
def http_get(url, headers, timeout, limit=1 << 20):
    """(status, body bytes) of a GET, or None when nothing answered. Plain http.client, as sglang_verdict.http_status."""
    u = urlparse(url)
    path = (u.path or "/") + ("?" + u.query if u.query else "")
    try:
        if u.scheme == "https":
            if not _TLS:
                _TLS.append(ssl._create_unverified_context())  # our own server on loopback
            conn = http_client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout, context=_TLS[0])
        else:
            conn = http_client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read(limit)
        finally:
            conn.close()
    except (OSError, http_client.HTTPException, ValueError):
        return None


def base_url(health_url):
    u = urlparse(health_url)
    return "%s://%s" % (u.scheme or "http", u.netloc)


def idle_check(fetch, health_url, headers):
    """For :class:`ProbeGate`: a callable saying whether the server is idle by its ``/v1/loads`` (no generation):
    True when no request runs or waits, False when some do, None when it cannot tell (no fetch, no answer)."""
    def idle():
        if fetch is None:
            return None
        loads = loads_of(fetch(base_url(health_url) + "/v1/loads", headers, Activity.SAMPLE_TIMEOUT))
        return None if loads is None else loads == (0, 0)
    return idle


def loads_of(answer):
    """(running, waiting) summed over the ranks of a ``/v1/loads`` answer ((status, body)), or None."""
    if not answer or answer[0] != 200:
        return None
    try:
        body = json.loads(answer[1].decode("utf-8", "replace"))
        running = waiting = 0
        for load in body["loads"]:
            running += int(load.get("num_running_reqs") or 0)
            waiting += int(load.get("num_waiting_reqs") or 0)
        return running, waiting
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


COUNTER_RX = re.compile(r"^sglang:(?:prompt_tokens_total|generation_tokens_total|num_requests_total)\{?[^ ]*\s+"
                        r"([0-9.eE+-]+)\s*$", re.M)


def counters_of(answer):
    """The sum of the token and request counters of a ``/metrics`` answer (``--enable-metrics``), or None."""
    if not answer or answer[0] != 200:
        return None
    found = COUNTER_RX.findall(answer[1].decode("utf-8", "replace"))
    try:
        return sum(float(x) for x in found) if found else None
    except ValueError:
        return None


class Activity(object):
    """While serving: when something last moved. ``sample(now)`` asks ``fetch(url, headers, timeout)`` for
    ``/v1/loads`` and ``/metrics`` (neither is a generation); the log's growth and health answers come from the
    watch. ``state(now, failing)``: None while health answers, ``busy`` while it fails and something moved within
    ``stuck_seconds``, ``stuck`` when nothing moved for that long."""

    SAMPLE_TIMEOUT = 5.0

    def __init__(self, fetch, health_url, headers, stuck_seconds, t0):
        self.fetch, self.base, self.headers = fetch, base_url(health_url), headers
        self.stuck_seconds = stuck_seconds
        self.moved_at = t0  # when something last moved
        self.loads = None  # (running, waiting) of the last answer
        self.counters = None
        self.metrics = True  # False once /metrics answered 404 (not enabled): not asked again
        self.loads_at = None  # when the request of the last loads answer was sent

    def moved(self, now):
        self.moved_at = max(self.moved_at, now)

    def sample(self, now):
        if self.fetch is None:
            return
        loads = loads_of(self.fetch(self.base + "/v1/loads", self.headers, self.SAMPLE_TIMEOUT))
        if loads is not None:
            if loads != self.loads and self.loads is not None:
                self.moved(now)
            self.loads, self.loads_at = loads, now
        if self.metrics:
            answer = self.fetch(self.base + "/metrics", self.headers, self.SAMPLE_TIMEOUT)
            if answer and answer[0] == 404:
                self.metrics = False
            counters = counters_of(answer)
            if counters is not None:
                if self.counters is not None and counters != self.counters:
                    self.moved(now)
                self.counters = counters

    def state(self, now, failing):
        if not failing:
            return None
        return "stuck" if now - self.moved_at >= self.stuck_seconds else "busy"

    def summary(self, now):
        return {"running": self.loads[0] if self.loads else None, "waiting": self.loads[1] if self.loads else None,
                "moved_ago": round(max(0.0, now - self.moved_at), 1), "serve_stuck_seconds": self.stuck_seconds}
