"""action_plugins/wait_for_model: the module called in steps, with a fake _execute_module and a fake clock (each
step advances it by what the step took on the host); the lines it prints are recorded, nothing runs or sleeps."""
from __future__ import annotations

import pytest

from action_harness import Clock, load_plugin, make_action
from ansible.errors import AnsibleActionFail
from ansible_collections.eagle.deploy.plugins.plugin_utils import sglang_action_steps

plugin_mod = load_plugin("wait_for_model", "eagle_action_wait_for_model")

BASE_ARGS = {"name": "emu", "argv": ["serve"], "log_dir": "/var/log/x"}


def progress(phase, elapsed, shards=None, eta=None, last_load=None, attempt=7, verdict=None):
    return {"phase": phase, "status": None, "shards": shards, "elapsed": elapsed, "eta": eta,
            "last_load": last_load, "attempt": attempt, "launcher": "detached", "verdict": verdict}


def pending(phase, elapsed, took=10.0, **kw):
    return {"changed": kw.pop("changed", False), "pending": True, "progress": progress(phase, elapsed, **kw)}, took


def ready(elapsed, took=3.0, **kw):
    res = {"changed": kw.pop("changed", False), "pending": False, "pid": 4242, "attempt": 7, "elapsed": elapsed,
           "progress": progress("ready", elapsed, eta=0.0, last_load=kw.pop("last_load", None), verdict="ready")}
    res.update(kw)
    return res, took



class Harness(object):
    """An ActionModule whose module calls answer from ``script`` (result, seconds the call took) in order."""

    def __init__(self, script, args=None, check_mode=False, play_check_mode=False, async_val=0, host="blackwell-01"):
        self.script = list(script)
        self.calls = []
        self.lines = []
        self.clock = Clock()
        self.action = make_action(plugin_mod, BASE_ARGS if args is None else args, self._execute_module, self.clock,
                                  check_mode=check_mode, play_check_mode=play_check_mode, async_val=async_val,
                                  action="ansible.legacy.wait_for_model")
        self.action._say = lambda line: self.lines.append((self.clock.now - 1000.0, line))
        self.task_vars = {"inventory_hostname": host}

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, wrap_async=False, **kw):
        assert module_name is None  # the task's own action: ansible.legacy.wait_for_model
        self.calls.append({"args": dict(module_args), "wrap_async": wrap_async})
        assert self.script, "the plugin called the module more often than the test scripted"
        res, took = self.script.pop(0)
        self.clock.now += took
        return dict(res)

    def run(self):
        return self.action.run(task_vars=self.task_vars)


# ------------------------------------------------------------------ one call
def test_a_no_op_costs_exactly_one_call_and_prints_nothing():
    h = Harness([ready(0.4, took=0.2)])
    res = h.run()
    assert len(h.calls) == 1 and h.lines == []
    assert h.calls[0]["args"] == dict(BASE_ARGS, _step_time=10.0)
    assert res["changed"] is False and res["steps"] == 1 and res["pid"] == 4242


@pytest.mark.parametrize("args, kw", [
    (dict(BASE_ARGS, progress=False), {}),
    (dict(BASE_ARGS, progress="no"), {}),
    (BASE_ARGS, {"check_mode": True}),
    (BASE_ARGS, {"play_check_mode": True}),
    (dict(BASE_ARGS, state="stopped"), {}),
    (dict(BASE_ARGS, state="watched"), {}),
])
def test_one_call_with_the_args_as_given(args, kw):
    """progress: false, check mode, other states: one module call, no step_time added, the plugin's own argument
    never passed on; even a pending answer (the module's business then) is returned as it is."""
    answer, took = pending("loading_weights", 12.0)
    h = Harness([(answer, took)], args=args, **kw)
    res = h.run()
    expected = {k: v for k, v in args.items() if k != "progress"}
    assert h.calls == [{"args": expected, "wrap_async": False}]
    assert res["pending"] is True and "steps" not in res and h.lines == []


def test_an_async_task_is_one_wrapped_call():
    h = Harness([({"ansible_job_id": "j1", "started": 1, "finished": 0}, 0.1)], async_val=600)
    res = h.run()
    assert h.calls == [{"args": BASE_ARGS, "wrap_async": True}]
    assert res["ansible_job_id"] == "j1"


def test_progress_must_be_a_boolean():
    h = Harness([], args=dict(BASE_ARGS, progress="maybe"))
    with pytest.raises(AnsibleActionFail):
        h.run()
    assert h.calls == []


@pytest.mark.parametrize("bad", ["soon", -1, 86401, "nan"])
def test_step_time_must_be_a_number_of_seconds(bad):
    h = Harness([], args=dict(BASE_ARGS, step_time=bad))
    with pytest.raises(AnsibleActionFail, match="step_time"):
        h.run()
    assert h.calls == []  # nothing ran on the host


def test_step_time_is_the_plugin_s_own_and_never_reaches_the_module_as_such():
    h = Harness([({"ansible_job_id": "j1", "started": 1, "finished": 0}, 0.1)], async_val=600,
                args=dict(BASE_ARGS, step_time=5))
    h.run()
    assert h.calls == [{"args": BASE_ARGS, "wrap_async": True}]


# ------------------------------------------------------------------ steps
def test_steps_resume_the_attempt_and_merge_into_one_result():
    h = Harness([
        pending("launching", 10.0, changed=True, attempt=7),
        pending("loading_weights", 20.0, shards=[10, 64], attempt=7),
        pending("loading_weights", 30.0, shards=[40, 64], attempt=7),
        ready(33.0, warnings=["w1"]),
    ])
    h.calls_restart = None
    h.script[0][0]["restart_reason"] = "fingerprint changed: argv"
    h.script[0][0]["supervisor_pid"] = 4100  # the detached supervisor the first step started
    h.script[0][0]["stopped"] = {"signalled": [4000], "killed": [], "remaining": [], "seconds": 1.5}  # the old server
    h.script[0][0]["gpu_release"] = {"below_mib": 2048, "seconds": 0.2, "polls": 2, "gpus": []}
    h.script[1][0]["warnings"] = ["w0", "w1"]
    res = h.run()
    assert res["supervisor_pid"] == 4100 and "supervisor" not in res
    assert res["stopped"]["signalled"] == [4000] and res["gpu_release"]["seconds"] == 0.2  # for the role's report
    assert len(h.calls) == 4
    assert "_resume_attempt" not in h.calls[0]["args"]
    assert [c["args"]["_resume_attempt"] for c in h.calls[1:]] == [7, 7, 7]
    assert all(c["args"]["_step_time"] == 10.0 and "progress" not in c["args"] and "step_time" not in c["args"] for c in h.calls)
    assert res["changed"] is True and res["restart_reason"] == "fingerprint changed: argv"
    assert res["pending"] is False and res["pid"] == 4242 and res["steps"] == 4
    assert res["warnings"] == ["w0", "w1"]


def test_restart_reason_only_from_the_step_that_changed():
    h = Harness([pending("launching", 10.0, changed=False), ready(12.0, restart_reason=None)])
    h.script[0][0]["restart_reason"] = "stale"  # a step that did not restart carries no reason the task reports
    res = h.run()
    assert res["changed"] is False and res["restart_reason"] is None and res["steps"] == 2


def test_force_restart_goes_only_to_the_first_step():
    h = Harness([pending("launching", 10.0, changed=True), pending("loading_weights", 20.0), ready(22.0)],
                args=dict(BASE_ARGS, force_restart=True))
    h.script[0][0]["restart_reason"] = "force_restart"
    res = h.run()
    assert [c["args"]["force_restart"] for c in h.calls] == [True, False, False]
    assert res["changed"] is True and res["restart_reason"] == "force_restart" and res["steps"] == 3


def test_a_task_step_time_is_kept():
    h = Harness([pending("launching", 5.0, took=5.0), ready(7.0)], args=dict(BASE_ARGS, step_time=5))
    h.run()
    assert [c["args"]["_step_time"] for c in h.calls] == [5, 5]


def test_a_pending_answer_without_an_attempt_is_asked_again_without_resume():
    h = Harness([pending("launching", 10.0, attempt=None), pending("launching", 20.0, attempt=3), ready(21.0)])
    h.run()
    assert "_resume_attempt" not in h.calls[1]["args"] and h.calls[2]["args"]["_resume_attempt"] == 3


@pytest.mark.parametrize("fail_at", [1, 2, 4])
def test_a_failed_step_ends_the_task_with_that_result(fail_at):
    script = [pending("launching", 10.0, changed=True), pending("loading_weights", 20.0, shards=[3, 64]),
              pending("loading_weights", 30.0, shards=[9, 64]), pending("kv_cache", 40.0), ready(45.0)]
    failed = {"failed": True, "msg": "the server crashed: cuda_oom", "crash_class": "cuda_oom", "changed": False,
              "pending": True, "progress": progress("loading_weights", 10.0 * fail_at, shards=[5, 64])}
    script[fail_at - 1] = (failed, 4.0)
    h = Harness(script)
    res = h.run()
    assert len(h.calls) == fail_at
    assert res["failed"] is True and res["crash_class"] == "cuda_oom" and res["msg"] == failed["msg"]
    assert res["changed"] is (fail_at > 1) and res["steps"] == fail_at


def test_steps_end_when_the_module_never_stops_answering_pending():
    h = Harness([pending("loading_weights", 10.0 * i, took=100.0) for i in range(1, 40)],
                args=dict(BASE_ARGS, timeout=1000))
    res = h.run()
    assert res["failed"] is True and "still answered pending" in res["msg"]
    assert len(h.calls) == 17  # 1000 s + 600 s of steps of 100 s, then one more that finds the limit passed


# ------------------------------------------------------------------ what is printed, and when
def test_lines_at_every_phase_change_and_never_more_than_30_s_apart():
    script = [pending("launching", 10.0)]
    script += [pending("loading_weights", 10.0 * i, shards=[i, 20], eta=200.0 - 10 * i, last_load=210.0)
               for i in range(2, 14)]
    script += [pending("kv_cache", 140.0), pending("cuda_graph", 150.0), pending("cuda_graph", 160.0),
               pending("warmup", 170.0), ready(172.0, took=2.0, last_load=210.0)]
    h = Harness(script)
    res = h.run()
    times = [t for t, _ in h.lines]
    lines = [line for _, line in h.lines]
    assert res["steps"] == len(script) == len(h.calls)
    # the first pending answer, then every phase change, then the verdict
    assert lines[0] == "blackwell-01 | starting | 10s elapsed | no ETA yet (first load)"
    assert "blackwell-01 | loading weights 2/20 shards | 20s elapsed | ETA ~3m00s (last load 3m30s)" in lines
    for words in ("allocating the KV cache", "capturing CUDA graphs", "warming up"):
        assert sum(words in line for line in lines) == 1, lines
    assert lines[-1] == "blackwell-01 | serving | 2m52s elapsed | done (last load 3m30s)"
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert max(gaps) <= 30.0, (times, lines)
    # and not a line per step: shard progress alone prints every 20 s here (a 10-s step, a 30-s rule)
    shard_lines = [line for line in lines if "shards" in line]
    assert len(shard_lines) == 6, shard_lines


def test_slow_steps_still_print_at_least_every_30_s():
    script = [pending("loading_weights", 7.0 * i, took=7.0, shards=[i, 64]) for i in range(1, 30)] + [ready(204.0)]
    h = Harness(script)
    h.run()
    times = [t for t, _ in h.lines]
    assert max(b - a for a, b in zip(times, times[1:])) <= 30.0
    assert len(h.lines) < len(script) / 2


def test_a_first_call_that_ends_the_wait_prints_nothing_even_after_a_restart():
    h = Harness([ready(3.0, changed=True, restart_reason="fingerprint changed: argv")])
    res = h.run()
    assert h.lines == [] and res["changed"] is True and res["steps"] == 1


def test_a_failure_after_progress_gets_its_line():
    failed = {"failed": True, "msg": "crashed", "changed": False,
              "progress": progress("loading_weights", 21.0, shards=[5, 64])}
    h = Harness([pending("loading_weights", 10.0, shards=[2, 64]), (failed, 11.0)])
    h.run()
    assert [line for _, line in h.lines] == ["blackwell-01 | loading weights 2/64 shards | 10s elapsed | no ETA yet (first load)",
                                             "blackwell-01 | loading weights 5/64 shards | 21s elapsed | no ETA yet (first load)"]


def test_results_without_progress_print_nothing():
    h = Harness([({"changed": True, "pending": True, "progress": None}, 10.0), ({"changed": False}, 1.0)])
    res = h.run()
    assert h.lines == [] and res["steps"] == 2 and res["changed"] is True


@pytest.mark.parametrize("callback, to_stderr", [
    ("ansible.builtin.json", True), ("json", True), ("ansible.posix.jsonl", True),
    ("ansible.builtin.default", False), ("yaml", False),
])
def test_lines_go_to_stderr_only_under_a_json_stdout_callback(monkeypatch, callback, to_stderr):
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", callback)
    assert sglang_action_steps.to_stderr() is to_stderr
    shown = []
    h = Harness([])
    monkeypatch.setattr(h.action._display, "display", lambda msg, stderr=False, **kw: shown.append((msg, stderr)))
    plugin_mod.ActionModule._say(h.action, "x | starting")
    assert shown == [("x | starting", to_stderr)]


def test_the_host_defaults_to_the_address_without_an_inventory_name():
    h = Harness([pending("launching", 10.0), ready(11.0)])
    h.task_vars = {}
    h.run()
    assert h.lines[0][1].startswith("10.0.0.1 | starting")


def test_a_progress_line_shows_no_control_character_of_a_status():
    """A step's status (from a status file, which quotes what a server printed) and the host name reach the
    terminal with their control characters escaped: no ESC, CR or BEL gets through the printed line."""
    answer, took = pending("loading_weights", 12.0)
    answer["progress"]["status"] = "loading\x1b[2J\x1b]0;title\x07\rPLAY RECAP ok=1\x9b"
    h = Harness([(answer, took), ready(20.0)], host="evil\x1b[31m")
    h.run()
    line = h.lines[0][1]
    assert line == ("evil\\x1b[31m | loading\\x1b[2J\\x1b]0;title\\x07\\x0dPLAY RECAP ok=1\\x9b | 12s elapsed | "
                    "no ETA yet (first load)")
