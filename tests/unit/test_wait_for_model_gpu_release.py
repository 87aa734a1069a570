"""wait_for_model's GPU release (gpu_release_below_mib, gpu_release_indices, gpu_release_timeout) on the harness's
fake clock: a restart stops our old server, waits until nvidia-smi's memory.used is below the figure on every
selected GPU, and only then launches; nvidia-smi is a fake (FakeSmi) that answers from the fake clock."""
from __future__ import annotations

import sys

from ansible.module_utils import sglang_gpus, sglang_plan
from module_harness import module_exits, record_self_as_server, run, stops, world  # noqa: F401 - fixtures

import pytest

pytestmark = pytest.mark.usefixtures("module_exits")

ARGV = [sys.executable, "-m", "sglang.launch_server", "--config", "/etc/sglang.yaml"]
HELD, FREE = 20995, 9


class FakeSmi(object):
    """nvidia-smi --query-gpu=index,memory.used: GPU i holds ``used(i, t)`` MiB at fake time t (seconds since the
    first query). Records each query with the time and what had been stopped and launched by then."""

    def __init__(self, world, stops, used, gpus=(0, 1), path="/usr/bin/nvidia-smi"):
        self.world, self.stops, self.used, self.gpus, self.path = world, stops, used, gpus, path
        self.message = ""
        self.queries = []

    def query(self, argument):
        assert argument == "--query-gpu=" + sglang_gpus.USED_QUERY, argument
        t0 = self.queries[0]["now"] if self.queries else self.world.now
        self.queries.append({"now": self.world.now, "stopped": list(self.stops), "spawned": len(self.world.spawned)})
        return "".join("%d, %d\n" % (i, self.used(i, self.world.now - t0)) for i in self.gpus)


def fingerprint(argv):
    return sglang_plan.fingerprint_of(sglang_plan.fingerprint_parts(argv, {}, [], {}, None))


def old_server(world):
    return record_self_as_server(world, fingerprint=fingerprint(ARGV),
                                 fingerprint_parts=sglang_plan.fingerprint_parts(ARGV, {}, [], {}, None))


def restart(world, smi, check_mode=False, **args):
    world.health = lambda t: 200
    params = dict(argv=ARGV + ["--changed"], run_as=None, gpu_release_below_mib=2048, gpu_release_timeout=10,
                  poll_interval=0.25)
    params.update(args)
    return run(world, check_mode=check_mode, inject={"gpu_smi": smi}, **params)


def test_a_restart_waits_for_the_release_before_the_launch(world, stops):  # noqa: F811
    state = old_server(world)
    # GPU 1 comes back after 1 s of fake time, GPU 0 at once
    smi = FakeSmi(world, stops, lambda i, t: HELD if i == 1 and t < 1.0 else FREE)
    status, r = restart(world, smi)
    assert status == "ok" and r["changed"] is True, r
    assert r["restart_reason"] == "fingerprint changed: argv"
    assert stops == [state["pid"]] and len(world.spawned) == 1
    # one query before the stop (nvidia-smi answers and lists the GPUs), then the wait after it
    assert smi.queries[0]["stopped"] == [] and all(q["stopped"] == [state["pid"]] for q in smi.queries[1:])
    assert all(q["spawned"] == 0 for q in smi.queries)  # nothing launched before the memory was back
    release = r["gpu_release"]
    assert release["below_mib"] == 2048 and release["polls"] == len(smi.queries) - 1 == 5
    assert release["seconds"] == pytest.approx(1.0)
    assert release["gpus"] == [{"index": 0, "memory_used_mib": FREE}, {"index": 1, "memory_used_mib": FREE}]


def test_only_the_selected_gpus_are_waited_for(world, stops):  # noqa: F811
    old_server(world)
    smi = FakeSmi(world, stops, lambda i, t: HELD if i == 1 else FREE)  # GPU 1 is someone else's: never free
    status, r = restart(world, smi, gpu_release_indices=[0])
    assert status == "ok" and len(world.spawned) == 1, r
    assert r["gpu_release"]["polls"] == 1 and r["gpu_release"]["seconds"] == 0.0
    assert r["gpu_release"]["gpus"] == [{"index": 0, "memory_used_mib": FREE}]


def test_the_timeout_fails_with_the_figures_and_launches_nothing(world, stops):  # noqa: F811
    state = old_server(world)
    smi = FakeSmi(world, stops, lambda i, t: HELD if i == 0 else FREE)
    status, r = restart(world, smi, gpu_release_timeout=3)
    assert status == "failed", r
    assert "GPU memory not below 2048 MiB 3.0 s after our old server was stopped: GPU 0: 20995 MiB used" in r["msg"]
    assert "GPU 1" not in r["msg"].split(";")[0]
    assert "our old server is stopped (PIDs %d), nothing was launched" % state["pid"] in r["msg"]
    assert stops == [state["pid"]] and world.spawned == []
    assert r["gpu_release"]["seconds"] == pytest.approx(3.0) and r["gpu_release"]["polls"] == 13
    assert r["stopped"]["signalled"] == [state["pid"]] and r["restart_reason"] == "fingerprint changed: argv"


def test_a_gpu_that_nvidia_smi_does_not_list_fails_before_the_stop(world, stops):  # noqa: F811
    old_server(world)
    smi = FakeSmi(world, stops, lambda i, t: FREE, gpus=(0,))
    status, r = restart(world, smi, gpu_release_indices=[0, 3])
    assert status == "failed" and "gpu_release_indices 3 not found: nvidia-smi lists 0" in r["msg"], r
    assert "Nothing was stopped or launched" in r["msg"]
    assert stops == [] and world.spawned == []


def test_missing_nvidia_smi_skips_the_wait_with_a_note(world, stops):  # noqa: F811
    state = old_server(world)
    smi = FakeSmi(world, stops, lambda i, t: HELD, path=None)
    status, r = restart(world, smi)
    assert status == "ok" and len(world.spawned) == 1 and stops == [state["pid"]], r
    assert smi.queries == []
    assert r["gpu_release"]["note"] == "nvidia-smi not found: no GPU memory to wait for"
    assert r["gpu_release"]["polls"] == 0


def test_no_release_option_no_query(world, stops):  # noqa: F811
    old_server(world)
    smi = FakeSmi(world, stops, lambda i, t: HELD)
    status, r = restart(world, smi, gpu_release_below_mib=None)
    assert status == "ok" and len(world.spawned) == 1 and smi.queries == [] and "gpu_release" not in r, r


def test_check_mode_neither_stops_nor_waits(world, stops):  # noqa: F811
    old_server(world)
    smi = FakeSmi(world, stops, lambda i, t: HELD)
    status, r = restart(world, smi, check_mode=True, prove_launch=True)
    assert status == "ok" and r["changed"] is True and r["restart_reason"] == "fingerprint changed: argv", r
    assert stops == [] and world.spawned == [] and smi.queries == [] and "gpu_release" not in r


def test_a_no_op_makes_no_nvidia_smi_query(world, stops):  # noqa: F811
    state = old_server(world)
    smi = FakeSmi(world, stops, lambda i, t: HELD)
    status, r = restart(world, smi, argv=ARGV)
    assert status == "ok" and r["changed"] is False and r["restart_reason"] is None, r
    assert r["pid"] == state["pid"] and stops == [] and world.spawned == [] and smi.queries == []
    assert "gpu_release" not in r


def test_a_fresh_start_makes_no_nvidia_smi_query(world, stops):  # noqa: F811
    smi = FakeSmi(world, stops, lambda i, t: HELD)
    status, r = restart(world, smi)
    assert status == "ok" and r["restart_reason"] == "not running" and len(world.spawned) == 1, r
    assert smi.queries == [] and "gpu_release" not in r


@pytest.mark.parametrize("args, word", [({"gpu_release_below_mib": 0}, "gpu_release_below_mib"),
                                         ({"gpu_release_timeout": -1}, "gpu_release_timeout"),
                                         ({"gpu_release_indices": [-1]}, "gpu_release_indices")])
def test_bad_release_options_are_refused_before_anything(world, stops, args, word):  # noqa: F811
    old_server(world)
    smi = FakeSmi(world, stops, lambda i, t: FREE)
    status, r = restart(world, smi, **args)
    assert status == "failed" and word in r["msg"], r
    assert stops == [] and world.spawned == [] and smi.queries == []


def test_parse_used_reads_index_and_memory_used():
    assert sglang_gpus.parse_used("0, 20995\n1, [N/A]\n") == [{"index": 0, "memory_used_mib": 20995},
                                                              {"index": 1, "memory_used_mib": None}]
    with pytest.raises(ValueError):
        sglang_gpus.parse_used("0, GPU-x, 20995\n")
