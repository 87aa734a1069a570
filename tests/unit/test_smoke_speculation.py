"""The smoke burst's speculation figure (roles/sglang_server/files/smoke_burst.py): the accept length of the burst's
own requests from their meta_info, else every DP rank's /server_info figure, and the words printed beside the burst.
Pure: the answers are recorded ones (a real SGLang 0.5.17 /generate on an H100 with random weights, in
tests/data/h200-playbook/console/fresh.console.txt) or built as SGLang 0.5.23 builds them."""

from __future__ import annotations

import json
import os
import re

import pytest

import role_program

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# As tasks/smoke.yml runs it: files/dp_accept_length.py, then files/smoke_burst.py
smoke_burst = role_program.load("sglang_server", "smoke.yml", "smoke_burst.py")


def recorded_meta_info():
    """The meta_info of the fixed prompt's /generate that SGLang 0.5.17 answered on the H100 (random weights)."""
    with open(os.path.join(REPO, "tests", "data", "h200-playbook", "console", "fresh.console.txt"),
              encoding="utf-8") as handle:
        text = handle.read()
    content = re.search(r"content: '(\{\"text\".*?\})'\n", re.sub(r"\n[\d.]+ {9}", "", text), re.S).group(1)
    return json.loads(content)["meta_info"]


def result(tokens, verify_ct, status=200):
    return {"max_new_tokens": tokens, "status": status, "chars": 5, "tokens": tokens, "verify_ct": verify_ct}


def test_the_recorded_answer_of_random_weights_gives_its_own_accept_length():
    meta = recorded_meta_info()
    figure = smoke_burst.accept_from_requests([result(meta["completion_tokens"], meta["spec_verify_ct"])])
    assert figure["accept_length"] == pytest.approx(meta["spec_accept_length"], abs=0.001)  # 16 / 15, SGLang's own
    assert figure == {"accept_length": 1.067, "source": "requests", "requests": 1, "tokens": 16, "verify_steps": 15}


def test_the_figure_is_tokens_over_verify_steps_of_all_requests_not_a_mean_of_ratios():
    # 1 + 99 tokens: a mean of per-request ratios would give (1.0 + 3.0) / 2 = 2.0; the steps say 100 / 34.
    figure = smoke_burst.accept_from_requests([result(4, 4), result(96, 32)])
    assert figure["accept_length"] == round(100 / 36, 3)
    assert (figure["tokens"], figure["verify_steps"], figure["requests"]) == (100, 36, 2)


def test_requests_without_a_verify_step_or_that_failed_are_not_counted():
    figure = smoke_burst.accept_from_requests([result(1, None), result(1, 0), result(50, 20, status=500),
                                               result(30, 10)])
    assert (figure["tokens"], figure["verify_steps"], figure["requests"]) == (30, 10, 1)


def test_no_request_reports_verify_steps_gives_no_figure():
    assert smoke_burst.accept_from_requests([result(16, None), result(4, None)]) is None
    assert smoke_burst.accept_from_requests([]) is None


def test_a_bool_or_text_in_the_answer_is_not_a_count():
    assert smoke_burst.accept_from_requests([result(16, True), dict(result(16, 5), tokens="16")]) is None


def recorded_server_info():
    """The /server_info that SGLang 0.5.17 answered on the H200 (tests/data/h200-sglang): internal_states holds one
    dict per DP rank (dp_size 1: one), the server's arguments and avg_spec_accept_length in it."""
    with open(os.path.join(REPO, "tests", "data", "h200-sglang", "results", "generate.json"), encoding="utf-8") as fh:
        return json.load(fh)["server_info"]


def test_server_info_averages_every_dp_rank_not_only_the_first():
    info = recorded_server_info()
    rank = info["internal_states"][0]
    assert smoke_burst.accept_from_server_info(info) == {"accept_length": rank["avg_spec_accept_length"],
                                                         "source": "server_info", "ranks": 1, "of_ranks": 1}
    info = dict(info, dp_size=3, internal_states=[dict(rank, avg_spec_accept_length=1.0),
                                                  dict(rank, avg_spec_accept_length=3.0),
                                                  {k: v for k, v in rank.items() if k != "avg_spec_accept_length"}])
    figure = smoke_burst.accept_from_server_info(info)
    assert figure == {"accept_length": 2.0, "source": "server_info", "ranks": 2, "of_ranks": 3}


@pytest.mark.parametrize("info", [None, {}, {"internal_states": None}, {"internal_states": [{}]},
                                  {"internal_states": [{"avg_spec_accept_length": "2.5"}]}, ["not", "a", "dict"]])
def test_server_info_without_a_figure_gives_none(info):
    assert smoke_burst.accept_from_server_info(info) is None


def test_the_words_name_the_source_and_its_counts():
    assert smoke_burst.describe(smoke_burst.accept_from_requests([result(100, 40)])) == \
        "accept length 2.50 (1 requests: 100 tokens in 40 verify steps)"
    assert smoke_burst.describe({"accept_length": 2.0, "source": "server_info", "ranks": 2, "of_ranks": 2}) == \
        "accept length 2.00 (/server_info, cumulative since the start, 2 of 2 DP ranks averaged)"
    assert "not reported" in smoke_burst.describe(None)


def test_server_info_is_asked_only_when_the_requests_give_no_figure(monkeypatch):
    asked = []

    def fake_server_info(req):
        asked.append(req["server_info_url"])
        return {"internal_states": [{"avg_spec_accept_length": 2.25}]}

    req = {"server_info_url": "http://127.0.0.1:1/server_info", "api_key": "", "timeout": 5}
    monkeypatch.setattr(smoke_burst, "server_info", fake_server_info)
    assert smoke_burst.speculation(req, [result(90, 30)])["figure"]["source"] == "requests"
    assert asked == []
    spec = smoke_burst.speculation(req, [result(16, None)])
    assert spec["figure"]["accept_length"] == 2.25 and asked == [req["server_info_url"]]
    assert spec["summary"].startswith("accept length 2.25 (/server_info")
