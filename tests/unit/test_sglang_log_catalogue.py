"""The crash catalogue (sglang_log.CATALOGUE, docs/crash-catalogue.md): crashes of SGLang's speculative decoding with a
known fix name their cause (``crash["cause"]``, the result's ``crash_cause``) and a hint that says the flag and this
project's variable. Every entry is tested on the real log lines of its SGLang thread (tests/data/sglang-logs-spec, and
the labelled corpus's 022); a client's prompt that quotes a signature decides nothing and names nothing."""
from __future__ import annotations

import csv
import os

import pytest

from ansible.module_utils import sglang_log, sglang_result_schema, sglang_result_text, sglang_verdict
from ansible.module_utils.sglang_log import CATALOGUE, LogClassifier, classify_file, crash_cause

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "..", "data", "sglang-logs-spec")
CORPUS = os.path.join(HERE, "..", "data", "sglang-logs")
GATHER_022 = os.path.join(CORPUS, "022-crash-eagle-v2-device-assert-during-decode.log")


def manifest():
    with open(os.path.join(SPEC, "MANIFEST.tsv"), newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


ROWS = manifest()


def lines_of(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read().splitlines()


def test_the_manifest_names_every_file_and_its_source():
    files = sorted(f for f in os.listdir(SPEC) if f.endswith(".log"))
    assert sorted(r["file"] for r in ROWS) == files
    for row in ROWS:
        assert "github.com/sgl-project/sglang/" in row["source"], row
        assert row["sglang_version"].strip(), row
        assert row["cause"] in sglang_log.CAUSES + ("-",), row


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_the_real_lines_name_their_cause(row):
    found = crash_cause(lines_of(os.path.join(SPEC, row["file"])))
    assert (found[0] if found else "-") == row["cause"]


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_the_log_alone_decides_what_the_manifest_says(row):
    s = classify_file(os.path.join(SPEC, row["file"])).summary()
    if row["verdict"] == "-":
        assert s["state"] != "crashed" and s["cause"] is None, s
        return
    assert (s["state"], s["crash_class"]) == ("crashed", row["verdict"]), s
    cause = None if row["cause"] == "-" else row["cause"]
    assert s["cause"] == cause, s
    if cause:
        assert s["hint"] == dict((c, h) for c, _rx, h in CATALOGUE)[cause]
    else:
        assert s["hint"] == sglang_log.HINTS[row["verdict"]]


def test_every_catalogue_entry_has_real_lines():
    tested = set(r["cause"] for r in ROWS) | {crash_cause(lines_of(GATHER_022))[0]}
    assert tested >= set(sglang_log.CAUSES)


def test_the_corpus_eagle_v2_crash_keeps_its_class_and_names_its_cause():
    """#15638 (v0.5.6.post2, EAGLE3 with SGLANG_ENABLE_SPEC_V2=1): the device assert decides cuda_error, as before; the
    catalogue names the known cause and its hint replaces the generic 'rerun with CUDA_LAUNCH_BLOCKING=1'."""
    s = classify_file(GATHER_022).summary()
    assert (s["state"], s["crash_class"], s["cause"]) == ("crashed", "cuda_error", "spec_draft_extend_gather_oob")
    assert "--disable-overlap-schedule" in s["hint"] and "#15638" in s["hint"]


def test_the_other_spec_crashes_of_the_corpus_keep_the_generic_hint():
    """019, 021, 023, 030, 032, 033 and 053 are spec-decoding crashes with no known fix in their threads (or whose cause
    is cut from the excerpt): no catalogue entry names them."""
    for name in ("019", "021", "023", "030", "032", "033", "053"):
        path = [os.path.join(CORPUS, f) for f in os.listdir(CORPUS) if f.startswith(name + "-")][0]
        s = classify_file(path).summary()
        assert s["state"] == "crashed" and s["cause"] is None, (name, s)
        assert s["hint"] == sglang_log._crash_hint(s["crash_class"], s["exception"]), (name, s)


@pytest.mark.parametrize("cause,rx,hint", CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_a_hint_says_the_flag_and_the_project_variable(cause, rx, hint):
    assert "sglang_server_extra_args: {" in hint and " --" in hint and "#" in hint, (cause, hint)


# One real line of each entry, as a client could quote it.
SIGNATURES = {
    "spec_draft_extend_metadata_none": "AssertionError: All of them must not be None",
    "spec_draft_extend_gather_oob": lines_of(os.path.join(SPEC, "s04-gather-oob-spec-v2-gb200.log"))[0],
    "spec_draft_mla_backend": "ValueError: trtllm_mla backend can only be used with MLA models.",
}
REAL_CRASH = (b"[2026-12-03 09:24:19 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
              b'  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2432, in run_scheduler_process\n'
              b"    scheduler.event_loop_overlap()\n"
              b"RuntimeError: boom\n")


def client_lines(sig):
    quoted = sig.replace("\\", "\\\\").replace("'", "\\'")
    return [
        "[2026-12-03 09:24:18] Receive: obj=GenerateReqInput(rid='1', text='%s', input_ids=None, sampling_params={})"
        % quoted,
        '[2026-12-03 09:24:18] Receive OpenAI: obj={"messages": [{"role": "user", "content": "%s"}]}'
        % sig.replace('"', '\\"'),
        '[2026-12-03 09:24:18] INFO:     127.0.0.1:50420 - "GET /?q=%s HTTP/1.1" 404 Not Found'
        % sig.replace(" ", "_").replace('"', "%22"),
        "[2026-12-03 09:24:18] [http_server] Error: %s" % sig,
    ]


@pytest.mark.parametrize("cause", sorted(SIGNATURES))
def test_a_client_prompt_with_a_signature_decides_nothing(cause):
    for line in client_lines(SIGNATURES[cause]):
        clf = LogClassifier(clock=lambda: 0.0)
        clf.feed((line + "\n").encode())
        clf.finalize()
        assert clf.crash is None and clf.state != "crashed", line


@pytest.mark.parametrize("cause", sorted(SIGNATURES))
def test_a_client_prompt_never_names_the_cause_of_a_real_crash(cause):
    for line in client_lines(SIGNATURES[cause]):
        clf = LogClassifier(clock=lambda: 0.0)
        clf.feed((line + "\n").encode() + REAL_CRASH)
        clf.finalize()
        assert clf.crash is not None and clf.crash["class"] == "python_exception", line
        assert clf.crash["cause"] is None and clf.crash["hint"] == sglang_log.HINTS["python_exception"], line


def test_the_cause_reaches_the_result_and_its_message():
    clf = classify_file(GATHER_022)
    fields, _ = sglang_verdict.explain("crashed", clf, {"pid": 1, "log_path": "/x.log"}, 1.0, None, None, False)
    assert fields["crash_class"] == "cuda_error" and fields["crash_cause"] == "spec_draft_extend_gather_oob"
    assert fields["hint"] == clf.crash["hint"]
    assert sglang_result_schema.problems(fields, failed=True) == []
    text = sglang_result_text.failure_message(fields)
    assert "crash class: cuda_error" in text and "known cause: spec_draft_extend_gather_oob" in text
    assert "sglang_server_extra_args: {disable-overlap-schedule: true}" in text


def test_a_crash_with_no_catalogued_cause_has_no_crash_cause():
    clf = LogClassifier(clock=lambda: 0.0)
    clf.feed(REAL_CRASH)
    clf.finalize()
    fields, _ = sglang_verdict.explain("crashed", clf, {"pid": 1, "log_path": "/x.log"}, 1.0, None, None, False)
    assert fields["crash_class"] == "python_exception" and "crash_cause" not in fields
