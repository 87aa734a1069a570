"""Unit tests for library/sglang_router_worker.py and library/wait_for_drain.py: a fake router and a fake server
answer in-process (tests/unit/fleet_harness.py), the clock is fake. The real sglang-router and the emulator's
/v1/loads are met in tests/integration/test_rolling_restart.py."""

from __future__ import annotations

import json

import pytest

from ansible.module_utils.common.warnings import get_warning_messages
from ansible.module_utils.sglang_router_registry import (RouterError, RouterWorkers, gateway_of, going, normal_url,
                                                          progress, serving, shown)
from fleet_harness import FakeClock, FakeRouter, FakeServer, FakeSmg, load_module, run, smg_answers
from module_harness import module_exits  # noqa: F401 - fixture

pytestmark = pytest.mark.usefixtures("module_exits")

router_worker = load_module("sglang_router_worker")
wait_for_drain = load_module("wait_for_drain")

ROUTER = "http://router.test:30000"
URL = "http://127.0.0.1:30180"
KEY = "worker-key-0123456789abcdef"
ADMIN = "admin-key-0123456789abcdef"
READS = [("GET", "/workers"), ("GET", "/get_loads")]  # what a look reads: the list, and what the gateway is


@pytest.fixture
def clock():
    return FakeClock()


def worker(router, clock, check=False, **args):
    args = dict({"router_url": ROUTER, "url": URL, "poll_interval": 0.25, "timeout": 10}, **args)
    return run(router_worker, args, router, clock, check=check)


def strings(value):
    """Every string in a result, at any depth."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in strings(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in strings(v)]
    return []


def methods(router):
    return [(method, path) for method, path, _, _ in router.calls]


# --- sglang_router_worker: absent ---------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [("http://H:80", "http://h"), ("https://h:443/", "https://h"),
                                  ("http://[::1]:80", "http://[::1]"), ("http://h:8080", "http://H:8080/")])
def test_worker_urls_compare_without_default_ports_case_or_slash(a, b):
    assert normal_url(a) == normal_url(b)


def test_worker_records_are_masked_at_any_depth():
    record = {"url": URL, "api_key": "k", "meta": {"Token": "t", "labels": [{"authorization": "a", "x": 1}]}}
    assert shown(record) == {"url": URL, "api_key": "********",
                             "meta": {"Token": "********", "labels": [{"authorization": "********", "x": 1}]}}


def test_absent_refuses_while_too_few_other_workers_serve(clock):
    router = FakeRouter(clock)
    worker_id = router.listed(URL)
    router.listed("http://127.0.0.1:30181", healthy=False)
    outcome, result = worker(router, clock, state="absent", min_healthy_others=1)
    assert outcome == "fail" and "lists 0 other healthy worker(s), fewer than the 1" in result["msg"]
    assert worker_id in router.workers and ("DELETE", "/workers/" + worker_id) not in methods(router)
    router.listed("http://127.0.0.1:30182")
    outcome, result = worker(router, clock, state="absent", min_healthy_others=1)
    assert outcome == "exit" and result["changed"] and worker_id not in router.workers


def test_a_worker_listed_twice_is_refused(clock):
    router = FakeRouter(clock)
    router.listed(URL)
    router.listed(URL + "/")
    outcome, result = worker(router, clock, state="absent")
    assert outcome == "fail" and "lists %s 2 times" % URL in result["msg"]
    assert not any(method == "DELETE" for method, _ in methods(router))


def test_router_text_reaches_the_operator_escaped(clock):
    router = FakeRouter(clock, add_fails="health check failed\x1b]0;owned\x07")
    outcome, result = worker(router, clock, state="present", timeout=5)
    assert outcome == "fail" and "\\x1b]0;owned\\x07" in result["msg"]
    assert not [text for text in strings(result) if "\x1b" in text or "\x07" in text], result


def test_absent_deletes_by_the_routers_uuid_and_waits_until_it_is_gone(clock):
    router = FakeRouter(clock, remove_seconds=0.6)
    worker_id = router.listed(URL)
    outcome, result = worker(router, clock, state="absent")
    assert outcome == "exit" and result["changed"] and result["worker_id"] == worker_id
    assert ("DELETE", "/workers/" + worker_id) in methods(router)
    assert not any(method == "DELETE" and "127.0.0.1" in path for method, path in methods(router))
    assert worker_id not in router.workers
    assert result["polls"] == 4 and clock.sleeps == [0.25, 0.25, 0.25]  # 404 at the first look after 0.6 s
    assert "removed worker %s (%s)" % (URL, worker_id) in result["msg"]


def test_absent_when_not_listed_changes_nothing(clock):
    router = FakeRouter(clock)
    router.listed("http://127.0.0.1:30181")
    outcome, result = worker(router, clock, state="absent")
    assert outcome == "exit" and not result["changed"] and result["worker_id"] is None
    assert methods(router) == READS


def test_absent_in_check_mode_only_reads(clock):
    router = FakeRouter(clock)
    worker_id = router.listed(URL)
    outcome, result = worker(router, clock, check=True, state="absent")
    assert outcome == "exit" and result["changed"] and "would remove" in result["msg"]
    assert methods(router) == READS and worker_id in router.workers


def test_the_url_matches_with_case_and_trailing_slash_aside(clock):
    router = FakeRouter(clock)
    worker_id = router.listed("HTTP://LocalHost:30180/")
    outcome, result = worker(router, clock, state="absent", url="http://localhost:30180")
    assert outcome == "exit" and result["worker_id"] == worker_id
    assert normal_url("http://H:1/") == normal_url("http://h:1")


def test_absent_that_never_ends_fails_with_the_timeout(clock):
    router = FakeRouter(clock, remove_seconds=1e9)
    worker_id = router.listed(URL)
    outcome, result = worker(router, clock, state="absent", timeout=2)
    assert outcome == "fail" and "worker %s not removed after 2 s" % worker_id in result["msg"]
    assert result["elapsed"] >= 2


# --- sglang_router_worker: present --------------------------------------------------------------------------------

def test_present_posts_url_and_key_then_waits_until_healthy(clock):
    router = FakeRouter(clock, add_seconds=1.1)
    outcome, result = worker(router, clock, api_key=KEY, worker_config={"priority": 60})
    assert outcome == "exit" and result["changed"]
    post = [body for method, path, body, _ in router.calls if method == "POST"]
    assert post == [{"url": URL, "api_key": KEY, "priority": 60}]
    assert result["worker"]["is_healthy"] is True and result["worker_id"] in router.workers
    assert result["polls"] == 6  # 0, 0.25, ..., 1.25 s
    assert KEY not in json.dumps(result)


def test_present_when_listed_and_healthy_posts_nothing(clock):
    router = FakeRouter(clock)
    worker_id = router.listed(URL)
    outcome, result = worker(router, clock, api_key=KEY)
    assert outcome == "exit" and not result["changed"] and result["worker_id"] == worker_id
    assert "POST" not in [method for method, _ in methods(router)]


def test_present_in_check_mode_posts_nothing(clock):
    router = FakeRouter(clock)
    outcome, result = worker(router, clock, check=True, api_key=KEY)
    assert outcome == "exit" and result["changed"] and "would add" in result["msg"]
    assert methods(router) == READS


def test_a_failed_add_job_fails_with_the_routers_words(clock):
    router = FakeRouter(clock, add_seconds=0.5, add_fails="health check failed: connection refused")
    outcome, result = worker(router, clock, api_key=KEY)
    assert outcome == "fail"
    assert "job on worker" in result["msg"] and "AddWorker failed: health check failed" in result["msg"]
    assert result["job_status"]["status"] == "failed"


def test_an_add_that_never_ends_fails_with_the_timeout(clock):
    router = FakeRouter(clock, add_seconds=1e9)
    outcome, result = worker(router, clock, api_key=KEY, timeout=3)
    assert outcome == "fail" and "not added and healthy after 3 s (AddWorker processing)" in result["msg"]


def test_a_router_with_control_plane_keys_needs_the_admin_key(clock):
    router = FakeRouter(clock, admin_key=ADMIN)
    outcome, result = worker(router, clock, api_key=KEY)
    assert outcome == "fail" and "401" in result["msg"] and "router_api_key" in result["msg"]
    outcome, result = worker(router, clock, api_key=KEY, router_api_key=ADMIN)
    assert outcome == "exit" and result["changed"]
    assert all(headers["Authorization"] == "Bearer " + ADMIN for _, _, _, headers in router.calls[1:])
    assert ADMIN not in json.dumps(result)


def test_a_router_that_does_not_answer_fails_naming_it(clock):
    router = FakeRouter(clock)
    router.down = True
    outcome, result = worker(router, clock)
    assert outcome == "fail" and "the router does not answer: GET %s/workers" % ROUTER in result["msg"]


@pytest.mark.parametrize("args, needle", [
    ({"url": "127.0.0.1:30180"}, "url must be an http:// or https:// URL"),
    ({"router_url": "router:30000"}, "router_url must be an http:// or https:// URL"),
    ({"timeout": 0}, "timeout must be above 0"),
])
def test_bad_input_fails_before_any_request(clock, args, needle):
    router = FakeRouter(clock)
    outcome, result = worker(router, clock, **args)
    assert outcome == "fail" and needle in result["msg"] and router.calls == []


@pytest.mark.parametrize("status, body, state", [
    (404, {"code": "WORKER_NOT_FOUND"}, "gone"),
    (200, {"is_healthy": True}, "ready"),
    (200, {"is_healthy": False}, "pending"),
    (200, {"is_healthy": False, "job_status": {"job_type": "AddWorker", "status": "processing"}}, "pending"),
    (200, {"is_healthy": True, "job_status": {"job_type": "RemoveWorker", "status": "processing"}}, "pending"),
    (200, {"job_status": {"job_type": "AddWorker", "status": "failed", "message": "x"}}, "failed"),
    (500, "oops", "pending"),
])
def test_progress_reads_a_worker_record(status, body, state):
    assert progress(status, body)[0] == state


# --- sglang_router_worker against smg 1.13.0 (its recorded answers: tests/data/smg-1.13.0) ------------------------

SMG = smg_answers()


def test_the_gateway_is_told_by_its_get_loads_answer():
    assert gateway_of(200, SMG["get_loads"]["body"]) == {"name": "smg", "version": "1.13.0"}
    assert gateway_of(200, SMG["get_loads_no_worker"]["body"]) == {"name": "smg", "version": "1.13.0"}
    old = SMG["sglang_router_0_3_2"]["get_loads"]
    assert gateway_of(old["status"], old["body"]) == {"name": "sglang-router", "version": None}
    assert gateway_of(404, {"error": "not found"})["name"] == "unknown"
    assert gateway_of(200, {"loads": []})["name"] == "unknown"


@pytest.mark.parametrize("name, state, words", [
    ("get_worker_adding", "pending", "AddWorker processing"),
    ("get_worker_ready", "ready", "listed and ready"),
    ("get_worker_not_ready", "pending", "the gateway calls it not_ready"),
    ("get_worker_failed", "pending", "the gateway calls it failed"),
    ("get_worker_draining", "pending", "RemoveWorker processing"),
    ("get_worker_recovered_after_failed", "ready", "listed and ready"),
    ("get_worker_removed", "gone", "not listed"),
])
def test_progress_reads_smgs_recorded_worker_states(name, state, words):
    assert progress(SMG[name]["status"], SMG[name]["body"]) == (state, words)


def test_a_draining_worker_is_going_and_not_serving():
    draining, ready = SMG["get_workers_one_draining"]["body"]["workers"]
    assert draining["status"] == "draining" and going(draining) and not serving(draining)
    assert ready["status"] == "ready" and not going(ready) and serving(ready)
    assert going(SMG["get_worker_draining"]["body"])  # its job, as GET /workers/{id} shows it
    old = SMG["sglang_router_0_3_2"]["get_workers"]["body"]["workers"][0]
    assert serving(old) and not going(old)  # no status field: is_healthy decides


def test_smg_present_waits_until_the_gateway_says_ready(clock):
    router = FakeSmg(clock, add_seconds=0.5, after_add=[("not_ready", 1.0), ("ready", None)])
    outcome, result = worker(router, clock, api_key=KEY)
    assert outcome == "exit" and result["changed"], result
    assert result["gateway"] == {"name": "smg", "version": "1.13.0"}
    assert result["worker"]["status"] == "ready" and result["worker"]["is_healthy"] is True
    assert result["msg"].endswith("listed and ready") and clock.now >= 501.5  # not at the add: at ready
    assert [body for method, path, body, _ in router.calls if method == "POST"] == [{"url": URL, "api_key": KEY}]
    assert KEY not in json.dumps(result)


def test_smg_present_times_out_with_the_gateways_health_state(clock):
    router = FakeSmg(clock, add_seconds=0.5, after_add=[("not_ready", 1.0), ("failed", None)])
    outcome, result = worker(router, clock, api_key=KEY, timeout=4)
    assert outcome == "fail" and "not added and healthy after 4 s (the gateway calls it failed)" in result["msg"]
    assert result["worker"]["status"] == "failed"


def test_smg_absent_deletes_once_and_waits_out_the_drain(clock):
    router = FakeSmg(clock, settle_seconds=5.0)
    worker_id = router.listed(URL)
    router.listed("http://127.0.0.1:30181")
    outcome, result = worker(router, clock, state="absent", min_healthy_others=1, poll_interval=1.0)
    assert outcome == "exit" and result["changed"] and worker_id not in router.workers
    assert [m for m in methods(router) if m[0] == "DELETE"] == [("DELETE", "/workers/" + worker_id)]
    assert result["elapsed"] == 5.0 and result["gateway"]["name"] == "smg"
    assert result["msg"] == "removed worker %s (%s) from the router" % (URL, worker_id)


def test_smg_absent_of_a_draining_worker_waits_without_a_second_delete(clock):
    router = FakeSmg(clock, settle_seconds=5.0)
    worker_id = router.listed(URL)
    router(ROUTER + "/workers/" + worker_id, method="DELETE")  # someone else's removal, draining
    clock.now += 2.0
    outcome, result = worker(router, clock, state="absent", min_healthy_others=1, poll_interval=1.0)
    assert outcome == "exit" and result["changed"] and worker_id not in router.workers
    assert [m for m in methods(router) if m[0] == "DELETE"] == [("DELETE", "/workers/" + worker_id)]  # theirs only
    assert result["elapsed"] == 3.0 and result["msg"].endswith("(it was already going)")


def test_smg_present_of_a_draining_worker_waits_until_gone_then_posts(clock):
    router = FakeSmg(clock, settle_seconds=5.0, add_seconds=0.5)
    old_id = router.listed(URL)
    router(ROUTER + "/workers/" + old_id, method="DELETE")
    outcome, result = worker(router, clock, api_key=KEY, poll_interval=1.0)
    assert outcome == "exit" and result["changed"] and result["worker_id"] != old_id
    posts = [(method, path) for method, path in methods(router) if method in ("POST", "DELETE")]
    assert posts == [("DELETE", "/workers/" + old_id), ("POST", "/workers")]  # posted once, after the removal
    assert list(router.workers) == [result["worker_id"]] and result["worker"]["status"] == "ready"
    assert result["elapsed"] >= 5.5


def test_smg_409_of_an_add_in_progress_is_waited_on(clock):
    router = FakeSmg(clock, add_seconds=2.0)
    router(ROUTER + "/workers", data=json.dumps({"url": URL, "api_key": KEY}).encode(), method="POST")
    outcome, result = worker(router, clock, api_key=KEY, poll_interval=0.5)
    assert outcome == "exit" and result["worker"]["status"] == "ready", result
    assert [(method, path) for method, path, _, _ in router.calls if method == "POST"] == [("POST", "/workers")] * 2
    assert list(router.workers) == [result["worker_id"]]


def test_a_409_without_an_id_fails_with_the_gateways_words():
    answer = type("Answer", (), {"status": 409, "body": {"error": "conflict", "code": "OTHER"}})()
    with pytest.raises(RouterError) as raised:
        RouterWorkers._already(answer)  # pylint: disable=protected-access
    assert "409" in str(raised.value) and "conflict" in str(raised.value)


def test_smg_check_mode_only_reads(clock):
    router = FakeSmg(clock)
    worker_id = router.listed(URL)
    outcome, result = worker(router, clock, check=True, state="absent")
    assert outcome == "exit" and result["changed"] and "would remove" in result["msg"]
    assert methods(router) == READS and router.workers[worker_id]["status"] == "ready"
    outcome, result = worker(router, clock, check=True, url="http://127.0.0.1:30181")
    assert outcome == "exit" and "would add" in result["msg"] and result["gateway"]["name"] == "smg"


def test_smg_needs_the_admin_key_like_sglang_router(clock):
    router = FakeSmg(clock, admin_key=ADMIN)
    outcome, result = worker(router, clock, api_key=KEY)
    assert outcome == "fail" and "401" in result["msg"] and "router_api_key" in result["msg"]


# --- wait_for_drain -----------------------------------------------------------------------------------------------

def drain(server, clock, check=False, **args):
    args = dict({"url": "http://127.0.0.1:30180", "api_key": KEY, "poll_interval": 0.5, "timeout": 30}, **args)
    return run(wait_for_drain, args, server, clock, check=check)


def test_drain_waits_until_two_looks_in_a_row_find_nothing(clock):
    server = FakeServer([(2, 1), (1, 0), (0, 0), (1, 0), (0, 0), (0, 0)], api_key=KEY)
    outcome, result = drain(server, clock)
    assert outcome == "exit" and result["drained"] and not result["changed"]
    assert result["samples"] == 6 and clock.sleeps == [0.5] * 5
    assert (result["running"], result["waiting"]) == (0, 0)
    assert all(h["Authorization"] == "Bearer " + KEY for h in server.headers)
    assert KEY not in json.dumps(result)


def test_drain_adds_up_every_data_parallel_rank(clock):
    server = FakeServer([[(1, 0), (0, 2)], [(0, 0), (0, 0)]])
    outcome, result = drain(server, clock, quiet_samples=1)
    assert outcome == "exit" and result["drained"] and result["samples"] == 2


def test_drain_timeout_returns_the_last_figures_with_a_warning(clock):
    server = FakeServer([(3, 2)])
    outcome, result = drain(server, clock, timeout=2)
    assert outcome == "exit" and not result["drained"] and (result["running"], result["waiting"]) == (3, 2)
    assert "not drained after 2 s: 3 running, 2 waiting" in result["msg"]
    assert any("stopping the server now cuts them" in w for w in get_warning_messages())


def test_drain_timeout_fails_when_asked(clock):
    outcome, result = drain(FakeServer([(1, 0)]), clock, timeout=1, fail_on_timeout=True)
    assert outcome == "fail" and not result["drained"] and "not drained after 1 s" in result["msg"]


def test_a_server_that_does_not_answer_runs_nothing(clock):
    outcome, result = drain(FakeServer(["down"]), clock)
    assert outcome == "exit" and result["drained"] and "does not answer" in result["msg"]


def test_a_server_that_times_out_is_not_counted_as_drained(clock):
    outcome, result = drain(FakeServer(["silent"]), clock, timeout=3)
    assert outcome == "exit" and not result["drained"] and "no answer" in result["msg"] and result["samples"] > 1


def test_the_read_only_look_fails_when_the_server_gives_no_answer(clock):
    outcome, result = drain(FakeServer(["silent"]), clock, timeout=0)
    assert outcome == "fail" and "no answer" in result["msg"]
    outcome, result = drain(FakeServer(["down"]), clock, timeout=0)
    assert outcome == "exit" and result["drained"]


def test_no_rank_published_yet_is_not_quiet(clock):
    outcome, result = drain(FakeServer(["empty", "empty", (2, 0), (0, 0), (0, 0)]), clock)
    assert outcome == "exit" and result["drained"] and result["samples"] == 5 and result["max_running"] == 2
    outcome, result = drain(FakeServer(["empty"]), clock, timeout=2)
    assert outcome == "exit" and not result["drained"] and "no rank has published its load yet" in result["msg"]


def test_figures_that_are_not_counts_fail_with_the_answer(clock):
    outcome, result = drain(FakeServer(["bad"]), clock)
    assert outcome == "fail" and "num_running_reqs must be a count" in result["msg"]


@pytest.mark.parametrize("figure, needle", [(404, "has no load endpoint"), (401, "give the server's API key")])
def test_a_server_without_loads_or_refusing_fails_with_what_to_do(clock, figure, needle):
    outcome, result = drain(FakeServer([figure]), clock)
    assert outcome == "fail" and needle in result["msg"]


def test_a_503_look_counts_as_not_quiet(clock):
    outcome, result = drain(FakeServer([(0, 0), 503, (0, 0), (0, 0)]), clock)
    assert outcome == "exit" and result["drained"] and result["samples"] == 4


def test_drain_in_check_mode_looks_once(clock):
    server = FakeServer([(1, 0), (0, 0)])
    outcome, result = drain(server, clock, check=True)
    assert outcome == "exit" and not result["drained"] and result["running"] == 1 and server.looks == 1
    assert clock.sleeps == []


def test_drain_timeout_0_looks_once_and_never_warns(clock):
    before = len(get_warning_messages())
    outcome, result = drain(FakeServer([(1, 0)]), clock, timeout=0)
    assert outcome == "exit" and result["samples"] == 1 and clock.sleeps == []
    assert len(get_warning_messages()) == before
