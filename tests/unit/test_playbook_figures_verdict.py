"""tests/gpu/playbook_figures.py's verdict figures, from the supervisor's status file that play_lib.sh keeps after
each run: the H200 part b evidence (tests/data/h200-supervisor, kept before the status files were) with status files
added in a copy."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data", "h200-supervisor")

_spec = importlib.util.spec_from_file_location("playbook_figures_v", os.path.join(REPO, "tests", "gpu",
                                                                                  "playbook_figures.py"))
playbook_figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(playbook_figures)

CRASH_STAMP = 1796409735.757  # sglang_r2.log's "Scheduler hit an exception" in log_stamps.tsv
LAUNCH_FATAL = 1796409740.821  # the launch task's "fatal: [localhost]" in console/incident_off.console.txt


def _copy_with(tmp_path, statuses):
    root = str(tmp_path / "ev")
    shutil.copytree(DATA, root)
    for run, st in statuses.items():
        with open(os.path.join(root, "results", run + ".status.json"), "w") as fh:
            json.dump(st, fh)
    return {row["run"]: row for row in playbook_figures.figures(root)}


def test_a_failed_start_reports_crash_to_verdict_and_verdict_to_result(tmp_path):
    rows = _copy_with(tmp_path, {"incident_off": {"verdict": "python_exception", "attempt": 2,
                                                  "updated": CRASH_STAMP + 1.6}})
    row = rows["incident_off"]
    assert row["verdict"] == "python_exception" and row["crash_to_failure"] == 5.147
    assert row["crash_to_verdict"] == 1.6
    assert row["verdict_to_result"] == round(LAUNCH_FATAL - CRASH_STAMP - 1.6, 3)


def test_a_status_of_another_attempt_gives_no_verdict_figure(tmp_path):
    rows = _copy_with(tmp_path, {"incident_off": {"verdict": "python_exception", "attempt": 1,
                                                  "updated": CRASH_STAMP + 1.6}})
    assert "verdict_to_result" not in rows["incident_off"] and "crash_to_verdict" not in rows["incident_off"]


def test_without_status_files_the_figures_are_those_kept(tmp_path):
    rows = _copy_with(tmp_path, {})
    with open(os.path.join(DATA, "figures.jsonl")) as fh:
        kept = {row["run"]: row for row in map(json.loads, fh)}
    assert rows == kept
