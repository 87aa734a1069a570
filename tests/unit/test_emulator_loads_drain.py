"""Unit tests for the emulator's /v1/loads and SIGTERM drain (tests/emulator/sglang_emulator/loads.py, drain.py, the
engine's bookkeeping of client requests): pure parts, no processes, no sleeps. The HTTP side and a real SIGTERM are
in tests/integration/test_emulator.py."""

from __future__ import annotations

import ast
import datetime
import os
import sys
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_src  # noqa: E402 - test helper next to this file, importable once sys.path has this directory

sys.path.insert(0, os.path.join(sglang_src.REPO, "tests", "emulator"))
from sglang_emulator import cli, drain, engine, loads  # noqa: E402 - tests/emulator, once on sys.path

CFG = {"max_total_num_tokens": 20480, "speculative": True}
NOW = datetime.datetime(2026, 12, 5, tzinfo=datetime.timezone.utc)


def real_snapshot_fields(version="0.5.23"):
    """Field names of each struct in SGLang's load_snapshot.py, read from the release's wheel."""
    with zipfile.ZipFile(sglang_src.wheel_path(version)) as wheel:
        tree = ast.parse(wheel.read("sglang/srt/managers/load_snapshot.py").decode("utf-8"))
    return {node.name: [item.target.id for item in node.body if isinstance(item, ast.AnnAssign)]
            for node in tree.body if isinstance(node, ast.ClassDef)}


def test_a_load_has_the_fields_of_sglang_0_5_23s_load_snapshot():
    real = real_snapshot_fields()
    load = loads.snapshot(3, CFG, now=1.0)
    assert list(load) == real["LoadSnapshot"]
    assert list(load["memory"]) == real["MemoryMetrics"]
    assert list(load["disaggregation"]) == real["DisaggregationMetrics"]
    assert list(load["queues"]) == real["QueueMetrics"]


def test_the_answer_has_sglangs_top_level_keys_and_every_set_section():
    body = loads.answer(loads.snapshot(2, CFG, now=1.0), {}, "0.5.23", 8, now=NOW)
    assert list(body) == ["timestamp", "version", "accelerator", "num_accelerators", "loads"]
    assert body["version"] == "0.5.23" and body["num_accelerators"] == 8
    (load,) = body["loads"]
    assert load["num_running_reqs"] == 2 and load["num_waiting_reqs"] == 0 and load["dp_rank"] == 0
    # speculative and lora are unset (None) and so left out, as LoadSnapshot.to_dict leaves them out
    assert {"memory", "disaggregation", "queues"} <= set(load) and not {"speculative", "lora"} & set(load)


def test_requests_over_max_running_requests_wait():
    load = loads.snapshot(loads.MAX_RUNNING_REQUESTS + 5, CFG, now=1.0)
    assert (load["num_running_reqs"], load["num_waiting_reqs"]) == (loads.MAX_RUNNING_REQUESTS, 5)
    assert load["queues"]["waiting"] == 5


def test_include_core_gives_the_flat_fields_only():
    body = loads.answer(loads.snapshot(1, CFG, now=1.0), {"include": ["core"]}, "0.5.23", 1, now=NOW)
    assert not {"memory", "queues", "disaggregation"} & set(body["loads"][0])
    body = loads.answer(loads.snapshot(1, CFG, now=1.0), {"include": ["memory, queues"]}, "0.5.23", 1, now=NOW)
    assert {"memory", "queues"} <= set(body["loads"][0]) and "disaggregation" not in body["loads"][0]


def test_an_unknown_section_is_a_400_and_a_bad_rank_a_422():
    with pytest.raises(loads.LoadsError) as bad:
        loads.answer(loads.snapshot(0, CFG, now=1.0), {"include": ["core,bogus"]}, "0.5.23", 1, now=NOW)
    assert bad.value.status == 400 and "Invalid include sections" in str(bad.value)
    with pytest.raises(loads.LoadsError) as bad:
        loads.answer(loads.snapshot(0, CFG, now=1.0), {"dp_rank": ["x"]}, "0.5.23", 1, now=NOW)
    assert bad.value.status == 422


def test_a_rank_the_server_does_not_have_gives_no_load():
    assert loads.answer(loads.snapshot(4, CFG, now=1.0), {"dp_rank": ["1"]}, "0.5.23", 1, now=NOW)["loads"] == []
    assert len(loads.answer(loads.snapshot(4, CFG, now=1.0), {"dp_rank": ["0"]}, "0.5.23", 1, now=NOW)["loads"]) == 1


class Looks:
    """drain()'s world: what each look finds, the lines it logs, the sleeps it takes."""

    def __init__(self, held, children=None):
        self.held = list(held)
        self.children = list(children or [True] * len(held))
        self.looks = 0
        self.lines = []
        self.sleeps = []

    def in_flight(self):
        found = self.held[min(self.looks, len(self.held) - 1)]
        return found

    def children_alive(self):
        alive = self.children[min(self.looks, len(self.children) - 1)]
        self.looks += 1
        return alive

    def log(self, msg, level):
        self.lines.append((level, msg))

    def sleep(self, seconds):
        self.sleeps.append(seconds)


def test_the_drain_looks_until_no_request_is_held_then_ends():
    world = Looks([{"b", "a"}, {"a"}, set()])
    assert drain.drain(world.in_flight, world.children_alive, world.log, world.sleep, 0.5) == "drained"
    assert world.lines[0] == ("warning", drain.SIGTERM_LINE)
    assert "Draining requests and shutting down..." in drain.SIGTERM_LINE
    assert [msg for _, msg in world.lines[1:]] == [
        "Gracefully exiting... Remaining number of requests 2. Remaining requests remaining_rids=['a', 'b'].",
        "Gracefully exiting... Remaining number of requests 1. Remaining requests remaining_rids=['a'].",
        "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[].",
    ]
    assert world.sleeps == [0.5, 0.5]


def test_nothing_held_ends_the_drain_at_the_first_look():
    world = Looks([set()])
    assert drain.drain(world.in_flight, world.children_alive, world.log, world.sleep, 5) == "drained"
    assert world.sleeps == []


def test_children_gone_end_the_drain_with_requests_still_held():
    world = Looks([{"a"}, {"a"}], children=[True, False])
    assert drain.drain(world.in_flight, world.children_alive, world.log, world.sleep, 0.5) == "children_gone"
    assert world.sleeps == [0.5]


class FakeScheduler:
    """The TP0 scheduler's pipe: answers each request at once, noting what the engine held while it ran."""

    def __init__(self, eng):
        self.eng = eng
        self.held_during = []

    def send(self, msg):
        self.held_during.append(self.eng.in_flight())
        waiter = self.eng.pending[msg["rid"]]
        waiter["result"] = {"rid": msg["rid"], "text": " x"}
        waiter["event"].set()


def new_engine():
    args, _, _ = cli.parse_args(["--emulator-step-ms", "500", "--emulator-drain-interval", "5"])
    eng = engine.Engine(args, None)
    eng.sched_conns = [FakeScheduler(eng)]
    return eng


def test_a_client_request_is_held_while_it_runs_and_health_and_warmup_are_not():
    eng = new_engine()
    assert eng.cfg["decode"]["step_ms"] == 500 and eng.args.emulator_drain_interval == 5.0
    assert eng.submit("hi", 4, 1.0)["text"] == " x"
    eng.submit([0], 1, 1.0, health=True)
    eng.submit("warm", 4, 1.0, warmup=True)
    held = eng.sched_conns[0].held_during
    assert len(held[0]) == 1 and held[1:] == [set(), set()]
    assert eng.in_flight() == set() and eng.pending == {}


def test_health_is_up_only_once_ready_and_until_sigterm():
    eng = new_engine()
    assert not eng.serving()
    eng.up = True
    assert eng.serving()
    eng.draining = True
    assert not eng.serving()
