"""wait_for_model's attach to a kept server (same fingerprint), on the harness's fake clock: the supervisor's
standing ``ready`` is never taken for health without an answer of the run's own (a stopped or hung server is not
``unchanged, healthy``), and a busy server that answers late is kept, nothing stopped."""
from __future__ import annotations

from ansible.module_utils import sglang_proc
from module_harness import module_exits, run, serve, stops, world  # noqa: F401 - fixtures


def test_a_standing_ready_of_a_server_that_answers_no_request_of_this_run_is_never_healthy(world, monkeypatch, stops,
                                                                                          module_exits):  # noqa: F811
    # The server's main process was stopped (SIGSTOP) after its supervisor said ready: the supervisor's standing
    # `ready` is not this run's answer. The attach asks health itself, one request at a time, each given more than
    # SGLang's own 20 s window, and fails saying so; nothing is stopped and nothing is launched.
    serve(world)
    monkeypatch.setattr(sglang_proc, "why_not_ours", lambda state: None)  # the fake server counts as ours
    timeouts = []

    def stopped_server(url, headers, timeout):
        timeouts.append(timeout)
        world.sleep(timeout)  # no answer: the request times out
        return None
    status, r = run(world, run_as=None, inject={"http": stopped_server})
    assert status == "failed", r
    assert "does not answer health" in r["msg"] and "nothing was stopped" in r["msg"], r["msg"]
    assert "became healthy" not in r["msg"] and "Not proven healthy" in r["msg"], r["msg"]
    assert r["changed"] is False and stops == [] and len(world.spawned) == 1
    assert r["health_polls"] == {"polls": 3, "failed_in_a_row": 3, "last": None}
    assert len(timeouts) == 3 and all(t > 20 for t in timeouts), timeouts  # never inside SGLang's 20 s window


def test_a_kept_server_that_answers_this_runs_own_request_late_is_kept(world, monkeypatch, stops,
                                                                       module_exits):  # noqa: F811
    # Busy (a long prefill): the first request of the attach gets no answer, the next one (given the server's whole
    # window) is answered. Kept as it is, nothing stopped.
    serve(world)
    monkeypatch.setattr(sglang_proc, "why_not_ours", lambda state: None)
    answers = [None, 200]

    def busy_server(url, headers, timeout):
        world.sleep(min(timeout, 10.0))
        return answers.pop(0) if answers else 200
    status, r = run(world, run_as=None, inject={"http": busy_server})
    assert status == "ok" and r["changed"] is False, r
    assert r["msg"].startswith("attached to our server (same fingerprint, its supervisor program)")
    assert r["health_polls"]["last"] == 200 and stops == [] and len(world.spawned) == 1
