# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of the ``sglang_model`` module: progress on the controller while a host fetches model weights.

The task calls the module in steps of ``step_time`` seconds (10 by default; a task argument of this plugin's): the
first step lists the source, checks the disk and starts the fetch program on the host; each step waits at most that
long and answers ``pending: true`` while a fetch still runs, and the next step carries the jobs it saw (``_jobs``) and
waits on the same fetch. Between steps a line per host is printed, with no ``-v`` needed, at every phase change and at
least every 30 s, through the same printer as ``wait_for_model``'s load lines (``sglang_progress.StepPrinter``)::

    blackwell-01 | fetching Kimi-K2.5-INT4 | 312.40/547.00 GB, 31/72 files | 210.3 MB/s | 12m04s elapsed | ETA ~18m40s

The lines go to stdout, or to stderr when the stdout callback writes JSON.

The task gets the steps merged: ``changed`` when any step changed, each model's ``action`` of the step that started
its fetch, everything else from the final step, plus ``steps`` (the number of module calls). A step that fails ends
the task with that step's result. The host keeps everything a step knows (the fetch program, its status and manifest
files): a lost connection loses nothing, and a re-run attaches to a fetch that still runs.

One module call, as without this plugin: check mode, an async task, and the task argument ``progress: false``.
"""
from __future__ import annotations

from ansible_collections.eagle.deploy.plugins.module_utils import sglang_progress
from ansible_collections.eagle.deploy.plugins.plugin_utils.sglang_action_steps import SteppedAction, merge_messages

STARTING_ACTIONS = ("fetched", "copied")


class ActionModule(SteppedAction):

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        progress, step_time = self._step_options(args)
        if not progress or self._task.async_val or self._checking():
            result.update(self._one_call(args, task_vars))
            return result
        try:
            result.update(self._steps(args, task_vars, self._host(task_vars), step_time))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _steps(self, args, task_vars, host, step_time):
        printer = self._printer(host, sglang_progress.transfer_line)
        steps = []
        jobs = {}
        timeout = args.get("timeout") or 0
        started = self._clock()
        while True:
            step_args = dict(args, _step_time=step_time)
            if jobs:
                step_args["_jobs"] = dict(jobs)
            t0 = self._clock()
            res = self._execute_module(module_args=step_args, task_vars=task_vars)
            steps.append(res)
            jobs.update(res.get("jobs") or {})
            pending = bool(res.get("pending")) and not res.get("failed")
            printer.step(res, self._clock() - t0, final=not pending, first=len(steps) == 1)
            if not pending:
                return _merge(steps)
            if timeout and self._clock() - started >= float(timeout):
                out = _merge(steps)
                out["msg"] = ("the fetch still runs after %s s (timeout); it goes on on the host, and a re-run attaches "
                              "to it" % timeout)
                return out


def _merge(steps):
    """The steps as one result: the final step's, ``changed`` of any step, each model's ``action`` (and ``pid``) of
    the step that started its fetch, the steps' warnings, ``steps``."""
    out = dict(steps[-1])
    out["changed"] = any(bool(s.get("changed")) for s in steps)
    started = {}
    for s in steps:
        for m in s.get("models") or ():
            if isinstance(m, dict) and m.get("action") in STARTING_ACTIONS and m.get("name") not in started:
                started[m.get("name")] = m
    if isinstance(out.get("models"), list):
        merged = []
        for m in out["models"]:
            first = started.get(m.get("name")) if isinstance(m, dict) else None
            if first is not None:
                m = dict(m, pid=first.get("pid"))
                if m.get("action") in ("kept", "attached"):
                    m["action"] = first["action"]
            merged.append(m)
        out["models"] = merged
    merge_messages(steps, out)
    out["steps"] = len(steps)
    return out
