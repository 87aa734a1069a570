"""wait_for_model's decide(): the verdict of one look from the watchers' candidates and the time. Pure: a table.

Text never acts alone: a crash the log shows is an explanation; what acts is the process side (the leader
exited, a worker died), health failing in a row on a watched (serving) server, or the clock on a start.
"""
from __future__ import annotations

import pytest

from ansible.module_utils.sglang_verdict import Candidate, decide

SETTLE = 0.3
NOW = 100.0


def crash(seen_ago, final=True):
    return Candidate("crashed", since=NOW - seen_ago, quiet_since=NOW - seen_ago, final=final)


def ok(sent_ago):
    """Health answered 200 to a request sent ``sent_ago`` seconds ago."""
    return Candidate("ready", since=NOW - sent_ago)


def c(verdict):
    return Candidate(verdict)


@pytest.mark.parametrize("candidates, watch, verdict", [
    # nothing to say: keep waiting
    ({}, False, None),
    ({}, True, None),
    # a crash in the log alone decides nothing, settled or not, started or watched
    ({"log": crash(0.0)}, False, None),
    ({"log": crash(60.0)}, False, None),
    ({"log": crash(0.1, final=False)}, False, None),
    ({"log": crash(0.0)}, True, None),
    # not even at the end of a watch window: the watch goes on until health answers for it
    ({"log": crash(5.0), "clock": c("deadline")}, True, None),
    # a 200 to a request sent BEFORE the crash line was read proves nothing about after it
    ({"log": crash(1.0), "health": ok(2.0)}, False, None),
    ({"log": crash(1.0), "health": ok(2.0), "clock": c("deadline")}, True, None),
    # a 200 to a request sent after it: alive and answering, the line acts on nothing
    ({"log": crash(1.0), "health": ok(0.5)}, False, "ready"),
    ({"log": crash(1.0), "health": ok(0.5), "clock": c("deadline")}, True, "ready"),
    # ... and a watch still runs its whole window (a process may yet die)
    ({"log": crash(1.0), "health": ok(1.0)}, True, None),
    # the process side corroborates: the log's crash names the cause, settled or not (the drain gives it time)
    ({"log": crash(0.0), "leader": c("exited")}, False, "crashed"),
    ({"log": crash(0.0, final=False), "children": c("child_died")}, False, "crashed"),
    ({"log": crash(0.0), "leader": c("exited"), "health": ok(0.0)}, True, "crashed"),
    ({"log": crash(0.0), "children": c("child_died"), "clock": c("deadline")}, True, "crashed"),
    # health failing in a row corroborates a watched server's crash (a crash whose processes hang)
    ({"log": crash(3.0), "health": c("unhealthy")}, True, "crashed"),
    ({"log": crash(3.0), "health": c("unhealthy"), "clock": c("deadline")}, True, "crashed"),
    # ... but not a start's: failed polls while loading are normal; the start's clock still runs
    ({"log": crash(3.0), "health": c("unhealthy")}, False, None),
    ({"log": crash(3.0), "clock": c("stalled")}, False, "stalled"),
    ({"log": crash(3.0), "clock": c("deadline")}, False, "timeout"),
    # a start whose own health request the crashed server holds (HealthWatch: unanswered HANG_BOUND s after the
    # line): evidence no client writes, named by the log's class
    ({"log": crash(3.0), "health": Candidate("hung", since=NOW - 3.0)}, False, "crashed"),
    ({"log": crash(3.0), "health": Candidate("hung", since=NOW - 3.0), "clock": c("deadline")}, False, "crashed"),
    # ... a start's only: a serving server is judged by unhealthy_after in a row
    ({"log": crash(3.0), "health": Candidate("hung", since=NOW - 3.0)}, True, None),
    # the process side without a crash in the log: the leader before its children
    ({"leader": c("exited"), "children": c("child_died"), "health": ok(0.0)}, False, "exited"),
    ({"children": c("child_died"), "health": ok(0.0), "clock": c("stalled")}, False, "child_died"),
    ({"leader": c("exited")}, True, "exited"),
    ({"children": c("child_died"), "clock": c("deadline"), "health": ok(0.0)}, True, "child_died"),
    # waiting for a start: health 200 ends it at once, before the clock
    ({"health": ok(0.0)}, False, "ready"),
    ({"health": ok(0.0), "clock": c("deadline")}, False, "ready"),
    ({"health": c("unhealthy")}, False, None),  # failed polls while loading are normal
    ({"clock": c("stalled")}, False, "stalled"),
    ({"clock": c("deadline")}, False, "timeout"),
    ({"health": c("unhealthy"), "clock": c("deadline")}, False, "timeout"),
    # watching: a 200 counts at the end of the window, failing in a row at once
    ({"health": ok(0.0)}, True, None),
    ({"health": c("unhealthy")}, True, "unhealthy"),
    ({"health": ok(0.0), "clock": c("deadline")}, True, "ready"),
    ({"health": c("unhealthy"), "clock": c("deadline")}, True, "unhealthy"),
    # too few failed polls in a row at the end: keep polling past the window
    ({"clock": c("deadline")}, True, None),
])
def test_decide(candidates, watch, verdict):
    assert decide(candidates, NOW, watch, SETTLE) == verdict
