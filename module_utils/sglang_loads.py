# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How busy an SGLang server is, from its own ``GET /v1/loads``, and the wait until it runs and waits nothing
(module wait_for_drain). Module side only; the HTTP client, the clock and sleep are the caller's (injectable).

``/v1/loads`` (SGLang 0.5.9 and later; 0.5.23 has no ``/get_load`` any more, which is why sglang-router 0.3.2's
``/get_loads`` reads every worker as -1) answers ``{"timestamp", "version", "accelerator", "num_accelerators",
"loads": [{"dp_rank", "num_running_reqs", "num_waiting_reqs", ...}]}``, one load per data-parallel rank. It needs the
server's API key, as every path but ``/health*``, ``/ready*`` and ``/metrics*`` does. The scheduler publishes these
figures itself, a moment after a request reaches it: the wait counts a server drained only when a few looks in a row
(``quiet_samples``) find nothing running and nothing waiting.
"""

from __future__ import annotations

import time

from ansible.module_utils.sglang_json_http import Unreachable


class DrainError(Exception):
    """The figures cannot be read (no such endpoint, refused): the message says what to do."""


def load_counts(body):
    """(running, waiting) summed over every rank of a ``/v1/loads`` answer; ValueError when it is not one."""
    if not isinstance(body, dict) or not isinstance(body.get("loads"), list):
        raise ValueError("not a /v1/loads answer: %s" % (str(body)[:200],))
    running = waiting = 0
    for load in body["loads"]:
        if not isinstance(load, dict):
            raise ValueError("not a /v1/loads answer: %s" % (str(body)[:200],))
        running += int(load.get("num_running_reqs") or 0)
        waiting += int(load.get("num_waiting_reqs") or 0)
    return running, waiting


class DrainWait(object):
    """Look at ``GET <path>`` until the server runs and waits nothing. ``http`` is a JsonHttp to the server."""

    def __init__(self, http, path="/v1/loads", clock=time.monotonic, sleep=time.sleep):
        self.http = http
        self.path = path
        self.clock = clock
        self.sleep = sleep

    def look(self):
        """(running, waiting), or None when the server gave no answer (nothing runs where nothing listens)."""
        try:
            answer = self.http.call("GET", self.path)
        except Unreachable:
            return None
        if answer.status == 404:
            raise DrainError("GET %s answered 404: this server has no load endpoint (SGLang before 0.5.9?); a drain "
                             "timeout of 0 skips the watch" % self.http.url(self.path))
        if answer.status in (401, 403):
            raise DrainError("GET %s answered %d: give the server's API key (api_key)"
                             % (self.http.url(self.path), answer.status))
        if answer.status != 200:
            return "status %d" % answer.status
        try:
            return load_counts(answer.body)
        except ValueError as exc:
            raise DrainError("GET %s: %s" % (self.http.url(self.path), exc))

    def wait(self, timeout, poll_interval=1.0, quiet_samples=2, once=False):
        """Look until ``quiet_samples`` looks in a row find nothing running or waiting, or ``timeout`` passes.

        Returns drained, running, waiting, samples, elapsed, msg. ``once``: one look, no wait (check mode)."""
        start = self.clock()
        deadline = start + timeout
        quiet = samples = 0
        last = (None, None)
        while True:
            seen = self.look()
            samples += 1
            elapsed = round(self.clock() - start, 3)
            if seen is None:
                return dict(drained=True, running=0, waiting=0, samples=samples, elapsed=elapsed,
                            msg="the server does not answer: nothing runs there")
            if isinstance(seen, tuple):
                last = seen
                quiet = quiet + 1 if seen == (0, 0) else 0
            else:
                quiet = 0
            if once or quiet >= quiet_samples:
                running, waiting = last
                drained = quiet >= 1 and last == (0, 0)
                return dict(drained=drained, running=running, waiting=waiting, samples=samples, elapsed=elapsed,
                            msg=("drained: nothing running or waiting" if drained else
                                 "%s running, %s waiting" % (running, waiting) if running is not None else
                                 "no figures yet (%s)" % seen))
            now = self.clock()
            if now >= deadline:
                running, waiting = last
                return dict(drained=False, running=running, waiting=waiting, samples=samples,
                            elapsed=round(now - start, 3),
                            msg="not drained after %.0f s: %s running, %s waiting%s" % (
                                timeout, running, waiting, "" if isinstance(seen, tuple) else " (last: %s)" % seen))
            self.sleep(min(poll_interval, deadline - now))
