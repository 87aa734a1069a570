"""The one accept length over SGLang's data-parallel ranks (roles/sglang_server/files/dp_accept_length.py): the plain
mean of every rank's ``avg_spec_accept_length`` in ``/server_info``'s ``internal_states``, and the same definition in
both programs that read it (the smoke burst and the benchmark client). Pure: the states are recorded ones (SGLang
0.5.17 on the H200, tests/data/h200-sglang; SGLang 0.5.23's client line, tests/data/bench) or copies of them with
other figures, one dict per DP rank as SGLang builds them."""

from __future__ import annotations

import json
import os

import pytest

import role_program

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(REPO, "roles", "sglang_server", "files", "dp_accept_length.py")
smoke = role_program.load("sglang_server", "smoke.yml", "smoke_burst.py")
bench = role_program.load("sglang_bench", "run.yml", "bench_client.py")


def h200_rank():
    with open(os.path.join(REPO, "tests", "data", "h200-sglang", "results", "generate.json"), encoding="utf-8") as fh:
        return json.load(fh)["server_info"]["internal_states"][0]


def bench_rank():
    with open(os.path.join(REPO, "tests", "data", "bench", "client-0.5.23-spec.jsonl"), encoding="utf-8") as fh:
        return json.loads(fh.readline())["server_info"]["internal_states"][0]


@pytest.mark.parametrize("rank", [h200_rank(), bench_rank()], ids=["0.5.17-h200", "0.5.23-client"])
def test_the_figure_is_the_mean_of_the_ranks_that_report_one(rank):
    dp = smoke.dp_accept_length
    assert dp([rank]) == {"accept_length": rank["avg_spec_accept_length"],
                          "per_rank": [rank["avg_spec_accept_length"]], "of_ranks": 1}
    idle = {k: v for k, v in rank.items() if k != "avg_spec_accept_length"}  # a rank that has verified nothing yet
    states = [dict(rank, avg_spec_accept_length=1.5), idle, dict(rank, avg_spec_accept_length=3.0),
              dict(rank, avg_spec_accept_length=4.5)]
    assert dp(states) == {"accept_length": 3.0, "per_rank": [1.5, 3.0, 4.5], "of_ranks": 4}


def test_real_states_hold_no_verify_count_to_weight_by():
    """Why the mean is plain: neither release puts a count of verify steps beside the figure."""
    counts = {"spec_verify_ct", "spec_num_forward_ct", "spec_total_num_forward_ct", "spec_total_num_accept_tokens",
              "spec_num_accept_tokens"}
    for rank in (h200_rank(), bench_rank()):
        assert "avg_spec_accept_length" in rank and not counts & set(rank)


@pytest.mark.parametrize("states", [None, {}, "x", [], [{}], ["not a dict"], [{"avg_spec_accept_length": "2.5"}],
                                    [{"avg_spec_accept_length": True}], [{"avg_spec_accept_length": float("nan")}],
                                    [{"avg_spec_accept_length": float("inf")}]])
def test_no_rank_with_a_figure_gives_none(states):
    assert smoke.dp_accept_length(states) is None


def test_both_programs_run_the_one_definition():
    smoke_parts = role_program.parts("sglang_server", "smoke.yml", "smoke_burst.py")
    bench_parts = role_program.parts("sglang_bench", "run.yml", "bench_client.py")
    assert smoke_parts == ["dp_accept_length.py", "smoke_burst.py"]
    assert bench_parts == ["dp_accept_length.py", "bench_client.py"]
    linked = os.path.join(REPO, "roles", "sglang_bench", "files", "dp_accept_length.py")
    assert os.path.islink(linked) and os.path.realpath(linked) == os.path.realpath(SHARED)
    assert smoke.dp_accept_length.__code__.co_filename == SHARED
    assert os.path.realpath(bench.dp_accept_length.__code__.co_filename) == os.path.realpath(SHARED)
    states = [dict(h200_rank(), avg_spec_accept_length=2.0), dict(h200_rank(), avg_spec_accept_length=3.0)]
    assert smoke.accept_from_server_info({"internal_states": states})["accept_length"] == 2.5
    assert bench.accept_length(states)[0] == 2.5
