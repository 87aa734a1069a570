"""A multi-node server joined on the controller: module_utils/sglang_join's decisions and board, and the
wait_for_model action plugin's join (a fake _execute_module and clock; the other node's words are written into the
board by the test, as its own plugin would). Nothing runs or sleeps."""
from __future__ import annotations

import os
from unittest import mock

import pytest

from action_harness import Clock, load_plugin, make_action
from ansible.module_utils import sglang_join as sj

plugin_mod = load_plugin("wait_for_model", "eagle_action_wait_for_model_join")

NODES = ["node-0", "node-1"]
ARGS = {"name": "sglang", "argv": ["serve"], "log_dir": "/var/log/x", "run_dir": "/var/lib/r", "launcher": "detached",
        "stop_timeout": 30, "state": "started"}


# ------------------------------------------------------------------ decisions
def word(state, **kw):
    return dict(kw, round=1, state=state)


def test_the_spec_names_what_is_wrong():
    ok = sj.check_spec({"group": "kimi_a", "nodes": NODES, "rank": 1, "timeout": 60}, "node-1")
    assert ok == {"group": "kimi_a", "nodes": NODES, "rank": 1, "timeout": 60.0, "step_time": 2.0}
    for bad, words in [({"group": "g", "nodes": ["a"], "rank": 0}, "at least two"),
                       ({"group": "g", "nodes": NODES, "rank": 0}, "does not name this host"),
                       ({"group": "g", "nodes": ["node-1", "node-1"], "rank": 0}, "twice"),
                       ({"group": "g", "nodes": NODES, "rank": 1, "timeout": 0}, "join.timeout"),
                       ({"group": "g", "nodes": NODES, "rank": 1, "bogus": 1}, "unknown keys bogus")]:
        with pytest.raises(sj.JoinError, match=words):
            sj.check_spec(bad, "node-1")


def test_the_first_failure_is_named_and_an_nccl_error_is_read_as_a_consequence():
    nodes = ["n0", "n1", "n2"]
    words = {"n0": word("failed", failed_at=5.0, failure={"crash_class": "nccl"}),
             "n1": word("failed", failed_at=6.0, failure={"crash_class": "cuda_oom"}),
             "n2": word("pending", phase="ready")}
    assert sj.group_failure(words, nodes)[:2] == ("n1", 1)
    words["n1"] = word("pending")
    assert sj.group_failure(words, nodes)[:2] == ("n0", 0)  # no other failure: the NCCL one is named
    words["n0"] = word("stopped")
    assert sj.group_failure(words, nodes) is None


def test_never_joined_names_the_followers_and_rank0_only_when_it_alone_is_missing():
    words = {"n0": word("pending", phase="launching"), "n1": word("pending", phase="loading_weights"),
             "n2": None}
    assert sj.never_joined(words, ["n0", "n1", "n2"]) == [("n2", 2)]  # rank 0 waits for n2 at the rendezvous
    words["n2"] = word("ready")
    assert sj.never_joined(words, ["n0", "n1", "n2"]) == [("n0", 0)]
    words["n0"] = word("pending", phase="kv_cache")
    assert sj.never_joined(words, ["n0", "n1", "n2"]) == []


def test_a_restart_on_any_node_is_found_with_its_reason():
    words = {"node-0": word("planned", restart=False), "node-1": word("planned", restart=True, reason="fingerprint changed: environment")}
    assert sj.all_planned(words)
    assert sj.restart_needed(words, NODES) == ("node-1", 1, "fingerprint changed: environment")
    words["node-1"] = word("planned", restart=False)
    assert sj.restart_needed(words, NODES) is None
    assert not sj.all_planned({"node-0": word("planned", restart=False), "node-1": None})


def test_a_board_counts_only_the_words_of_the_same_round(tmp_path):
    board = sj.Board(str(tmp_path), "join-x.json", clock=lambda: 1.0)
    assert board.begin("node-0", 0) == 1
    board.put("node-0", state="ready")
    assert board.begin("node-1", 1) == 1
    assert sj.current(board.read(), NODES, 1)["node-0"]["state"] == "ready"
    assert board.begin("node-0", 0) == 2  # a second launch of the same task in one run: a new round
    assert sj.current(board.read(), NODES, 2) == {"node-0": mock.ANY, "node-1": None}


def test_the_board_directory_must_be_private(tmp_path):
    d = sj.board_dir(str(tmp_path))
    assert oct(os.stat(d).st_mode & 0o777) == "0o700"
    os.chmod(d, 0o770)
    with pytest.raises(sj.JoinError, match="not a private directory"):
        sj.board_dir(str(tmp_path))
    os.chmod(d, 0o700)
    os.rename(d, d + ".real")
    os.symlink(d + ".real", d)
    with pytest.raises(sj.JoinError, match="not a private directory"):
        sj.board_dir(str(tmp_path))


def test_board_names_differ_by_task_group_and_run():
    a = sj.board_name("uuid-1", "kimi_a", NODES, 100)
    assert a == sj.board_name("uuid-1", "kimi_a", list(reversed(NODES)), 100)
    assert len({a, sj.board_name("uuid-2", "kimi_a", NODES, 100), sj.board_name("uuid-1", "kimi_b", NODES, 100),
                sj.board_name("uuid-1", "kimi_a", NODES, 101)}) == 4


# ------------------------------------------------------------------ the plugin's join

class Node(object):
    """The action plugin of one node; the module answers from ``script`` (a list of (result, seconds)); ``peer``
    is called at every fake sleep and module call with the board (the other node's plugin)."""

    def __init__(self, tmp_path, script, rank=0, peer=None, batch=None, timeout=60):
        self.script = list(script)
        self.calls = []
        self.clock = Clock()
        self.peer = peer or (lambda board, now: None)
        args = dict(ARGS, join={"group": "kimi_a", "nodes": NODES, "rank": rank, "timeout": timeout, "step_time": 2})
        self.action = make_action(plugin_mod, args, self._execute_module, self.clock, _uuid="task-uuid")
        self.action._wall = self.clock
        self.action._sleep = self._sleep
        self.action._say = lambda line: None
        self.action._board_base = str(tmp_path)
        self.host = NODES[rank]
        self.task_vars = {"inventory_hostname": self.host, "ansible_play_batch": NODES if batch is None else batch}
        self.board = sj.Board(sj.board_dir(str(tmp_path)), sj.board_name("task-uuid", "kimi_a", NODES, os.getppid()),
                              clock=self.clock)

    def _sleep(self, seconds):
        self.clock.now += seconds
        self.peer(self.board, self.clock.now)

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, wrap_async=False, **kw):
        self.calls.append({"args": dict(module_args), "check": self.action._task.check_mode})
        if module_args.get("state") == "stopped":
            return {"changed": True, "msg": "stopped"}
        assert self.script, "more module calls than scripted: %s" % self.calls
        res, took = self.script.pop(0)
        self.clock.now += took
        self.peer(self.board, self.clock.now)
        return dict(res)

    def run(self):
        return self.action.run(task_vars=self.task_vars)


KEEP = ({"changed": False}, 0.5)
RESTART_PLAN = ({"changed": True, "restart_reason": "fingerprint changed: environment"}, 0.5)
READY = ({"changed": True, "pending": False, "pid": 42, "progress": {"phase": "ready", "attempt": 2}}, 1.0)


def pending(phase="loading_weights"):
    return {"changed": True, "pending": True, "progress": {"phase": phase, "attempt": 2}}, 2.0


def follower(*words):
    """The other node (rank 1) writing ``words`` in order, one per look of this node."""
    todo = list(words)

    def peer(board, now):
        if todo:
            w = todo.pop(0)
            if w == "begin":
                board.begin("node-1", 1)
            else:
                board.put("node-1", **w)
    return peer


def test_a_node_not_in_this_run_fails_before_any_module_call(tmp_path):
    n = Node(tmp_path, [], batch=["node-0"])
    res = n.run()
    assert res["failed"] and n.calls == []
    assert "rank 1 (node-1) not in this run" in res["msg"] and "nothing was stopped or launched" in res["msg"]


def test_the_group_is_ok_once_every_node_is_ready(tmp_path):
    n = Node(tmp_path, [KEEP, pending(), READY],
             peer=follower("begin", {"state": "planned", "restart": False}, {"state": "pending", "phase": "kv_cache"},
                           {"state": "ready", "phase": "ready"}))
    res = n.run()
    assert not res.get("failed"), res
    assert [c["check"] for c in n.calls] == [True, False, False]  # the plan, then the launch's steps
    assert n.calls[1]["args"]["_step_time"] == 2 and "force_restart" not in n.calls[1]["args"]
    assert res["nodes_group"]["node-1"] == {"rank": 1, "state": "ready", "phase": "ready"}


def test_a_change_on_the_other_node_restarts_this_one(tmp_path):
    n = Node(tmp_path, [KEEP, READY],
             peer=follower("begin", {"state": "planned", "restart": True, "reason": "fingerprint changed: environment"},
                           {"state": "ready"}))
    res = n.run()
    assert n.calls[1]["args"]["force_restart"] is True
    assert "restarts as a unit: rank 1 (node-1): fingerprint changed: environment" in res["restart_reason"]


def test_the_other_node_failing_stops_this_one_and_names_it(tmp_path):
    failure = {"msg": "the server crashed", "crash_class": "cuda_oom", "crash_exception": "torch.OutOfMemoryError"}
    n = Node(tmp_path, [RESTART_PLAN, pending(), pending()],
             peer=follower("begin", {"state": "planned", "restart": True}, {"state": "pending", "phase": "launching"},
                           {"state": "failed", "failure": failure, "failed_at": 1003.0}))
    res = n.run()
    assert res["failed"] and res["failed_rank"] == 1 and res["group_failure"] == failure
    assert "rank 1 (node-1) failed: the server crashed [crash class cuda_oom: torch.OutOfMemoryError]" in res["msg"]
    assert "rank 0 (node-0) was stopped" in res["msg"]
    assert n.calls[-1]["args"] == {"name": "sglang", "run_dir": "/var/lib/r", "log_dir": "/var/log/x",
                                   "launcher": "detached", "stop_timeout": 30, "state": "stopped"}
    assert sj.current(n.board.read(), NODES, 1)["node-0"]["state"] == "stopped"


def test_a_follower_is_stopped_when_rank0_fails(tmp_path):
    failure = {"msg": "barrier", "crash_class": "load_barrier_timeout"}
    seen = []

    def rank0(board, now):
        if not seen:
            board.begin("node-0", 0)
            board.put("node-0", state="planned", restart=True)
        elif len(seen) == 2:
            board.put("node-0", state="failed", failure=failure, failed_at=now)
        seen.append(now)
    n = Node(tmp_path, [RESTART_PLAN, pending(), pending()], rank=1, peer=rank0)
    res = n.run()
    assert res["failed"] and res["failed_rank"] == 0 and "rank 0 (node-0) failed: barrier" in res["msg"]
    assert n.calls[-1]["args"]["state"] == "stopped" and len(n.calls) == 4


def test_a_node_that_never_joins_fails_the_group_after_the_timeout(tmp_path):
    n = Node(tmp_path, [RESTART_PLAN] + [pending("launching")] * 20, timeout=10,
             peer=follower("begin", {"state": "planned", "restart": True}, {"state": "pending", "phase": "launching"}))
    res = n.run()
    assert res["failed"] and "never joined: rank 1 (node-1)" in res["msg"]
    assert n.calls[-1]["args"]["state"] == "stopped"
    steps = [c for c in n.calls if not c["check"] and c["args"].get("state") != "stopped"]
    assert 4 <= len(steps) <= 7  # 2 s steps until 10 s past the launch


def test_a_node_that_never_reaches_the_task_fails_the_others_without_a_launch(tmp_path):
    n = Node(tmp_path, [KEEP], timeout=3)
    res = n.run()
    assert res["failed"] and "never joined: rank 1 (node-1) did not reach the launch within 3 s" in res["msg"]
    assert "launched nothing" in res["msg"] and all(c["check"] for c in n.calls)


def test_this_nodes_nccl_error_names_the_other_nodes_earlier_failure(tmp_path):
    own = {"failed": True, "msg": "server crashed", "crash_class": "nccl"}
    other = {"msg": "scheduler died", "crash_class": "killed"}
    n = Node(tmp_path, [RESTART_PLAN, (own, 1.0)],
             peer=follower("begin", {"state": "planned", "restart": True},
                           {"state": "failed", "failure": other, "failed_at": 999.0}))
    res = n.run()
    assert res["failed"] and res["crash_class"] == "nccl" and res["failed_rank"] == 1
    assert "first failure in the group: rank 1 (node-1) failed: scheduler died [crash class killed]" in res["msg"]


def test_this_nodes_nccl_error_waits_for_a_slow_peer_that_is_still_in_its_step(tmp_path):
    """The peer's own crash reaches the board 12 s after this node's NCCL error (its step stopped its tree first):
    this node still names the peer, because the peer had not had its say since the error."""
    own = {"failed": True, "msg": "server crashed", "crash_class": "nccl"}
    other = {"msg": "the server crashed", "crash_class": "cuda_oom"}
    state = {}

    def peer(board, now):
        if not state:
            board.begin("node-1", 1)
            board.put("node-1", state="planned", restart=True)
            state["pending"] = now
            board.put("node-1", state="pending", phase="loading_weights")
        elif now >= 1012.0 and "failed" not in state:
            state["failed"] = now
            board.put("node-1", state="failed", failure=other, failed_at=now)
    n = Node(tmp_path, [RESTART_PLAN, (own, 0.5)], peer=peer)
    n.clock.now = 1000.0
    res = n.run()
    assert res["failed"] and res["failed_rank"] == 1 and res["group_failure"] == other, res["msg"]
    assert "first failure in the group: rank 1 (node-1) failed: the server crashed [crash class cuda_oom]" in res["msg"]


def test_this_nodes_nccl_error_is_its_own_once_the_peer_has_reported_a_step_without_failure(tmp_path):
    own = {"failed": True, "msg": "server crashed", "crash_class": "nccl"}
    state = {"n": 0}

    def peer(board, now):
        state["n"] += 1
        if state["n"] == 1:
            board.begin("node-1", 1)
            board.put("node-1", state="planned", restart=True)
        elif state["n"] == 6:  # its step ended after this node's failure: its server was alive
            board.put("node-1", state="pending", phase="loading_weights")
    n = Node(tmp_path, [RESTART_PLAN, (own, 0.5)], peer=peer)
    res = n.run()
    assert res["failed"] and res["failed_rank"] == 0 and "group_failure" not in res
    assert "first failure" not in res["msg"]
    assert n.clock.now - 1000.0 < 5.0, n.clock.now  # no longer than the peer took to have its say


def test_this_nodes_nccl_error_is_its_own_after_a_step_and_a_stop_when_the_peer_says_nothing(tmp_path):
    own = {"failed": True, "msg": "server crashed", "crash_class": "nccl"}
    n = Node(tmp_path, [RESTART_PLAN, (own, 0.5)],
             peer=follower("begin", {"state": "planned", "restart": True}))
    start = n.clock.now
    res = n.run()
    assert res["failed"] and res["failed_rank"] == 0
    waited = n.clock.now - start
    assert 2 + 30 + plugin_mod.CONSEQUENCE_SLACK <= waited <= 2 + 30 + plugin_mod.CONSEQUENCE_SLACK + 2, waited


def test_heard_since_counts_a_final_word_or_a_later_one():
    words = {"n0": word("failed", at=10.0), "n1": word("pending", at=9.0), "n2": word("stopped", at=1.0)}
    assert not sj.heard_since(words, ["n0", "n1", "n2"], "n0", 10.0)
    words["n1"] = word("pending", at=10.5)
    assert sj.heard_since(words, ["n0", "n1", "n2"], "n0", 10.0)
    words["n1"] = None
    assert not sj.heard_since(words, ["n0", "n1", "n2"], "n0", 10.0)


def test_text_from_a_host_is_escaped_in_the_message(tmp_path):
    failure = {"msg": "bad\x1b[31m line\nforged", "crash_class": "python_exception"}
    n = Node(tmp_path, [RESTART_PLAN, pending()],
             peer=follower("begin", {"state": "planned", "restart": True},
                           {"state": "failed", "failure": failure, "failed_at": 1001.0}))
    res = n.run()
    assert "\x1b" not in res["msg"] and "\n" not in res["msg"] and "\\x1b[31m" in res["msg"]


def test_check_mode_joins_the_plans_only(tmp_path):
    n = Node(tmp_path, [KEEP],
             peer=follower("begin", {"state": "planned", "restart": True, "reason": "fingerprint changed: environment"}))
    n.action._task.check_mode = True
    res = n.run()
    assert [c["check"] for c in n.calls] == [True]  # one call, in check mode: nothing launched or stopped
    assert res["changed"] is True and not res.get("failed")
    assert "would restart as a unit: rank 1 (node-1): fingerprint changed: environment" in res["restart_reason"]


def test_check_mode_of_a_group_that_keeps_changes_nothing(tmp_path):
    n = Node(tmp_path, [KEEP], peer=follower("begin", {"state": "planned", "restart": False}))
    n.action._task.check_mode = True
    res = n.run()
    assert len(n.calls) == 1 and res["changed"] is False and "restart_reason" not in res
