"""action_plugins/sglang_model: the module called in steps with a fake _execute_module and a fake clock; the jobs of
one step go to the next, the lines are recorded (sglang_progress.transfer_line through the shared StepPrinter), the
steps merge into one result. Nothing runs or sleeps."""
from __future__ import annotations

from action_harness import Clock, load_plugin, make_action

plugin_mod = load_plugin("sglang_model", "eagle_action_sglang_model")

ARGS = {"models": [{"name": "m", "path": "/d/m", "repo": "o/m"}], "python": "/v/bin/python"}


def progress(phase, present, elapsed, rate=50e6, eta=10.0):
    return {"phase": phase, "models": ["m"], "total": 100e6, "present": present, "files_done": 1, "files_total": 3,
            "rate": rate, "eta": eta, "elapsed": elapsed}



class Harness(object):
    def __init__(self, script, args=None, check_mode=False):
        self.script = list(script)
        self.calls = []
        self.lines = []
        self.clock = Clock()
        self.action = make_action(plugin_mod, ARGS if args is None else args, self._execute_module, self.clock,
                                  check_mode=check_mode)
        self.action._say = lambda line: self.lines.append(line)

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, wrap_async=False, **kw):
        self.calls.append(dict(module_args))
        res, took = self.script.pop(0)
        self.clock.now += took
        return dict(res)

    def run(self):
        return self.action.run(task_vars={"inventory_hostname": "gpu-01"})


def test_a_model_in_place_costs_one_call_and_prints_nothing():
    h = Harness([({"changed": False, "pending": False, "jobs": {},
                   "models": [{"name": "m", "in_place": True, "action": "kept"}]}, 0.3)])
    res = h.run()
    assert len(h.calls) == 1 and h.lines == [] and res["steps"] == 1 and not res["changed"]
    assert h.calls[0] == dict(ARGS, _step_time=10.0)


def test_check_mode_is_one_call_without_the_step_protocol():
    h = Harness([({"changed": True, "pending": False, "models": [{"name": "m", "action": "would_fetch"}]}, 0.2)],
                check_mode=True)
    h.run()
    assert h.calls == [ARGS]


def test_steps_carry_the_jobs_print_a_line_at_least_every_30_s_and_merge_the_starting_action():
    started = {"name": "m", "in_place": False, "action": "fetched", "pid": 77}
    script = [({"changed": False, "pending": True, "jobs": {"m": "j1"}, "models": [started],
                "progress": progress("fetching", 10e6, 10.0)}, 10.0)]
    for i in range(2, 6):
        script.append(({"changed": False, "pending": True, "jobs": {"m": "j1"},
                        "models": [dict(started, action="attached")],
                        "progress": progress("fetching", 10e6 * i, 10.0 * i)}, 10.0))
    script.append(({"changed": True, "pending": False, "jobs": {"m": "j1"},
                    "models": [{"name": "m", "in_place": True, "action": "fetched", "summary": {"fetched": 3}}],
                    "progress": progress("done", 100e6, 55.0, rate=None, eta=0.0)}, 5.0))
    h = Harness(script)
    res = h.run()
    assert [c.get("_jobs") for c in h.calls] == [None] + [{"m": "j1"}] * 5
    assert res["changed"] and res["steps"] == 6 and res["models"][0]["pid"] == 77
    assert res["models"][0]["action"] == "fetched" and res["models"][0]["summary"] == {"fetched": 3}
    assert h.lines[0] == "gpu-01 | fetching m | 10.0 MB/100.0 MB, 1/3 files | 50.0 MB/s | 10s elapsed | ETA ~10s"
    assert h.lines[-1] == "gpu-01 | fetched m | 100.0 MB/100.0 MB, 1/3 files | 55s elapsed | done"
    assert 3 <= len(h.lines) <= 4


def test_a_failed_step_ends_the_task_with_its_result():
    h = Harness([({"changed": False, "pending": True, "jobs": {"m": "j1"}, "models": [],
                   "progress": progress("fetching", 1e6, 1.0)}, 10.0),
                 ({"failed": True, "msg": "fetch failed: m: config.json: ...", "models": []}, 1.0)])
    res = h.run()
    assert res["failed"] and res["msg"].startswith("fetch failed") and res["steps"] == 2


def test_the_clock_of_the_steps_is_the_base_class_s_and_an_instance_may_replace_it():
    import time

    # the base defines the clock its printer reads: a subclass without a clock of its own still prints progress
    assert plugin_mod.SteppedAction.__dict__["_clock"].__func__ is time.monotonic
    assert "_clock" not in plugin_mod.ActionModule.__dict__
    h = Harness([])
    assert h.action._printer("gpu-01", None).clock is h.clock
    plain = make_action(plugin_mod, ARGS, h._execute_module, h.clock)
    del plain._clock
    assert plain._printer("gpu-01", None).clock is time.monotonic
