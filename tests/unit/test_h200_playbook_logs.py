"""The playbook runs on the lent H200 (tests/data/h200-playbook, README there): the real SGLang 0.5.17 server logs
replayed through the log classifier, whole and as a growing file, and what the runs' own records say (re-runs
change nothing and keep the PID, a changed input restarts once, the stop frees the GPU)."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

from ansible.module_utils.sglang_log import classify_bytes, classify_file

from log_pieces import fed_in_pieces

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data", "h200-playbook")
READY_LINE = "The server is fired up and ready to roll!"
ATTR_ERROR = "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'"

_spec = importlib.util.spec_from_file_location("playbook_figures", os.path.join(REPO, "tests", "gpu", "playbook_figures.py"))
playbook_figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(playbook_figures)


def _read(rel):
    with open(os.path.join(DATA, rel), "rb") as fh:
        return fh.read()


def _lineno_of(rel, text):
    return next(i for i, line in enumerate(_read(rel).decode().split("\n"), 1) if text in line)


# server log -> (state, crash class, text of the deciding line). r1-r5 are the attempts of the kept device calls,
# attempt1/ the call before them (its burst check failed a serving server; the log itself is a ready server).
VERDICTS = {
    # fresh: CUDA graphs on (target, verify, draft decode and draft extend captured), smoke passed; then stopped
    # by the role before the restart of the run "arg".
    "logs/sglang_r1.log": ("ready", None, READY_LINE),
    "logs/sglang_r2.log": ("ready", None, READY_LINE),
    # The incident variant with the patch removed: ready, then the first generate decodes and the scheduler dies.
    "logs/sglang_r3.log": ("crashed", "python_exception", "Scheduler hit an exception"),
    "logs/sglang_r4.log": ("ready", None, READY_LINE),
    "logs/sglang_r5.log": ("ready", None, READY_LINE),
    "attempt1/sglang_r1.log": ("ready", None, READY_LINE),
    # The same variant with the synchronous scheduler: health answered, the smoke's first request decoded and died.
    "sync/logs/sglang_r1.log": ("crashed", "first_request_crash", "Scheduler hit an exception"),
}


def _figures():
    return {row["run"]: row for row in playbook_figures.figures(DATA)}


def test_every_server_log_has_a_verdict():
    found = sorted(os.path.join(d, f) for d in ("logs", "attempt1", "sync/logs") for f in os.listdir(os.path.join(DATA, d))
                   if f.endswith(".log"))
    assert found == sorted(VERDICTS)


@pytest.mark.parametrize("rel,verdict", sorted(VERDICTS.items()))
def test_playbook_log_verdict(rel, verdict):
    state, crash_class, line = verdict
    s = classify_file(os.path.join(DATA, rel)).summary()
    assert (s["state"], s["crash_class"]) == (state, crash_class)
    assert line in s["line"]


@pytest.mark.parametrize("rel,verdict", sorted(VERDICTS.items()))
def test_playbook_log_verdict_does_not_depend_on_chunking(rel, verdict):
    clf = fed_in_pieces(_read(rel), rel, 700)
    clf.feed(b"", final=True)
    s = clf.summary()
    assert (s["state"], s["crash_class"]) == verdict[:2]


def test_cuda_graphs_were_captured_for_target_and_draft():
    text = _read("logs/sglang_r1.log").decode()
    for what in ("target verify", "draft decode", "draft extend"):
        assert "Capture %s CUDA graph end" % what in text
    assert "speculative_algorithm='EAGLE3'" in text and "speculative_eagle_topk=1" in text
    assert "disable_cuda_graph=False" in text
    assert "cuda graph: True" in text


def test_incident_log_names_the_attribute_the_patch_hint_and_the_decode_frame():
    s = classify_file(os.path.join(DATA, "logs/sglang_r3.log")).summary()
    assert s["exception"] == ATTR_ERROR
    assert "sglang_patch_enabled: true" in s["hint"]
    assert s["lineno"] > _lineno_of("logs/sglang_r3.log", READY_LINE)
    # The tolerated init failure is a warning, not the verdict.
    assert _lineno_of("logs/sglang_r3.log", "speculative policy not loaded") < s["lineno"]
    assert b"in forward_batch_generation" in _read("logs/sglang_r3.log")


def test_incident_log_up_to_the_crash_is_a_ready_server():
    data = _read("logs/sglang_r3.log")
    cut = data.index(b"Scheduler hit an exception")
    s = classify_bytes(data[:data.rindex(b"\n", 0, cut) + 1]).summary()
    assert (s["state"], s["crash_class"]) == ("ready", None)


def test_unchanged_reruns_change_nothing_and_keep_the_pid():
    f = _figures()
    for run in ("noop", "incident_noop"):
        assert f[run]["rc"] == 0 and f[run]["changed"] == 0
        assert f[run]["pid_before"] == f[run]["pid_after"] is not None
        assert f[run]["status"] == "ok" and f[run]["launch"] == 0.0


def test_changed_inputs_restart_once_after_the_gpu_is_back():
    f = _figures()
    for run in ("arg", "apikey"):
        assert f[run]["status"] == "changed" and f[run]["pid_before"] != f[run]["pid_after"]
        assert f[run]["stop_old_s"] < 10 and f[run]["gpu_release_s"] < 1
        assert f[run]["ready_to_return"] < 2
    attempts = [int(name[len("sglang_r"):-len(".log")]) for name in (f[r]["log"] for r in
                ("fresh", "arg", "incident_off", "incident_on", "apikey"))]
    assert attempts == [1, 2, 3, 4, 5]


def test_patch_off_fails_fast_and_patch_on_serves():
    f = _figures()
    assert f["incident_off"]["rc"] == 2 and f["incident_off"]["crash_class"] == "python_exception"
    assert f["incident_off"]["crash_to_failure"] < 6
    assert f["incident_on"]["rc"] == 0 and f["incident_on"]["status"] == "changed"
    console = _read("console/incident_on.console.txt").decode()
    assert "burst: 8/8 concurrent requests answered with generated tokens" in console


def test_stop_leaves_no_gpu_memory_and_no_process():
    f = _figures()
    assert f["stop"]["gpu_mib_after"] == 0
    after = _read("results/after_stop.txt").decode()
    assert "0 MiB, 143771 MiB" in after and "(none)" in after


def test_runs_record_their_own_console():
    with open(os.path.join(DATA, "runs.jsonl")) as fh:
        runs = [json.loads(line)["run"] for line in fh]
    assert sorted(runs) == sorted(f[:-len(".console.txt")] for f in os.listdir(os.path.join(DATA, "console")))


def test_with_the_synchronous_scheduler_the_smoke_reports_the_incident():
    """Health answered (the launch task returned ready), then the smoke's fixed prompt decoded and the server died:
    the role's smoke rescue fails with the class, the exception, the hint naming the patch and the traceback."""
    row = {r["run"]: r for r in playbook_figures.figures(os.path.join(DATA, "sync"))}["c_incident_off"]
    assert row["rc"] == 2 and row["status"] == "changed" and row["ready_to_return"] < 2
    assert row["crash_class"] == "first_request_crash" and row["crash_to_failure"] < 7
    console = _read("sync/console/c_incident_off.console.txt").decode()
    report = console[console.index("TASK [sglang_server : Fail with the crash the server log shows]"):]
    assert "smoke test failed at 'Generate from a fixed prompt'" in report
    assert "hint: EAGLEWorkerV2 was only half constructed" in report and "sglang_patch_enabled: true" in report
    assert ATTR_ERROR in report and "in forward_batch_generation" in report
    assert "disable_overlap_schedule=True" in _read("sync/logs/sglang_r1.log").decode()
