"""The playbook's part b on the lent H200 with the one supervisor (tests/data/h200-supervisor, README there): the real
SGLang 0.5.17 server logs replayed through the log classifier, and the figures read back from the runs' own files
(console and log stamps) through tests/gpu/playbook_figures.py: the incident fails within the issue's target, with
the hang evidence, the class and the patch hint; the re-run changes nothing; the stop frees the GPU."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

from ansible.module_utils.sglang_log import classify_file

from log_pieces import fed_in_pieces

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data", "h200-supervisor")
READY_LINE = "The server is fired up and ready to roll!"
ATTR_ERROR = "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'"
TARGET_S = 12.0  # the target for crash line -> task failure (767b5ce took 21.8 s)

_spec = importlib.util.spec_from_file_location("playbook_figures", os.path.join(REPO, "tests", "gpu", "playbook_figures.py"))
playbook_figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(playbook_figures)

VERDICTS = {
    "logs/sglang_r1.log": ("ready", None),  # bringup
    "logs/sglang_r2.log": ("crashed", "python_exception"),  # incident_off
    "logs/sglang_r3.log": ("ready", None),  # incident_on
    "logs/sglang_r4.log": ("ready", None),  # apikey
}


def _read(rel):
    with open(os.path.join(DATA, rel), "rb") as fh:
        return fh.read()


def _figures():
    return {row["run"]: row for row in playbook_figures.figures(DATA)}


def test_every_server_log_has_a_verdict():
    assert sorted("logs/" + f for f in os.listdir(os.path.join(DATA, "logs"))) == sorted(VERDICTS)


@pytest.mark.parametrize("rel,verdict", sorted(VERDICTS.items()))
def test_log_verdict_whole_and_in_pieces(rel, verdict):
    s = classify_file(os.path.join(DATA, rel)).summary()
    assert (s["state"], s["crash_class"]) == verdict
    clf = fed_in_pieces(_read(rel), rel, 700)
    clf.feed(b"", final=True)
    assert (clf.summary()["state"], clf.summary()["crash_class"]) == verdict


def test_kept_figures_are_what_the_files_give():
    with open(os.path.join(DATA, "figures.jsonl")) as fh:
        kept = [json.loads(line) for line in fh if line.strip()]
    assert kept == playbook_figures.figures(DATA)


def test_incident_fails_within_the_target_with_the_hang_evidence():
    row = _figures()["incident_off"]
    assert row["rc"] == 2 and row["status"] == "fatal" and row["crash_class"] == "python_exception"
    assert 0 < row["crash_to_failure"] <= TARGET_S
    console = _read("console/incident_off.console.txt").decode()
    assert "our health request got no answer for 3 s after the crash line was read" in console
    assert "sglang_patch_enabled: true" in console and ATTR_ERROR.replace("'", "''") in console
    assert "how: the supervisor ends the failed tree" in console
    s = classify_file(os.path.join(DATA, "logs/sglang_r2.log")).summary()
    assert s["exception"] == ATTR_ERROR and "sglang_patch_enabled: true" in s["hint"]
    assert row["gpu_mib_after"] == 0


def test_patch_on_serves_and_the_rerun_changes_nothing():
    f = _figures()
    assert f["incident_on"]["rc"] == 0 and f["incident_on"]["status"] == "changed"
    assert "burst: 8/8 concurrent requests answered with generated tokens" in _read("console/incident_on.console.txt").decode()
    noop = f["incident_noop"]
    assert noop["rc"] == 0 and noop["changed"] == 0 and noop["pid_before"] == noop["pid_after"] is not None


def test_the_key_is_in_no_log_and_the_stop_frees_the_gpu():
    grep = _read("results/apikey_grep.txt").decode()
    assert grep.count("(no file)") == 1 and grep.count("(none)") == 1
    assert b"sk-h200-test-7d41c2e9b5" not in b"".join(_read("logs/" + f) for f in os.listdir(os.path.join(DATA, "logs")))
    f = _figures()
    assert f["apikey"]["rc"] == 0 and f["apikey"]["gpu_release_s"] < 1
    assert f["stop"]["rc"] == 0 and f["stop"]["gpu_mib_after"] == 0
    after = _read("results/after_stop.txt").decode()
    assert "0 MiB, 143771 MiB" in after and "(none)" in after
