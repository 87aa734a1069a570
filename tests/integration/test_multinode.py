"""A multi-node server: playbooks/serve_eagle3.yml and stop.yml on two "nodes" of this machine.

The nodes are two inventory hosts in group ``kimi_a`` (local connection, a prefix and a port each, the group vars of
inventory/local: real SGLang 0.5.23 files, the SGLang EMULATOR as the server) with ``sglang_server_nodes_group:
kimi_a``: node0 is rank 0, node1 rank 1, --dist-init-addr 127.0.0.1:<a free port>. The emulator speaks SGLang's
multi-node behaviour (tests/emulator/sglang_emulator/multinode.py): rank 0 waits at the dist-init address for the
other node, a real TCP rendezvous; a follower serves only a dummy health, ignores SIGTERM and ends with rank 0; a
follower that drops kills rank 0 as NCCL does; a follower that does not finish loading fails rank 0 at the load
barrier with SGLang's ValueError.

The tests share one converged pair (module scope) and each starts from what it reads; any one runs alone (``-k``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request

import pytest

from ansible_run import free_port, local_hosts, run_playbook, write_inventory

API_KEY = "local-rehearsal-key"  # inventory/local's sglang_server_api_key
NODES = ("node0", "node1")
GROUP = "kimi_a"
LAUNCH = "Launch SGLang and wait for health"
# A failed launch: the failure is printed once, by this task; the task that fails after it says only that.
SHOWN = "Show why the server did not come up"

pytestmark = pytest.mark.slow


def node_vars(prefix, port, dist_port, extra_command=(), **extra):
    command = ["{{ sglang_install_venv }}/bin/sglang-emulator", "--emulator-scenario", "{{ sglang_emulator_scenario }}",
               "--emulator-load-seconds", "1", "--emulator-capture-seconds", "0.2",
               "--emulator-barrier-seconds", "4"] + list(extra_command)
    return dict({"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "eagle_deploy_prefix": prefix, "sglang_server_port": port,
                 "sglang_server_nodes_group": GROUP, "sglang_server_dist_init_host": "127.0.0.1",
                 "sglang_server_dist_init_port": dist_port, "sglang_server_join_timeout": 20,
                 "sglang_server_tp_size": 2, "sglang_server_command": command,
                 "sglang_install_pip_extra_args": "--no-compile"}, **extra)


def http_status(url, key=None, timeout=5):
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def pair():
    workdir, nodes = local_hosts("multinode", NODES)
    dist_port = free_port()
    counter = [0]

    def inventory(**per_node):
        """An inventory of the pair; ``per_node``: {node: {var: value}} (``extra_command``: emulator flags)."""
        counter[0] += 1
        path = os.path.join(workdir, "inventory-%d" % counter[0])
        hosts = {}
        for name, n in nodes.items():
            extra = dict(per_node.get(name) or {})
            hosts[name] = node_vars(n["prefix"], n["port"], dist_port, **extra)
        write_inventory(path, {"children": {GROUP: {"hosts": hosts}}})
        return path

    play = run_playbook

    state = {"workdir": workdir, "nodes": nodes, "play": play, "inventory": inventory, "base": inventory()}
    try:
        yield state
    finally:
        stopped = play("stop.yml", state["base"])
        if stopped.rc == 0:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print("stop.yml failed, %s left in place: %r" % (workdir, stopped), file=sys.stderr)


def run_state(node):
    path = os.path.join(node["prefix"], "var/lib/eagle-deploy/run/sglang.json")
    try:
        with open(path) as handle:
            return json.load(handle)
    except OSError:
        return None


def log_text(node):
    with open(os.path.join(node["prefix"], "var/log/sglang/sglang.log"), errors="replace") as handle:
        return handle.read()


def converge(pair):
    """The pair serving (converged from whatever the last test left)."""
    run = pair["play"]("serve_eagle3.yml", pair["base"])
    assert run.rc == 0, run
    return run


def test_a_fresh_pair_converges_and_a_rerun_changes_nothing(pair):
    nodes = pair["nodes"]
    run = converge(pair)
    n0, n1 = nodes["node0"], nodes["node1"]
    assert http_status("http://127.0.0.1:%d/health_generate" % n0["port"], API_KEY) == 200
    assert http_status("http://127.0.0.1:%d/health_generate" % n1["port"]) == 200  # the follower's dummy
    with open(os.path.join(n1["prefix"], "etc/sglang/sglang.yaml")) as handle:
        config1 = handle.read()
    assert "node-rank: 1" in config1 and "nnodes: 2" in config1 and "dist-init-addr: \"127.0.0.1:" in config1
    for name in NODES:
        launch = run.result(name, LAUNCH)
        assert launch["nodes_group"] == {
            "node0": {"rank": 0, "state": "ready", "phase": "ready"},
            "node1": {"rank": 1, "state": "ready", "phase": "ready"}}, launch
    # rank 0 waited for node 1 (the rendezvous), then loaded; the smoke ran on rank 0 only
    assert "waiting at 127.0.0.1:" in log_text(n0) and "every node joined" in log_text(n0)
    assert [n for n, r in run.results("node1") if n == "Generate from a fixed prompt" and not r.get("skipped")] == []
    smoke0 = run.result("node0", "Generate from a fixed prompt")
    assert not smoke0.get("skipped") and not smoke0.get("failed"), smoke0
    pids = {name: run_state(n)["pid"] for name, n in nodes.items()}

    again = pair["play"]("serve_eagle3.yml", pair["base"])
    assert again.rc == 0, again
    assert {h: again.out["stats"][h]["changed"] for h in NODES} == {"node0": 0, "node1": 0}, again
    assert {name: run_state(n)["pid"] for name, n in nodes.items()} == pids


def test_a_change_on_node1_only_restarts_both(pair):
    nodes = pair["nodes"]
    converge(pair)
    pids = {name: run_state(n)["pid"] for name, n in nodes.items()}
    inv = pair["inventory"](node1={"sglang_server_environment": {"EAGLE_TEST_NODE1_ONLY": "x%d" % time.time_ns()}})
    check = pair["play"]("serve_eagle3.yml", inv, "--check")  # says so, and touches nothing
    assert check.rc == 0, check
    for name in NODES:
        assert check.result(name, LAUNCH)["changed"], name
        assert "would restart as a unit: rank 1 (node1)" in check.result(name, LAUNCH)["restart_reason"]
    assert {name: run_state(n)["pid"] for name, n in nodes.items()} == pids
    run = pair["play"]("serve_eagle3.yml", inv)
    assert run.rc == 0, run
    for name in NODES:
        assert run.result(name, LAUNCH)["changed"], name
    for name in NODES:  # both name the node whose change restarts the group, and the change
        reason = run.result(name, LAUNCH)["restart_reason"]
        assert "restarts as a unit: rank 1 (node1)" in reason and "environment" in reason, (name, reason)
    after = {name: run_state(n)["pid"] for name, n in nodes.items()}
    assert all(after[n] != pids[n] for n in NODES), (pids, after)
    assert not any(alive(p) for p in pids.values())
    assert http_status("http://127.0.0.1:%d/health_generate" % nodes["node0"]["port"], API_KEY) == 200
    # and back to the base settings (the other tests start from them): both restart again
    back = pair["play"]("serve_eagle3.yml", pair["base"])
    assert back.rc == 0 and all(back.result(n, LAUNCH)["changed"] for n in NODES), back


def test_different_settings_on_a_node_are_refused_before_anything_is_stopped(pair):
    nodes = pair["nodes"]
    converge(pair)
    pids = {name: run_state(n)["pid"] for name, n in nodes.items()}
    inv = pair["inventory"](node1={"sglang_server_context_length": 65536})
    run = pair["play"]("serve_eagle3.yml", inv)
    assert run.rc != 0, run
    msg = run.failures()
    assert "node1 differs in context-length" in msg["node0"] and "node1 differs in context-length" in msg["node1"], msg
    assert [n for n, r in run.results("node0") if n == LAUNCH] == []
    assert {name: run_state(n)["pid"] for name, n in nodes.items()} == pids
    assert all(alive(p) for p in pids.values())


def _failed_pair(pair, run, crash_words):
    """Both nodes failed in this run, rank 1 named on both, and no process of either node left."""
    assert run.rc != 0, run
    failures = run.failures()
    assert set(failures) >= set(NODES), failures
    for name in NODES:
        launch = run.result(name, LAUNCH)
        assert launch.get("failed_rank") == 1, (name, launch.get("msg"), launch.get("failed_rank"))
        shown = run.result(name, SHOWN)["msg"]
        assert any(word in shown for word in crash_words), (name, shown)
        assert "rank 1 (node1)" in shown
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [name for name, n in pair["nodes"].items()
                if run_state(n) and alive(run_state(n)["pid"])]
        if not left:
            break
        time.sleep(0.5)
    assert not left, "still running after the failure: %s" % left


def batches(run, play="Restart the replicas, a batch at a time"):
    """The hosts of each batch of a serial play, in order (the json callback starts a play entry for each batch)."""
    return [sorted({h for task in p["tasks"] for h in task["hosts"]}) for p in run.out["plays"]
            if p["play"]["name"] == play]


def test_a_rolling_restart_takes_the_pair_as_one_replica(pair):
    """No router: rolling_restart.yml only restarts, a batch at a time. Its serial counts replicas: at the default of 1
    replica a batch the pair restarts together, in one batch. A pair whose nodes are not next to each other in the
    play's host order is refused by the first play, before anything is touched."""
    nodes = pair["nodes"]
    converge(pair)
    pids = {name: run_state(n)["pid"] for name, n in nodes.items()}
    # a third replica of its own between the two nodes (it runs no server: the refusal comes before it is looked at)
    apart = os.path.join(pair["workdir"], "inventory-apart")
    hosts = {name: node_vars(n["prefix"], n["port"], 1) for name, n in nodes.items()}
    solo = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "eagle_deploy_prefix": os.path.join(pair["workdir"], "solo"), "sglang_server_port": free_port()}
    write_inventory(apart, {"hosts": {"node0": hosts["node0"], "solo": solo, "node1": hosts["node1"]}})
    with open(os.path.join(apart, "hosts.yml")) as handle:
        tree = json.load(handle)
    tree["all"]["children"][GROUP] = {"hosts": {"node0": None, "node1": None}}
    with open(os.path.join(apart, "hosts.yml"), "w") as handle:
        json.dump(tree, handle)
    refused = pair["play"]("rolling_restart.yml", apart)
    assert refused.rc != 0, refused
    assert ("multi-node server kimi_a: its nodes node0, node1 are not next to each other in the play's host order "
            "(node0, solo, node1)") in " ".join(refused.failures().values()), refused.failures()
    assert batches(refused) == []
    assert {name: run_state(n)["pid"] for name, n in nodes.items()} == pids
    assert all(alive(p) for p in pids.values())
    whole = pair["play"]("rolling_restart.yml", pair["base"])
    assert whole.rc == 0, whole
    assert batches(whole) == [["node0", "node1"]]
    for name in NODES:
        assert whole.result(name, LAUNCH)["changed"], name
    after = {name: run_state(n)["pid"] for name, n in nodes.items()}
    assert all(after[n] != pids[n] for n in NODES), (pids, after)
    assert http_status("http://127.0.0.1:%d/health_generate" % nodes["node0"]["port"], API_KEY) == 200


def test_rank1_dying_during_load_fails_the_group_at_once(pair):
    converge(pair)
    inv = pair["inventory"](node1={"extra_command": ["--emulator-load-seconds", "3"],
                                   "sglang_emulator_scenario": "crash_loading", "sglang_server_force_restart": True})
    start = time.monotonic()
    run = pair["play"]("serve_eagle3.yml", inv, "-e", "sglang_server_force_restart=true")
    _failed_pair(pair, run, ("cuda_oom", "OutOfMemoryError"))
    assert time.monotonic() - start < 120
    assert run.result("node1", LAUNCH)["crash_class"] == "cuda_oom"


def test_rank1_that_does_not_finish_loading_fails_rank0_at_the_barrier(pair):
    inv = pair["inventory"](node1={"extra_command": ["--emulator-load-seconds", "60"]})
    run = pair["play"]("serve_eagle3.yml", inv, "-e", "sglang_server_force_restart=true")
    assert run.rc != 0, run
    rank0 = run.result("node0", LAUNCH)
    assert rank0["crash_class"] == "load_barrier_timeout", rank0.get("msg")
    assert "other ranks that didn't finish loading" in rank0["traceback"][-1] or any(
        "didn't finish loading" in line for line in rank0.get("traceback") or [])
    rank1 = run.result("node1", LAUNCH)
    assert rank1.get("failed_rank") == 0 and "rank 0 (node0) failed" in rank1["msg"], rank1.get("msg")
    for name, n in pair["nodes"].items():
        state = run_state(n)
        assert not (state and alive(state["pid"])), name


def test_rank1_that_never_joins_fails_the_group_after_the_join_timeout(pair):
    inv = pair["inventory"](node1={"extra_command": ["--emulator-join-delay", "3600"]},
                            node0={"sglang_server_join_timeout": 8}, )
    inv_all = pair["inventory"](node0={"sglang_server_join_timeout": 8},
                                node1={"extra_command": ["--emulator-join-delay", "3600"],
                                       "sglang_server_join_timeout": 8})
    del inv
    run = pair["play"]("serve_eagle3.yml", inv_all, "-e", "sglang_server_force_restart=true")
    assert run.rc != 0, run
    assert set(run.failures()) == set(NODES), run
    for name in NODES:
        msg = run.result(name, SHOWN)["msg"]
        assert "never joined: rank 1 (node1)" in msg, (name, msg)
    for name, n in pair["nodes"].items():
        state = run_state(n)
        assert not (state and alive(state["pid"])), name


def test_stop_stops_both_rank0_first(pair):
    nodes = pair["nodes"]
    converge(pair)
    pids = {name: run_state(n)["pid"] for name, n in nodes.items()}
    run = pair["play"]("stop.yml", pair["base"])
    assert run.rc == 0, run
    first = run.result("node0", "Stop our server (rank 0 of a multi-node server first)")
    assert first["changed"] and run.result("node1", "Stop our server (rank 0 of a multi-node server first)")["skipped"]
    follower = run.result("node1", "Stop the other nodes of a multi-node server")
    assert not follower.get("skipped") and not follower.get("failed"), follower
    assert run.result("node0", "Stop the other nodes of a multi-node server")["skipped"]
    assert not any(alive(p) for p in pids.values())
    assert all(run_state(n) is None for n in nodes.values())


PUT_BACK = "Put the last good deployment back and wait for health"


def good_record(node):
    path = os.path.join(node["prefix"], "var/lib/eagle-deploy/run/sglang.good.json")
    with open(path) as handle:
        return json.load(handle)["deployments"]


def recorded_pair(pair):
    """The pair serving, its deployment recorded as good on both nodes with one generation (a smoke test that runs on
    the kept pair records it). {node: (fingerprint, pid)} and the generation."""
    run = pair["play"]("serve_eagle3.yml", pair["base"], "-e", "sglang_server_smoke_always=true")
    assert run.rc == 0, run
    for name in NODES:
        assert not run.result(name, "Record the deployment as good").get("failed"), name
    before = {name: (run_state(n)["fingerprint"], run_state(n)["pid"]) for name, n in pair["nodes"].items()}
    records = {name: good_record(n)[0] for name, n in pair["nodes"].items()}
    generation = records["node0"]["group"]
    assert generation.startswith(GROUP + "/") and records["node1"]["group"] == generation, records
    assert {name: r["fingerprint"] for name, r in records.items()} == {name: fp for name, (fp, _) in before.items()}
    return before, generation


def crash_on_node1(pair):
    return pair["inventory"](node1={"extra_command": ["--emulator-load-seconds", "3"],
                                    "sglang_emulator_scenario": "crash_loading"})


def test_a_group_that_crashes_while_loading_rolls_back_on_both_nodes(pair):
    """Issue 38: a group rolls back together. node1's new deployment crashes while loading; the group fails at once and
    both nodes go back to the good generation, launched together; rank 0 decodes."""
    nodes = pair["nodes"]
    before, generation = recorded_pair(pair)
    inv = crash_on_node1(pair)
    check = pair["play"]("serve_eagle3.yml", inv, "--check", "-e", "sglang_server_rollback=true")
    assert check.rc == 0, check
    for name in NODES:
        said = check.result(name, "Say what a failed start would roll back to")["msg"]
        assert "if this start fails: would roll back to %s" % before[name][0][:16] in said, (name, said)
        assert "(generation %s of every node)" % generation in said, (name, said)
    assert {name: (run_state(n)["fingerprint"], run_state(n)["pid"]) for name, n in nodes.items()} == before

    run = pair["play"]("serve_eagle3.yml", inv, "-e", "sglang_server_rollback=true")
    assert run.rc != 0, run
    assert run.result("node1", LAUNCH)["crash_class"] == "cuda_oom"
    failures = run.failures()
    assert set(failures) == set(NODES), failures
    for name in NODES:
        assert run.result(name, LAUNCH).get("failed_rank") == 1, name
        put_back = run.result(name, PUT_BACK)
        assert not put_back.get("failed") and put_back.get("nodes_group", {}).get("node1", {}).get("state") == "ready"
        msg = failures[name]
        assert msg.startswith("server sglang did not come up: why is shown just above; rolled back to %s"
                              % before[name][0][:16]), (name, msg)
        assert "(generation %s of every node), serving, pid " % generation in msg, (name, msg)
    after = {name: (run_state(n)["fingerprint"], run_state(n)["pid"]) for name, n in nodes.items()}
    for name in NODES:  # the good deployment again on each node, a new process
        assert after[name][0] == before[name][0] and after[name][1] != before[name][1], (name, before, after)
        assert alive(after[name][1]), name
    assert not any(alive(pid) for _, pid in before.values())
    # rank 0 decodes (its result is censored: the request carries the API key; "serving" above says it answered)
    assert not run.result("node0", "Decode on the rolled-back server").get("skipped")
    assert run.result("node1", "Decode on the rolled-back server").get("skipped")
    assert http_status("http://127.0.0.1:%d/health_generate" % nodes["node0"]["port"], API_KEY) == 200
    # the base inputs are the running deployment again: nothing to do
    again = pair["play"]("serve_eagle3.yml", pair["base"])
    assert again.rc == 0, again
    assert {h: again.out["stats"][h]["changed"] for h in NODES} == {"node0": 0, "node1": 0}, again


def test_a_group_whose_rank0_fails_its_smoke_test_rolls_back_on_both_nodes(pair):
    """Issue 38, the incident on a group: the new deployment (SGLang left unpatched on both nodes) loads and answers
    health, then rank 0 dies on its first decode; both nodes go back to the good generation together (the patched
    file put back from the record's copy), rank 0 decodes, and the run fails on both nodes naming rank 0's smoke test."""
    nodes = pair["nodes"]
    before, generation = recorded_pair(pair)
    incident = {"sglang_emulator_scenario": "eagle", "sglang_patch_enabled": False}
    run = pair["play"]("serve_eagle3.yml", pair["inventory"](node0=dict(incident), node1=dict(incident)),
                       "-e", "sglang_server_rollback=true")
    assert run.rc != 0, run
    failures = run.failures()
    assert set(failures) == set(NODES), failures
    shown = run.result("node0", "Show why the smoke test failed")["msg"]
    assert "crash class: " in shown and "early-init patch" in shown, shown
    for name in NODES:
        msg = " ".join(failures[name].split())
        assert msg.startswith("smoke test of sglang (multi-node server %s) failed on rank 0 (node0)" % GROUP), (name, msg)
        assert "rolled back to %s" % before[name][0][:16] in msg, (name, msg)
        assert "(generation %s of every node), serving, pid " % generation in msg, (name, msg)
    after = {name: (run_state(n)["fingerprint"], run_state(n)["pid"]) for name, n in nodes.items()}
    for name in NODES:  # the good deployment again on each node (its patched file back), a new process
        assert after[name][0] == before[name][0] and after[name][1] != before[name][1], (name, before, after)
        assert alive(after[name][1]), name
    assert http_status("http://127.0.0.1:%d/health_generate" % nodes["node0"]["port"], API_KEY) == 200
    # the base inputs (the patch on) are the running deployment again: nothing to do
    again = pair["play"]("serve_eagle3.yml", pair["base"])
    assert again.rc == 0, again
    assert {h: again.out["stats"][h]["changed"] for h in NODES} == {"node0": 0, "node1": 0}, again


def test_a_group_rolls_back_no_node_when_one_node_lacks_the_good_generation(pair):
    """All or nothing: node1's good record is gone; the group's crash is not answered on either node, and the message
    names node1."""
    nodes = pair["nodes"]
    before, generation = recorded_pair(pair)
    os.unlink(os.path.join(nodes["node1"]["prefix"], "var/lib/eagle-deploy/run/sglang.good.json"))
    run = pair["play"]("serve_eagle3.yml", crash_on_node1(pair), "-e", "sglang_server_rollback=true")
    assert run.rc != 0, run
    failures = run.failures()
    assert set(failures) == set(NODES), failures
    for name in NODES:
        assert ("not rolled back: node node1 (rank 1): holds no good deployment of generation %s" % generation
                in failures[name]), (name, failures[name])
        assert [n for n, r in run.results(name) if n == PUT_BACK] == [], name
        choice = run.result(name, "Choose the group's last good generation and put back its files on every node")
        assert choice["restored"] == [] and choice["deployment"] is None, (name, choice)
    for name, n in nodes.items():  # the group failed and stayed down: nothing was launched again
        state = run_state(n)
        assert not (state and alive(state["pid"])), name
    converge(pair)
