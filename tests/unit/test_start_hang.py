"""The start's hang rule (sglang_verdict.HealthWatch, not patient) on a fake clock: with a crash line standing, our own
health request unanswered HANG_BOUND s after the line is evidence, also when the probe gate keeps the next request
back because the server may still hold the last one."""
from __future__ import annotations

from types import SimpleNamespace

from ansible.module_utils.sglang_probe import GATED
from ansible.module_utils.sglang_verdict import HANG_BOUND, HealthWatch, InlineAsk


class Clock(object):
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def start_health(answers, clock):
    """A start's HealthWatch whose requests answer from ``answers``: (seconds the request takes, its answer)."""
    answers = list(answers)

    def ask(timeout):
        took, code = answers.pop(0) if answers else (0.0, GATED)
        clock.now += min(took, timeout)
        return code
    clf = SimpleNamespace(crash=None, crash_after_raw_echo=lambda *a: None)
    log = SimpleNamespace(woke=False, t0=0.0, clf=clf)
    return HealthWatch(InlineAsk(ask), clock, log, 0.0, 600.0, 0.25, 2.0, 3, patient=False), clf


def verdicts(hw, clock, until, step=0.1):
    out = []
    while clock.now < until:
        cand = hw.poll(clock.now)
        out.append((round(clock.now, 2), cand.verdict if cand else None))
        clock.now += step
    return out


def test_a_held_request_then_kept_back_by_the_probe_gate_proves_the_hang_at_the_bound():
    # Sent at 0 (before the line), held until its timeout at 2.0; the crash line was read at 1.0; the gate keeps every
    # later request back (the server may still hold ours): hung once HANG_BOUND has passed since the line.
    clock = Clock()
    hw, clf = start_health([(2.0, None)], clock)
    clf.crash = {"at": 1.0}
    seen = verdicts(hw, clock, 4.0)
    hung = [t for t, v in seen if v == "hung"]
    assert hung and 1.0 + HANG_BOUND <= hung[0] <= 1.0 + HANG_BOUND + 0.6, seen
    assert hw.kept_back > 0


def test_a_request_refused_at_once_then_kept_back_is_no_hang():
    clock = Clock()
    hw, clf = start_health([(0.01, None)], clock)
    clf.crash = {"at": 0.0}
    assert "hung" not in [v for _, v in verdicts(hw, clock, 4.0)]


def test_an_answer_after_the_held_request_ends_the_hang():
    # held until 2.0, then the server answered 503 (alive, not holding requests): no hang, whatever the gate does later
    clock = Clock()
    hw, clf = start_health([(2.0, None), (0.01, 503)], clock)
    clf.crash = {"at": 1.0}
    assert "hung" not in [v for _, v in verdicts(hw, clock, 4.0)]
