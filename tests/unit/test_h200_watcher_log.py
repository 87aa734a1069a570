"""The attempt log the host watcher program wrote around real SGLang 0.5.17 on an H200 (tests/data/h200-watcher),
read again by the classifier in random pieces: the phases its STATUS= messages named, in order, and the class of the
scheduler's kill -9."""
from __future__ import annotations

import json
import os

from ansible.module_utils import sglang_progress
from log_pieces import fed_in_pieces

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "h200-watcher")


def test_the_phases_and_the_class_of_the_real_run():
    with open(os.path.join(DATA, "sglang_r2.log"), "rb") as fh:
        data = fh.read()
    for seed in range(5):
        clf = fed_in_pieces(data, seed, 4096)
        clf.finalize()
        assert [p["phase"] for p in clf.phases] == ["launching", "loading_weights", "kv_cache", "cuda_graph",
                                                    "warmup", "ready"]
        assert clf.crash is not None and clf.crash["class"] == "child_sigquit"
    notes = open(os.path.join(DATA, "notify.tsv")).read()
    for phase in ("loading_weights", "kv_cache", "cuda_graph", "warmup"):
        assert "STATUS=%s" % sglang_progress.status_text(phase) in notes
    status = json.load(open(os.path.join(DATA, "status.json")))
    assert status["report"]["crash_class"] == "child_sigquit" and status["report"]["exit_status"] == 69
    assert b"sk-h200-test" not in data and b"api_key='***'" in data
