"""SGLang's load barrier (a multi-node server whose other rank did not finish loading) is its own crash class."""
from __future__ import annotations

from ansible.module_utils.sglang_log import HINTS, LogClassifier, classify_bytes

from log_pieces import fed_in_pieces

P = "[2026-03-18 11:22:06 TP0] "
SITE = "/opt/sglang/venv/lib/python3.12/site-packages/sglang"
BARRIER = ("ValueError: TP rank 0 could finish the model loading, but there are other ranks that didn't finish loading. "
           "It is likely due to unexpected failures (e.g., OOM) or a slow node.")
TRACEBACK = "\n".join([
    P + "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "%s/srt/managers/scheduler.py", line 3190, in run_scheduler_process' % SITE,
    "    scheduler = Scheduler(",
    '  File "%s/srt/model_executor/model_runner.py", line 849, in load_model' % SITE,
    "    raise ValueError(",
    BARRIER,
    "[2026-03-18 11:22:07] Rank 0 scheduler died during initialization (exit code: 1).",
    "",
])
LOADING = P + "Load weight begin. avail mem=78.58 GB\n" + P + "Load weight end. type=X, dtype=torch.bfloat16\n"


def summary(text):
    data = text.encode()
    whole = classify_bytes(data).summary()
    pieces = fed_in_pieces(data, len(data), 17)
    pieces.finalize()
    by_line = LogClassifier()
    for line in data.splitlines(True):
        by_line.feed(line)
    by_line.finalize()
    for other in (pieces.summary(), by_line.summary()):
        assert (other["state"], other["crash_class"], other["lineno"]) == (
            whole["state"], whole["crash_class"], whole["lineno"])
    return whole


def test_the_barrier_valueerror_in_a_scheduler_traceback_is_load_barrier_timeout():
    s = summary(LOADING + TRACEBACK)
    assert s["state"] == "crashed"
    assert s["crash_class"] == "load_barrier_timeout"
    assert s["line"].endswith("Scheduler hit an exception: Traceback (most recent call last):")
    assert s["lineno"] == 3


def test_the_barrier_line_alone_decides_too():
    s = summary(LOADING + P + BARRIER + "\n")
    assert s["crash_class"] == "load_barrier_timeout"


def test_the_launcher_line_after_it_does_not_turn_it_into_killed():
    s = summary(LOADING + TRACEBACK + "[2026-03-18 11:22:08] Received sigquit from a child process. It usually "
                                      "means the child failed.\n")
    assert s["crash_class"] == "load_barrier_timeout"


def test_its_hint_names_the_other_nodes():
    assert "other nodes" in HINTS["load_barrier_timeout"] and "\n" not in HINTS["load_barrier_timeout"]


def test_a_ready_server_that_mentions_loading_is_not_a_barrier_crash():
    s = summary(LOADING + P + "Every rank finished loading the model\n"
                + "[2026-03-18 11:22:09] The server is fired up and ready to roll!\n")
    assert s["state"] == "ready" and s["crash_class"] is None
