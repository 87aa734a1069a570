"""A multi-node server rolls back together or not at all (module_utils/sglang_good_group.py, the group parts of
module_utils/sglang_good_record.py), and sglang_good_deployment's writes hold wait_for_model's lock of the server.
Files in temporary run dirs; no process is spawned, nothing sleeps."""
import fcntl
import os

import pytest

import sglang_good_deployment as module
from ansible.module_utils import sglang_good_group as group
from ansible.module_utils import sglang_good_record as good
from ansible.module_utils.sglang_input_checks import WaitError
from module_harness import module_exits, module_result  # noqa: F401 - module_exits is a fixture
from test_good_record import NAME, inputs, place, running  # noqa: F401 - place is a fixture

NODES = ["node0", "node1"]


def cand(gid, intact=True, why=None, fp="f"):
    return {"group": gid, "intact": intact, "why_not": why, "fingerprint": fp * 64, "description": fp * 16}


def test_the_newest_generation_every_node_holds_intact_is_chosen():
    assert group.choose_group(NODES, [[cand("kimi_a/new"), cand("kimi_a/old")],
                                      [cand("kimi_a/new"), cand("kimi_a/old")]]) == ("kimi_a/new", None)
    # node1 no longer holds the newest intact: the older generation, on both
    assert group.choose_group(NODES, [[cand("kimi_a/new"), cand("kimi_a/old")],
                                      [cand("kimi_a/new", False, "its python is gone"), cand("kimi_a/old")]]) == (
        "kimi_a/old", None)
    # node1 recorded only the older one (kept 1 before the newer was recorded on node0): the older one
    assert group.choose_group(NODES, [[cand("kimi_a/new"), cand("kimi_a/old")], [cand("kimi_a/old")]]) == (
        "kimi_a/old", None)


def test_a_node_without_the_generation_rolls_back_no_node_and_is_named():
    gid, why = group.choose_group(NODES, [[cand("kimi_a/g1")], []])
    assert gid is None and why == "node node1 (rank 1): holds no good deployment of generation kimi_a/g1"
    gid, why = group.choose_group(NODES, [[cand("kimi_a/g1")], [cand("kimi_a/g1", False, "sglang.yaml changed")]])
    assert gid is None and why == ("node node1 (rank 1): its good deployment of generation kimi_a/g1 is not intact: "
                                   "sglang.yaml changed")
    gid, why = group.choose_group(NODES, [[cand("kimi_a/g1")], None])
    assert gid is None and why.startswith("node node1 (rank 1): did not report its good deployments")
    gid, why = group.choose_group(NODES, [[], [cand("kimi_a/g1")]])
    assert gid is None and why.startswith("node node0 (rank 0): no good deployment")
    # a single node's record (no group) is never a group's generation
    gid, why = group.choose_group(NODES, [[cand(None)], [cand(None)]])
    assert gid is None and why.startswith("node node0 (rank 0): no good deployment recorded as the group's")
    assert group.choose_group([], []) == (None, "no node of the group reported its good deployments")


def test_a_node_records_its_generation_and_reports_it_as_a_candidate(place):
    first = dict(inputs(place), group="kimi_a/0123456789abcdef")
    good.record(place["run_dir"], NAME, running(first["fingerprint"]), first, 2, 1000.0)
    cands = good.candidates(place["run_dir"], NAME, "f" * 64)
    assert [(c["group"], c["intact"], c["fingerprint"]) for c in cands] == [
        ("kimi_a/0123456789abcdef", True, first["fingerprint"])]
    assert good.candidates(place["run_dir"], NAME, first["fingerprint"]) == []  # the failed one is no candidate
    # the same server recorded again as another generation (a peer changed) is a new record
    again = dict(first, group="kimi_a/fedcba9876543210")
    assert good.record(place["run_dir"], NAME, running(first["fingerprint"]), again, 2, 1001.0)[0] is True
    d, why = good.choose(place["run_dir"], NAME, "f" * 64, group="kimi_a/0123456789abcdef")
    assert d is None and "no good deployment" in why
    d, why = good.choose(place["run_dir"], NAME, "f" * 64, group="kimi_a/fedcba9876543210")
    assert why is None and d["group"] == "kimi_a/fedcba9876543210"
    os.unlink(place["python"])
    assert good.candidates(place["run_dir"], NAME, "f" * 64)[0]["intact"] is False


def params(run_dir, timeout=0.0):
    return {"name": NAME, "run_dir": run_dir, "lock_timeout": timeout, "state": "good"}


def test_a_write_waits_for_the_run_that_holds_the_lock_and_then_fails_naming_it(place):
    lock_path = os.path.join(place["run_dir"], NAME + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b'{"pid": 777, "since": 1.0, "state": "started"}\n', 0)
        fcntl.flock(fd, fcntl.LOCK_EX)  # another run (a wait_for_model launch) holds it
        clock = iter(range(100))
        with pytest.raises(WaitError, match=r"another run holds the lock for sglang .*pid 777, state started"):
            module.locked(params(place["run_dir"], 2.0), clock=lambda: next(clock), sleep=lambda s: None)
        fcntl.flock(fd, fcntl.LOCK_UN)
        held = module.locked(params(place["run_dir"]))
        try:  # now this write holds it: a launch would wait
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            held.unlock()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go
    finally:
        os.close(fd)


def run_module(args):
    return module_result(module.main, args)


def test_the_module_restores_nothing_while_another_run_holds_the_lock(place, module_exits):
    first = dict(inputs(place), group="kimi_a/g1")
    good.record(place["run_dir"], NAME, running(first["fingerprint"]), first, 1, 1000.0)
    with open(place["config"], "w") as fh:
        fh.write("the new deployment's config\n")
    fd = os.open(os.path.join(place["run_dir"], NAME + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        out = run_module({"name": NAME, "run_dir": place["run_dir"], "state": "chosen", "restore": True,
                          "failed_fingerprint": "f" * 64, "lock_timeout": 0})
        assert out["failed"] and "nothing was recorded or restored: another run holds the lock" in out["msg"], out
        assert open(place["config"]).read() == "the new deployment's config\n"
        # reading (restore false) takes no lock: each node's report of its candidates
        out = run_module({"name": NAME, "run_dir": place["run_dir"], "state": "chosen", "restore": False,
                          "failed_fingerprint": "f" * 64, "lock_timeout": 0})
        assert [c["group"] for c in out["candidates"]] == ["kimi_a/g1"] and not out["changed"], out
    finally:
        os.close(fd)


def test_the_module_restores_nothing_when_another_node_lacks_the_generation(place, module_exits):
    first = dict(inputs(place), group="kimi_a/g1")
    good.record(place["run_dir"], NAME, running(first["fingerprint"]), first, 1, 1000.0)
    with open(place["config"], "w") as fh:
        fh.write("the new deployment's config\n")
    args = {"name": NAME, "run_dir": place["run_dir"], "state": "chosen", "restore": True,
            "failed_fingerprint": "f" * 64}
    mine = run_module(dict(args, restore=False))["candidates"]
    out = run_module(dict(args, group_choice={"nodes": NODES, "candidates": [mine, []]}))
    assert out["deployment"] is None and out["group"] is None and out["restored"] == [], out
    assert out["why_not"] == "node node1 (rank 1): holds no good deployment of generation kimi_a/g1"
    assert open(place["config"]).read() == "the new deployment's config\n"
    # both hold it: this node restores that generation's files
    out = run_module(dict(args, group_choice={"nodes": NODES, "candidates": [mine, mine]}))
    assert out["group"] == "kimi_a/g1" and out["deployment"]["fingerprint"] == first["fingerprint"], out
    assert out["restored"] == [place["config"]] and out["deployment"]["group"] == "kimi_a/g1"


def test_the_generation_that_failed_is_never_chosen():
    # node0's own deployment did not change (node1's did): node0 reports the failed generation's fingerprint as good
    assert group.choose_group(NODES, [[cand("kimi_a/new"), cand("kimi_a/old")], [cand("kimi_a/old")]],
                              failed_group="kimi_a/new") == ("kimi_a/old", None)
    gid, why = group.choose_group(NODES, [[cand("kimi_a/new")], [cand("kimi_a/new")]], failed_group="kimi_a/new")
    assert gid is None and why == ("node node0 (rank 0): no good generation of the group is recorded other than the "
                                   "one that failed (kimi_a/new)")


def test_the_module_looks_at_each_good_deployment_once(place, module_exits, monkeypatch):
    # the candidates it reports and the one it chooses come from one look (each file hashed once), not two
    first = dict(inputs(place), group="kimi_a/g1")
    good.record(place["run_dir"], NAME, running(first["fingerprint"]), first, 1, 1000.0)
    looked = []
    real = good.why_not_intact
    monkeypatch.setattr(good, "why_not_intact", lambda run_dir, d, secrets=(): looked.append(d["fingerprint"]) or
                        real(run_dir, d, secrets))
    out = run_module({"name": NAME, "run_dir": place["run_dir"], "state": "chosen", "failed_fingerprint": "f" * 64})
    assert out["deployment"]["fingerprint"] == first["fingerprint"] and len(out["candidates"]) == 1, out
    assert looked == [first["fingerprint"]]
