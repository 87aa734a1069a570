"""wait_for_model's decide(): the verdict of one look from the watchers' candidates and the time. Pure: a table."""
from __future__ import annotations

import pytest

from wait_for_model import Candidate, decide

SETTLE = 0.3
NOW = 100.0


def crash(seen_ago, quiet_for, final=False):
    return Candidate("crashed", since=NOW - seen_ago, quiet_since=NOW - quiet_for, final=final)


def c(verdict):
    return Candidate(verdict)


@pytest.mark.parametrize("candidates, watch, verdict", [
    # nothing to say: keep waiting
    ({}, False, None),
    ({}, True, None),
    # the log's crash, once its traceback is complete ...
    ({"log": crash(0.0, 0.0, final=True)}, False, "crashed"),
    # ... or the log has been quiet for the settle time since the crash ...
    ({"log": crash(0.31, 0.31)}, False, "crashed"),
    # ... or 5 settle times passed while the log kept growing
    ({"log": crash(1.51, 0.0)}, False, "crashed"),
    # still being written: nothing else is decided meanwhile
    ({"log": crash(0.1, 0.1)}, False, None),
    ({"log": crash(0.4, 0.1)}, False, None),
    ({"log": crash(0.1, 0.1), "leader": c("exited"), "health": c("ready"), "clock": c("deadline")}, False, None),
    # a crash beats every other candidate
    ({"log": crash(0.0, 0.0, final=True), "leader": c("exited"), "health": c("ready")}, False, "crashed"),
    # watching a serving server: the log also holds what clients sent, so its crash needs the process side or
    # health to agree; one that only the log shows, at the end of the window, is log_only (never acted on)
    ({"log": crash(0.0, 0.0, final=True), "clock": c("deadline"), "health": c("ready")}, True, "log_only"),
    ({"log": crash(0.0, 0.0, final=True), "health": c("ready")}, True, None),
    ({"log": crash(0.0, 0.0, final=True), "leader": c("exited"), "health": c("ready")}, True, "crashed"),
    ({"log": crash(0.0, 0.0, final=True), "children": c("child_died")}, True, "crashed"),
    ({"log": crash(0.0, 0.0, final=True), "health": c("unhealthy")}, True, "crashed"),
    ({"log": crash(0.1, 0.1), "leader": c("exited")}, True, None),  # still being written
    # the process side next: the leader before its children
    ({"leader": c("exited"), "children": c("child_died"), "health": c("ready")}, False, "exited"),
    ({"children": c("child_died"), "health": c("ready"), "clock": c("stalled")}, False, "child_died"),
    ({"leader": c("exited")}, True, "exited"),
    ({"children": c("child_died"), "clock": c("deadline"), "health": c("ready")}, True, "child_died"),
    # waiting for a start: health 200 ends it at once, before the clock
    ({"health": c("ready")}, False, "ready"),
    ({"health": c("ready"), "clock": c("deadline")}, False, "ready"),
    ({"health": c("unhealthy")}, False, None),  # failed polls while loading are normal
    ({"clock": c("stalled")}, False, "stalled"),
    ({"clock": c("deadline")}, False, "timeout"),
    ({"health": c("unhealthy"), "clock": c("deadline")}, False, "timeout"),
    # watching: health counts only at the end of the window
    ({"health": c("ready")}, True, None),
    ({"health": c("unhealthy")}, True, None),
    ({"health": c("ready"), "clock": c("deadline")}, True, "ready"),
    ({"health": c("unhealthy"), "clock": c("deadline")}, True, "unhealthy"),
    # too few failed polls in a row at the end: keep polling past the window
    ({"clock": c("deadline")}, True, None),
])
def test_decide(candidates, watch, verdict):
    assert decide(candidates, NOW, watch, SETTLE) == verdict


def test_decide_does_not_change_its_input():
    candidates = {"log": crash(0.1, 0.1), "health": c("ready")}
    before = dict(candidates)
    decide(candidates, NOW, False, SETTLE)
    assert candidates == before
