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

import os
import time

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

STEP_TIME = 10.0
PRINT_EVERY = 30.0
STARTING_ACTIONS = ("fetched", "copied")


def _progress():
    """module_utils/sglang_progress, found next to this plugin when the controller's ansible.module_utils does not know
    the project's module_utils."""
    try:
        from ansible.module_utils import sglang_progress
    except ImportError:
        import ansible.module_utils
        here = os.path.dirname(os.path.abspath(__file__))
        for path in [os.path.join(os.path.dirname(here), "module_utils")] + list(C.DEFAULT_MODULE_UTILS_PATH or ()):
            if os.path.isfile(os.path.join(path, "sglang_progress.py")) and path not in ansible.module_utils.__path__:
                ansible.module_utils.__path__.append(path)
                break
        from ansible.module_utils import sglang_progress
    return sglang_progress


def _to_stderr():
    return "json" in str(C.config.get_config_value("DEFAULT_STDOUT_CALLBACK") or "").lower()


class ActionModule(ActionBase):

    _supports_check_mode = True
    _supports_async = True

    _clock = staticmethod(time.monotonic)

    def _say(self, line):
        self._display.display(line, stderr=_to_stderr())

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = dict(self._task.args)
        try:
            progress = boolean(args.pop("progress", True), strict=True)
            step_time = args.pop("step_time", None)
            step_time = STEP_TIME if step_time is None else float(step_time)
            if not 0 < step_time <= 86400:
                raise TypeError("step_time must be > 0 and <= 86400 (got %s)" % step_time)
        except (TypeError, ValueError) as e:
            raise AnsibleActionFail("progress / step_time: %s" % e)
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        check = bool(self._task.check_mode) or bool(self._play_context.check_mode)
        if not progress or self._task.async_val or check:
            result.update(self._execute_module(module_args=args, task_vars=task_vars, wrap_async=wrap_async))
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        host = task_vars.get("inventory_hostname") or self._play_context.remote_addr or "?"
        try:
            result.update(self._steps(args, task_vars, host, step_time))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _steps(self, args, task_vars, host, step_time):
        progress = _progress()
        printer = progress.StepPrinter(host, self._say, self._clock, PRINT_EVERY, progress.transfer_line)
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
    for key in ("warnings", "deprecations"):
        items = []
        for s in steps:
            for item in s.get(key) or ():
                if item not in items:
                    items.append(item)
        if items:
            out[key] = items
    out["steps"] = len(steps)
    return out
