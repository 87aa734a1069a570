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
    """(running, waiting) summed over every rank of a ``/v1/loads`` answer, None when it lists no rank yet (SGLang
    answers ``[]`` until its scheduler has published a load); ValueError when it is not such an answer."""
    if not isinstance(body, dict) or not isinstance(body.get("loads"), list):
        raise ValueError("not a /v1/loads answer: %s" % (str(body)[:200],))
    if not body["loads"]:
        return None
    running = waiting = 0
    for load in body["loads"]:
        counts = []
        for key in ("num_running_reqs", "num_waiting_reqs"):
            value = load.get(key) if isinstance(load, dict) else None
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError("not a /v1/loads answer (%s must be a count): %s" % (key, str(body)[:200]))
            counts.append(value)
        running += counts[0]
        waiting += counts[1]
    return running, waiting


class DrainWait(object):
    """Look at ``GET <path>`` until the server runs and waits nothing. ``http`` is a JsonHttp to the server."""

    def __init__(self, http, path="/v1/loads", clock=time.monotonic, sleep=time.sleep):
        self.http = http
        self.path = path
        self.clock = clock
        self.sleep = sleep

    def look(self):
        """(running, waiting); None when the connection was refused (nothing listens: nothing runs there); else a
        string that says why there are no figures (no answer, a status, no rank published yet)."""
        try:
            answer = self.http.call("GET", self.path)
        except Unreachable as exc:
            return None if exc.refused else "no answer: %s" % exc
        if answer.status == 404:
            raise DrainError("GET %s answered 404: this server has no load endpoint (SGLang before 0.5.9?); a drain "
                             "timeout of 0 skips the watch" % self.http.url(self.path))
        if answer.status in (401, 403):
            raise DrainError("GET %s answered %d: give the server's API key (api_key)"
                             % (self.http.url(self.path), answer.status))
        if answer.status != 200:
            return "status %d" % answer.status
        try:
            counts = load_counts(answer.body)
        except ValueError as exc:
            raise DrainError("GET %s: %s" % (self.http.url(self.path), exc))
        return "no rank has published its load yet" if counts is None else counts

    def wait(self, timeout, poll_interval=1.0, quiet_samples=2, once=False):
        """Look until ``quiet_samples`` looks in a row find nothing running or waiting, or ``timeout`` passes.

        Returns drained, running, waiting (the last figures), max_running (the most seen running: what the wait
        waited for), samples, elapsed, answered (false when the last look got no answer at all), msg. ``once``: one
        look, no wait (check mode)."""
        start = self.clock()
        deadline = start + timeout
        quiet = samples = most = 0
        last = (None, None)
        while True:
            seen = self.look()
            samples += 1
            if isinstance(seen, tuple):
                last = seen
                most = max(most, seen[0])
            quiet = quiet + 1 if seen == (0, 0) else 0
            now = self.clock()
            out = dict(drained=False, running=last[0], waiting=last[1], max_running=most, samples=samples,
                       elapsed=round(now - start, 3), answered=not (isinstance(seen, str) and seen.startswith("no answer")))
            if seen is None:
                out.update(drained=True, running=0, waiting=0, msg="the server does not answer (connection refused): nothing runs there")
                return out
            if once or quiet >= quiet_samples:
                out["drained"] = quiet >= 1
                out["msg"] = ("drained: nothing running or waiting" if out["drained"] else
                              "%s running, %s waiting" % last if last[0] is not None else "no figures yet (%s)" % seen)
                return out
            if now >= deadline:
                out["msg"] = "not drained after %.0f s: %s running, %s waiting%s" % (
                    timeout, last[0], last[1], "" if isinstance(seen, tuple) else " (last: %s)" % seen)
                return out
            self.sleep(min(poll_interval, deadline - now))
