# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of the ``wait_for_model`` module: live progress on the controller while a server loads.

A ``state: started`` task calls the module in steps of ``step_time`` seconds (10 by default; a task argument of
this plugin's): each step waits on the host at most that long and answers ``pending: true`` while the server still
loads, and ends as soon as the supervisor's status file holds its verdict (a later step sends no health request of
its own before it: a dying server may hold one for its whole timeout); the next step carries the previous step's
``progress.attempt`` and continues the same wait, so crash detection and deadlines stay those of one long wait (and
``force_restart`` goes only to the first step: the later ones wait for the load it started). Between steps a line per host is printed, with
no ``-v`` needed, at every phase change and at least every 30 s::

    blackwell-01 | loading weights 41/64 shards | 4m12s elapsed | ETA ~2m50s (last load 9m58s)

The lines go to stdout, or to stderr when the stdout callback writes JSON (its output stays parseable).

What the task gets back is the steps merged: ``changed`` when any step changed, ``restart_reason`` of the
step that (re)started the server, everything else from the final step, plus ``steps`` (the number of module
calls). A step that fails ends the task with that step's result.

One module call, as without this plugin: a no-op (the first step answers with a verdict: the server was
running, healthy and unchanged), check mode, an async task, ``state`` other than ``started``, and the task
argument ``progress: false``. ``progress`` and ``step_time`` are the plugin's own task arguments; the module gets the
step protocol as ``_step_time`` and ``_resume_attempt``, which are no user options of the module.

A multi-node server (the task argument ``join``: ``{group, nodes, rank, timeout, step_time}``, documented with the
module) is joined on the controller through a board (``module_utils/sglang_join.py``): every node of the group must
be in this run; each node first asks its module in check mode whether it would restart, and when any node would, every
node restarts (``force_restart``); then the steps run, each node's word on the board between them. The task ends
``ok`` on every node only when every node is ready (rank 0: its ``/health_generate``; a follower: its own load done).
When a node fails (its crash, the load barrier, a node that never joins within ``timeout``), every other node is
stopped (rank 0 first: a follower waits up to ``FOLLOWER_WAIT`` s for rank 0's stop) and fails naming that node. A
node whose own crash is an NCCL error (``sglang_join.CONSEQUENCE_CLASSES``: what a peer's death does to the others)
names the group's first other failure: it waits until every other node has had its say after its error, at most a
step, a stop and ``CONSEQUENCE_SLACK`` s.
"""
from __future__ import annotations

import collections
import os
import time

from ansible_collections.eagle.deploy.plugins.module_utils import sglang_join, sglang_progress, sglang_result_text
from ansible_collections.eagle.deploy.plugins.plugin_utils.sglang_action_steps import SteppedAction, merge_messages

FOLLOWER_WAIT = 30.0  # a follower stopped after another node's failure waits this long for rank 0's stop first
CONSEQUENCE_SLACK = 5.0  # beyond a step and a stop, for another node's word after this node's NCCL error
BOARD_POLL = 0.25  # seconds between two reads of the board while this node waits on the others


class ActionModule(SteppedAction):

    STEP_TIME_MAY_BE_ZERO = True

    # seams for the unit tests (the fake clock is the base's _clock; the sleep; the board's clock and directory)
    _sleep = staticmethod(time.sleep)
    _wall = staticmethod(time.time)
    _board_base = None

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        join = args.pop("join", None)
        progress, step_time = self._step_options(args)
        check = self._checking()
        started = args.get("state", "started") == "started"
        stepping = progress and not self._task.async_val and not check and started
        if join and check and not self._task.async_val and started:
            # check mode of a multi-node server: every node's plan, joined (a change on one node restarts them all)
            try:
                result.update(self._joined(args, task_vars, self._host(task_vars), join, plan_only=True))
            finally:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return self._with_text(result, args)
        if not stepping:
            result.update(self._one_call(args, task_vars))
            return result if self._task.async_val else self._with_text(result, args)
        args["_step_time"] = step_time
        host = self._host(task_vars)
        try:
            if join:
                result.update(self._joined(args, task_vars, host, join))
            else:
                result.update(self._steps(args, task_vars, host))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return self._with_text(result, args)

    @staticmethod
    def _with_text(result, args):
        """A ``state: started`` result with what the operator reads of it (``sglang_result_text``): ``summary`` or
        ``failure_message`` (a failed ``state: watched`` one too: the smoke test's rescue prints it), composed once
        here, after the steps are merged. The deployment's name and log dir are the module's own arguments (its
        ``invocation``, module_defaults applied), else the task's."""
        state = args.get("state", "started")
        if state not in ("started", "watched") or (state == "watched" and not result.get("failed")):
            return result
        module_args = (result.get("invocation") or {}).get("module_args") or args
        name = module_args.get("name") or "sglang"
        log_dir = module_args.get("log_dir")
        default_log = "%s/%s.log" % (log_dir, name) if log_dir else "-"
        return sglang_result_text.add_text(result, name, default_log)

    def _steps(self, args, task_vars, host, watch=None):
        """The module in steps until it answers with a verdict. ``watch(res, steps, pending)``, when given (a
        multi-node server's join), is called after every step: a dict it returns ends the steps as the task's result."""
        printer = self._printer(host, sglang_progress.progress_line)
        steps = []
        limit = self._limit(args)
        started = self._clock()
        while True:
            t0 = self._clock()
            res = self._execute_module(module_args=args, task_vars=task_vars)
            steps.append(res)
            pending = bool(res.get("pending")) and not res.get("failed")
            printer.step(res, self._clock() - t0, final=not pending, first=len(steps) == 1)
            ended = watch(res, steps, pending) if watch is not None else None
            if ended is not None:
                return ended
            if not pending:
                return _merge(steps)
            if self._clock() - started > limit:
                out = _merge(steps)
                out.update(failed=True, msg="wait_for_model still answered pending after %d s of steps, past its "
                                            "timeout; the server keeps loading, nothing was stopped" % limit)
                return out
            attempt = (res.get("progress") or {}).get("attempt")
            args = dict(args)
            if args.get("force_restart"):
                args["force_restart"] = False  # the first step restarted; the next ones go on with that load
            if isinstance(attempt, int) and not isinstance(attempt, bool):
                args["_resume_attempt"] = attempt
            else:
                args.pop("_resume_attempt", None)

    # -- a multi-node server: GroupLaunch ---------------------------------------------------------------------------
    def _joined(self, args, task_vars, host, join, plan_only=False):
        port = ActionPort(clock=self._clock, sleep=self._sleep, wall=self._wall, board_base=self._board_base,
                          task=self._task, call=lambda module_args: self._execute_module(
                              module_args=module_args, task_vars=task_vars),
                          limit=self._limit, steps=self._steps)
        return GroupLaunch(port, args, task_vars, host).run(join, plan_only=plan_only)

    @staticmethod
    def _limit(args):
        """How long steps may go on answering pending: the module's own timeout and then some (its deadlines
        end the wait; this only ends a loop the module would never end)."""
        try:
            timeout = float(args.get("timeout", 1800))
        except (TypeError, ValueError):
            timeout = 1800.0
        return max(timeout, 0.0) + 600.0


# What only the step that started (or put back) a detached supervisor, or stopped our old server and waited for its
# GPU memory, returns: a later step, which waits on the new server, does not know it.
FROM_THE_STARTING_STEP = ("supervisor_pid", "supervisor", "tree_tracking_note", "stopped", "gpu_release")


def _merge(steps):
    """The steps' results as one: the final step's, with ``changed`` of any step, ``restart_reason`` of the step
    that (re)started the server, ``FROM_THE_STARTING_STEP`` of an earlier step where the final one has none, the
    steps' warnings and deprecations, and ``steps``."""
    out = dict(steps[-1])
    out["changed"] = any(bool(s.get("changed")) for s in steps)
    for s in steps:
        if s.get("changed") and s.get("restart_reason") is not None:
            out["restart_reason"] = s["restart_reason"]
            break
    for key in FROM_THE_STARTING_STEP:
        for s in reversed(steps[:-1]):
            if key not in out and key in s:
                out[key] = s[key]
    merge_messages(steps, out)
    out["steps"] = len(steps)
    return out


ActionPort = collections.namedtuple("ActionPort", "clock sleep wall board_base task call limit steps")
ActionPort.__doc__ = ("What a GroupLaunch uses of its ActionModule: clock, sleep, wall, the board's base directory, the "
                      "task, call(module_args) (the module, once), limit(args) and steps(args, task_vars, host, watch)")


class GroupLaunch(object):
    """One node's launch of a multi-node server, joined on the controller through a board (``sglang_join``; the
    module's docstring above tells the protocol): the plan (would any node restart?), the launch in steps with the
    board read between them, then the wait until every node is ready; a node's failure stops the others.
    ``action`` is its ActionPort: the module call, the clocks, the board directory and the steps of the
    ActionModule, each under a public name (GroupLaunch reaches into nothing of the ActionModule)."""

    def __init__(self, action, args, task_vars, host):
        self.action, self.args, self.task_vars, self.host = action, args, task_vars, host
        self.sj = sglang_join
        self.text = sglang_progress.operator_text
        self.steps = []

    def run(self, join, plan_only=False):
        sj = self.sj
        try:
            spec = sj.check_spec(join, self.host)
            directory = sj.board_dir(self.action.board_base)
        except sj.JoinError as e:
            return {"failed": True, "msg": "join: %s. Nothing was stopped or launched." % e}
        self.nodes, self.rank, self.group = spec["nodes"], spec["rank"], spec["group"]
        self.step_time, self.timeout = spec["step_time"], spec["timeout"]
        here = set(self.task_vars.get("ansible_play_batch") or self.task_vars.get("ansible_play_hosts") or [self.host])
        away = [(n, i) for i, n in enumerate(self.nodes) if n not in here]
        if away:
            return {"failed": True, "msg": self.text(
                "multi-node server %s: %s not in this run (failed or unreachable before the launch, or left out by "
                "--limit / serial): nothing was stopped or launched on rank %d (%s); run the group's hosts together"
                % (self.group, ", ".join("rank %d (%s)" % (i, n) for n, i in away), self.rank, self.host))}
        name = sj.board_name(getattr(self.action.task, "_uuid", ""), self.group, self.nodes, os.getppid())
        sj.sweep(directory, self.action.wall(), keep=(name, name + ".lock"))
        self.board = sj.Board(directory, name, clock=self.action.wall)
        self.round = self.board.begin(self.host, self.rank)
        ended, plan, words = self._plan()
        if ended is not None:
            return ended
        why = sj.restart_needed(words, self.nodes)
        if plan_only:  # check mode: what every node would do, the group's restart included
            out = dict(plan)
            if why is not None:
                out["changed"] = True
                out["restart_reason"] = self.text("the multi-node server %s would restart as a unit: rank %d (%s): %s"
                                                  % (self.group, why[1], why[0], why[2]))
            out["nodes_group"] = self._group_view(words)
            return out
        self.args = dict(self.args, _step_time=self.step_time)
        if why is not None and not plan.get("changed"):
            self.args["force_restart"] = True  # the group restarts as a unit
        return self._launch(why)

    def _words(self):
        return self.sj.current(self.board.read(), self.nodes, self.round)

    def _plan(self):
        """1. the plan: would this node restart? (the module in check mode: it reads, it never acts), then every
        node's. (result that ends the task or None, this node's plan, the board's words)."""
        sj = self.sj
        deadline = self.action.clock() + self.timeout
        plan = self._check_mode_call()
        if plan.get("failed"):
            self.board.put(self.host, state="failed", failure=sj.summary_of(plan), failed_at=self.action.wall())
            return self._node_failed(plan), plan, None
        self.board.put(self.host, state="planned", restart=bool(plan.get("changed")),
                       reason=plan.get("restart_reason") or ("would restart" if plan.get("changed") else None))
        while True:
            words = self._words()
            if sj.group_failure(words, self.nodes):
                return self._peer_failed(words, launched=False), plan, words
            if sj.all_planned(words):
                return None, plan, words
            if self.action.clock() > deadline:
                missing = [(n, i) for i, n in enumerate(self.nodes) if words.get(n) is None]
                return self._give_up("never joined: %s did not reach the launch within %d s" % (
                    ", ".join("rank %d (%s)" % (i, n) for n, i in missing), self.timeout), launched=False), plan, words
            self.action.sleep(BOARD_POLL)

    def _check_mode_call(self):
        """The module in check mode (its plan: keep or restart), whatever the task's own mode."""
        task = self.action.task
        was = task.check_mode
        task.check_mode = True
        try:
            return self.action.call(dict(self.args))
        finally:
            task.check_mode = was

    def _launch(self, why):
        """2. the launch, in steps, the board read between them (``_watch``); 3. this node is ready: the group is,
        once every node is."""
        sj = self.sj
        self.started = self.action.clock()
        self.deadline = self.started + self.timeout
        self.limit = self.action.limit(self.args)
        ended = self.action.steps(self.args, self.task_vars, self.host, watch=self._watch)
        if ended.get("failed"):
            return ended
        while True:
            words = self._words()
            if sj.group_failure(words, self.nodes):
                return self._peer_failed(words, launched=True)
            if sj.all_ready(words):
                out = _merge(self.steps)
                if why is not None and out.get("changed"):
                    out["restart_reason"] = self.text("the multi-node server %s restarts as a unit: rank %d (%s): %s"
                                                      % (self.group, why[1], why[0], why[2]))
                out["nodes_group"] = self._group_view(words)
                return out
            never = sj.never_joined(words, self.nodes)
            if self.action.clock() - self.started > self.limit or (self.action.clock() > self.deadline and never):
                missing = never or [(n, i) for i, n in enumerate(self.nodes)
                                    if (words.get(n) or {}).get("state") != "ready"]
                return self._give_up("%s not ready: %s" % (
                    "never joined" if never else "the group is",
                    ", ".join("rank %d (%s)" % (i, n) for n, i in missing)), launched=True)
            self.action.sleep(BOARD_POLL)

    def _watch(self, res, steps, pending):
        """After every step of the launch: this node's word on the board, and the group's failure read from it."""
        sj, board, host = self.sj, self.board, self.host
        self.steps = steps
        if res.get("failed"):
            board.put(host, state="failed", failure=sj.summary_of(res), failed_at=self.action.wall())
            return self._node_failed(_merge(steps))
        if not pending:
            board.put(host, state="ready", phase="ready")
            return None
        board.put(host, state="pending", phase=(res.get("progress") or {}).get("phase") or res.get("phase"))
        words = self._words()
        if sj.group_failure(words, self.nodes):
            return self._peer_failed(words, launched=True)
        missing = sj.never_joined(words, self.nodes) if self.action.clock() > self.deadline else []
        if missing:
            return self._give_up("never joined: %s had not joined (its load not begun: torch.distributed's "
                                 "rendezvous at rank 0 not done) %d s after the launch"
                                 % (", ".join("rank %d (%s)" % (i, n) for n, i in missing), self.timeout),
                                 launched=True)
        if self.action.clock() - self.started > self.limit:
            return self._give_up("still loading after %d s of steps, past the module's timeout" % self.limit,
                                 launched=True)
        return None

    # -- a failure: this node's, another node's, or the group's ------------------------------------------------------
    def _stop_own(self):
        """Stop this node's server (``state: stopped``, only ours); a follower first waits for rank 0's stop or
        failure (followers end when rank 0 does)."""
        action = self.action
        if self.rank > 0:
            until = action.clock() + FOLLOWER_WAIT
            while action.clock() < until:
                w = self._words().get(self.nodes[0]) or {}
                if w.get("state") in ("failed", "stopped") or not w:
                    break
                action.sleep(BOARD_POLL)
        keys = ("name", "run_dir", "log_dir", "launcher", "stop_timeout")
        stop_args = dict((k, self.args[k]) for k in keys if self.args.get(k) is not None)
        stop_args["state"] = "stopped"
        res = action.call(stop_args)
        self.board.put(self.host, state="stopped")
        return {k: res.get(k) for k in ("changed", "msg", "failed", "signalled", "killed") if k in res}

    def _group_view(self, words):
        return {h: {"rank": self.nodes.index(h), "state": (w or {}).get("state", "absent"),
                    "phase": (w or {}).get("phase")} for h, w in words.items()}

    def _node_failed(self, res):
        """This node failed: its own failure, named as the group's rank (its supervisor stops its tree)."""
        sj, action, host = self.sj, self.action, self.host
        out = dict(res)
        out["failed"] = True
        words = self._words()
        if res.get("crash_class") in sj.CONSEQUENCE_CLASSES:
            # most often what another node's death did to this one: wait until every other node has had its say after
            # this failure (its step that was under way ended: a step that saw its own server die ends failed, after
            # stopping that tree), for at most one step and one stop of its own
            since = float((words.get(host) or {}).get("at", 0) or 0)
            until = action.clock() + self.step_time + float(self.args.get("stop_timeout") or 30) + CONSEQUENCE_SLACK
            while action.clock() < until:
                first = sj.group_failure(words, self.nodes)
                if first and first[0] != host:
                    break
                if sj.heard_since(words, self.nodes, host, since):
                    break
                action.sleep(BOARD_POLL)
                words = self._words()
        first = sj.group_failure(words, self.nodes)
        also = ""
        if first and first[0] != host:
            also = "; first failure in the group: " + sj.failure_text(*first)
            out["failed_rank"] = first[1]
            out["group_failure"] = first[2].get("failure")
        else:
            out["failed_rank"] = self.rank
        out["msg"] = self.text("multi-node server %s, rank %d (%s): %s%s" % (
            self.group, self.rank, host, res.get("msg") or "failed", also))
        out["nodes_group"] = self._group_view(words)
        return out

    def _peer_failed(self, words, launched):
        host, rank, word = self.sj.group_failure(words, self.nodes)
        return self._give_up(self.sj.failure_text(host, rank, word), launched, failed_rank=rank,
                             failure=word.get("failure"))

    def _give_up(self, why, launched, failed_rank=None, failure=None):
        """The group failed for ``why``: this node's server stopped (when this task launched it), the task failed."""
        out = _merge(list(self.steps)) if self.steps else {}
        out.pop("pending", None)
        stopped = self._stop_own() if launched else None
        if not launched:
            self.board.put(self.host, state="stopped")
        out.update(failed=True, changed=bool(out.get("changed")) or bool(stopped and stopped.get("changed")))
        out["msg"] = self.text("multi-node server %s failed: %s; rank %d (%s) %s" % (
            self.group, why, self.rank, self.host, "was stopped" if launched else "launched nothing"))
        if stopped is not None:
            out["group_stop"] = stopped
        if failed_rank is not None:
            out["failed_rank"] = failed_rank
        if failure:
            out["group_failure"] = failure
        out["nodes_group"] = self._group_view(self._words())
        return out
