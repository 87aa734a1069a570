# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The emulated decode: a continuous batch whose steps take the time of a small model (pure code, no I/O, no clock).

A step's time grows with the requests running in it; with speculative decoding each step costs more (the draft
passes, and a verify pass over the draft tokens of every request) and gives each request the accepted draft tokens
plus one. So speculation wins at small batches and loses at large ones, as on a GPU where the verify pass turns
compute-bound: the crossover a benchmark looks for. Every figure it gives is emulated (see ``DecodeModel``).

``DecodeBatch`` is what the TP0 scheduler process runs: requests wait until the running step ends, join the next
(their first step is the prefill, which gives one token), get their tokens at the end of every step, and leave when
they have ``max_new_tokens``. Stream requests get every step's new tokens, others all of them at the end. The
acceptance figures (``avg_spec_accept_length``, SGLang's ``/server_info`` internal state) count since the last
``flush()``.
"""

from __future__ import annotations

import math


class DecodeModel:
    """Seconds per decode step and tokens per request and step.

    Without speculation a step of ``n`` running requests takes ``step_ms + per_req_ms * n`` and gives each one
    token. With it the step takes ``step_ms * (1 + spec_overhead) + per_req_ms * verify_cost * n`` and gives each
    request ``accept_length`` tokens on average (deterministically: 2, 3, 2, 3, ... for 2.5), at most
    ``max_accept`` (SGLang's ``speculative_num_draft_tokens``: the draft tokens, the bonus token included).

    ``run_jitter`` (a fraction, 0 by default) makes runs differ the way runs on a busy host do, deterministically: a
    benchmark run (the steps between two ``flush_cache``) takes every step ``1 + run_jitter`` times as long after an
    odd number of flushes and ``1 - run_jitter`` times after an even one, so two runs of a point in a row are the
    slow and the fast one. A point whose speed-up is near 1.0 is then too close to call, and one far from it is not.
    """

    def __init__(self, step_ms=1.0, per_req_ms=0.0, speculative=False, accept_length=2.47, spec_overhead=0.0,
                 verify_cost=1.0, max_accept=None, run_jitter=0.0):
        if step_ms <= 0 or per_req_ms < 0 or spec_overhead < 0 or verify_cost < 0:
            raise ValueError("the decode model needs step_ms > 0 and per_req_ms, spec_overhead, verify_cost >= 0")
        if not 0 <= run_jitter < 1:
            raise ValueError("run_jitter is a fraction in [0, 1), got %r" % (run_jitter,))
        if speculative and accept_length < 1:
            raise ValueError("accept_length is at least 1 (the bonus token), got %r" % (accept_length,))
        if speculative and max_accept is not None and accept_length > max_accept:
            raise ValueError("accept_length %r is more than the %d draft tokens a step verifies"
                             % (accept_length, max_accept))
        self.step_ms = float(step_ms)
        self.per_req_ms = float(per_req_ms)
        self.speculative = bool(speculative)
        self.accept_length = float(accept_length) if speculative else 1.0
        self.spec_overhead = float(spec_overhead)
        self.verify_cost = float(verify_cost)
        self.max_accept = max_accept
        self.run_jitter = float(run_jitter)

    def step_seconds(self, running, flushes=0):
        """How long a step of ``running`` requests takes, ``flushes`` flushes after the start (see ``run_jitter``)."""
        if self.speculative:
            ms = self.step_ms * (1.0 + self.spec_overhead) + self.per_req_ms * self.verify_cost * running
        else:
            ms = self.step_ms + self.per_req_ms * running
        if self.run_jitter:
            ms *= (1.0 + self.run_jitter) if flushes % 2 else (1.0 - self.run_jitter)
        return ms / 1000.0

    def tokens(self, verify_index):
        """Tokens a request gets at its ``verify_index``-th verify step (1, 2, ...): the running mean is the accept
        length (floor of the cumulative sum), never more than ``max_accept``."""
        if not self.speculative:
            return 1
        a = self.accept_length
        got = math.floor(verify_index * a + 1e-9) - math.floor((verify_index - 1) * a + 1e-9)
        return max(1, min(got, self.max_accept or got))

    def describe(self):
        """The model's settings, for the emulator's own log line."""
        jitter = (", runs alternately %.0f %% slower and faster" % (100 * self.run_jitter)) if self.run_jitter else ""
        if self.speculative:
            return ("step %.2f ms x %.2f + %.2f ms x %.2f per running request, accept length %.2f%s"
                    % (self.step_ms, 1.0 + self.spec_overhead, self.per_req_ms, self.verify_cost, self.accept_length,
                       jitter))
        return "step %.2f ms + %.2f ms per running request%s" % (self.step_ms, self.per_req_ms, jitter)


class Request:
    """One generation in the batch."""

    __slots__ = ("rid", "ids", "prompt_tokens", "stream", "emitted", "sent", "verify_ct")

    def __init__(self, rid, ids, prompt_tokens, stream):
        self.rid = rid
        self.ids = list(ids)            # every token it will produce (max_new_tokens of them)
        self.prompt_tokens = prompt_tokens
        self.stream = bool(stream)
        self.emitted = 0                # tokens produced so far
        self.sent = 0                   # tokens handed out so far (a stream gets them per step)
        self.verify_ct = 0              # verify steps (speculative decoding only)


class DecodeBatch:
    """The continuous batch (see the module's docstring)."""

    def __init__(self, model):
        self.model = model
        self.waiting = []
        self.running = []
        self.steps = 0
        self.accept_tokens = 0          # tokens of verify steps since the last flush
        self.forward_ct = 0             # requests in verify steps since the last flush (SGLang: per request)
        self.last_step_tokens = 0
        self.last_step_seconds = 0.0
        self.flushes = 0                # flush_cache calls so far (the decode model's run_jitter)

    def add(self, request):
        self.waiting.append(request)

    def abort(self, rid):
        """Drop a request (its client went away)."""
        self.waiting = [r for r in self.waiting if r.rid != rid]
        self.running = [r for r in self.running if r.rid != rid]

    def idle(self):
        return not self.waiting and not self.running

    def begin_step(self):
        """Start a step: the waiting requests join. Returns (seconds the step takes, the requests that joined)."""
        joined, self.waiting = self.waiting, []
        self.running.extend(joined)
        seconds = self.model.step_seconds(len(self.running), self.flushes)
        self.last_step_seconds = seconds
        return seconds, joined

    def end_step(self):
        """End the running step: every request gets its tokens. Returns (outputs, the batch size of the step);
        an output is a dict with ``rid``, ``output_ids`` (new for a stream, all of them at the end otherwise),
        ``completion_tokens``, ``prompt_tokens``, ``verify_ct`` and ``finished``."""
        outputs = []
        size = len(self.running)
        left = []
        produced = 0
        for req in self.running:
            # its first step is the prefill (one token); under speculation every later one is a verify step
            verify = self.model.speculative and req.emitted > 0
            if verify:
                req.verify_ct += 1
            got = min(self.model.tokens(req.verify_ct) if verify else 1, len(req.ids) - req.emitted)
            if verify and got:
                self.accept_tokens += got
                self.forward_ct += 1
            req.emitted += got
            produced += got
            finished = req.emitted >= len(req.ids)
            if req.stream or finished:
                outputs.append({"rid": req.rid, "output_ids": req.ids[req.sent:req.emitted],
                                "completion_tokens": req.emitted, "prompt_tokens": req.prompt_tokens,
                                "verify_ct": req.verify_ct, "finished": finished})
                req.sent = req.emitted
            if not finished:
                left.append(req)
        self.running = left
        self.steps += 1
        self.last_step_tokens = produced
        return outputs, size

    def avg_accept_length(self):
        """SGLang's ``avg_spec_accept_length``: tokens per request and verify step since the last flush; None
        without speculation or before the first verify step."""
        if not self.model.speculative or self.forward_ct == 0:
            return None
        return self.accept_tokens / self.forward_ct

    def flush(self):
        """SGLang's flush_cache resets the acceptance figures (scheduler metrics)."""
        self.accept_tokens = 0
        self.forward_ct = 0
        self.flushes += 1
