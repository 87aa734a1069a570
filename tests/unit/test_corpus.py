"""Every real, labelled SGLang log in tests/data/sglang-logs gets the right verdict from the log alone."""
from __future__ import annotations

import csv
import os

import pytest

from ansible.module_utils.sglang_log import LogClassifier, classify_file

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "sglang-logs")


def _rows():
    with open(os.path.join(DATA, "MANIFEST.tsv"), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


ROWS = _rows()


def _expected_log_state(row):
    # A server started with --log-level warning never prints its ready line: from the log alone it is
    # indistinguishable from one still loading (the corpus README says so). Readiness comes from HTTP.
    if row["label"] == "ready" and row["deciding_line"] == "-":
        return "loading"
    return row["label"]


def test_manifest_has_all_files():
    files = sorted(f for f in os.listdir(DATA) if f.endswith(".log"))
    assert sorted(r["file"] for r in ROWS) == files
    assert len(files) == 46


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_corpus_verdict(row):
    clf = classify_file(os.path.join(DATA, row["file"]))
    s = clf.summary()
    assert s["state"] == _expected_log_state(row)
    if row["label"] == "crashed":
        assert s["crash_class"] == row["crash_class"]
        assert s["line"] == row["deciding_line"]
        with open(os.path.join(DATA, row["file"]), "rb") as fh:
            lines = fh.read().replace(b"\x00", b"").decode("utf-8", "replace").split("\n")
        assert row["deciding_line"] in lines[s["lineno"] - 1]
    else:
        assert s["crash_class"] is None
        if s["state"] == "ready":
            assert s["line"] == row["deciding_line"]


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_corpus_verdict_does_not_depend_on_chunking(row):
    """The same verdict when the log arrives in small random-sized pieces (a live, growing file)."""
    with open(os.path.join(DATA, row["file"]), "rb") as fh:
        data = fh.read()
    whole = classify_file(os.path.join(DATA, row["file"])).summary()
    clf = LogClassifier()
    pos, step = 0, 1
    while pos < len(data):
        clf.feed(data[pos:pos + step])
        pos += step
        step = (step * 7 + 3) % 97 + 1
    clf.finalize()
    got = clf.summary()
    for key in ("state", "crash_class", "line", "lineno", "phase"):
        assert got[key] == whole[key], key
