"""A crash class taken from text a client can write (a crash line at or after a raw request echo) is shown flagged
wherever it is shown: the healthy-server warning (a crash the server outlived), the failure's message, the
supervisor's status line (systemd's STATUS=), what a watch reads and says. Without an echo, nothing is flagged."""
from __future__ import annotations

from ansible.module_utils import sglang_progress, sglang_verdict, sglang_serving_watch, sglang_supervisor
from ansible.module_utils.sglang_log import LogClassifier

READY = b"[2026-12-03 09:24:00] The server is fired up and ready to roll!\n"
ECHO = b"[2026-12-03 09:24:18] Receive: obj=GenerateReqInput(rid='1', text='hi', input_ids=None, sampling_params={})\n"
FAKE_OOM = (b"[2026-12-03 09:24:19 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            b'  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
            b"    scheduler.event_loop_overlap()\n"
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.72 GiB.\n"
            b"[2026-12-03 09:24:20] INFO:     127.0.0.1:5000 - \"GET /health HTTP/1.1\" 200 OK\n")
STATE = {"pid": 1, "log_path": "/x.log"}


def outlived(echo):
    """A classifier whose crash line the server outlived (set aside), with or without a raw echo before it."""
    clf = LogClassifier(clock=lambda: 0.0)
    clf.feed(READY + (ECHO if echo else b"") + FAKE_OOM)
    clf.finalize()
    assert clf.crash is not None and clf.crash["class"] == "cuda_oom"
    return clf


def test_the_healthy_server_warning_flags_a_class_taken_after_a_raw_echo():
    clf = outlived(echo=True)
    clf.dismiss_crash()
    fields, note = sglang_verdict.explain("ready", clf, STATE, 1.0, None, None, True)
    assert fields["log_crash"]["class_uncertain"] is True
    assert note.startswith("the log shows cuda_oom (class uncertain: its line follows a raw request echo"), note
    assert "cuda_oom (class uncertain" in fields["msg"]
    # what the module warns with, from the supervisor's report (Verdicts.service_ready)
    assert "cuda_oom (class uncertain" in sglang_progress.set_aside_words(fields["log_crash"])


def test_the_healthy_server_warning_of_a_crash_without_an_echo_is_not_flagged():
    clf = outlived(echo=False)
    clf.dismiss_crash()
    fields, note = sglang_verdict.explain("ready", clf, STATE, 1.0, None, None, True)
    assert "class_uncertain" not in fields["log_crash"] and "uncertain" not in note


def test_a_failure_whose_class_comes_after_a_raw_echo_is_flagged_in_its_lead_and_status_line():
    clf = outlived(echo=True)
    fields, _ = sglang_verdict.explain("exited", clf, STATE, 1.0, 1, None, False, candidates={"leader": object()})
    assert fields["class_uncertain"] is True
    assert fields["msg"].startswith("server crashed: cuda_oom (class uncertain"), fields["msg"]
    shown = sglang_progress.class_words({"class": fields["crash_class"], "class_uncertain": fields["class_uncertain"]})
    assert sglang_progress.status_text(None, None, shown).startswith("failed: cuda_oom (class uncertain")


def test_what_a_watch_reads_of_a_set_aside_crash_carries_the_flag_and_its_warning_shows_it():
    clf = outlived(echo=True)
    view = sglang_supervisor.ServingView(None, {}, 10.0)
    entry = view.entry(clf.crash, sglang_supervisor.OUTLIVED, clf)
    assert entry["class_uncertain"] is True
    assert "cuda_oom (class uncertain" in sglang_progress.set_aside_words(entry)
    plain = view.entry(outlived(echo=False).crash, sglang_supervisor.OUTLIVED, outlived(echo=False))
    assert "class_uncertain" not in plain and "uncertain" not in sglang_progress.set_aside_words(plain)


def test_a_watch_that_fails_on_an_uncertain_pending_crash_says_so():
    watched = sglang_serving_watch.Watched.__new__(sglang_serving_watch.Watched)
    captured = {}
    watched.health = type("H", (), {"fails": 3, "last": None})()
    watched.state = {"log_path": "/x.log"}
    watched.unit = None
    watched.fields = lambda r, elapsed: captured.update(r) or r
    pending = {"class": "cuda_oom", "class_uncertain": True, "line": "x", "lineno": 3, "hint": "h"}
    r = watched.unhealthy({"crash_pending": pending, "serve_health_interval": 10, "unhealthy_after": 3}, 1.0)
    assert r["class_uncertain"] is True and "server unhealthy: cuda_oom (class uncertain" in r["msg"], r["msg"]
