# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of the ``wait_for_model`` module: live progress on the controller while a server loads.

A ``state: started`` task calls the module in steps of ``step_time`` seconds (10 by default; a task argument of
this plugin's): each step waits on the host at most that long and answers ``pending: true`` while the server still
loads; the next step carries the previous step's ``progress.attempt`` and continues the same wait, so
crash detection and deadlines stay those of one long wait (and ``force_restart`` goes only to the first step:
the later ones wait for the load it started). Between steps a line per host is printed, with
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

STEP_TIME = 10.0  # seconds a step waits on the host before it answers "pending"
PRINT_EVERY = 30.0  # a line at least this often while the server loads
PLUGIN_ARGS = ("progress",)


def _progress():
    """module_utils/sglang_progress, found next to this plugin when the controller's ansible.module_utils does not know
    the project's module_utils (they are shipped to hosts, not imported here)."""
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
    """Whether the stdout callback writes JSON (ansible.builtin.json, ansible.posix.jsonl, ...)."""
    return "json" in str(C.config.get_config_value("DEFAULT_STDOUT_CALLBACK") or "").lower()


class ActionModule(ActionBase):

    _supports_check_mode = True
    _supports_async = True

    # seams for the unit tests (a fake clock; what a line is written with)
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
            if not 0 <= step_time <= 86400:
                raise TypeError("step_time must be >= 0 and <= 86400 (got %s)" % step_time)
        except (TypeError, ValueError) as e:
            raise AnsibleActionFail("progress / step_time: %s" % e)
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        check = bool(self._task.check_mode) or bool(self._play_context.check_mode)
        stepping = (progress and not self._task.async_val and not check
                    and args.get("state", "started") == "started")
        if not stepping:
            result.update(self._execute_module(module_args=args, task_vars=task_vars, wrap_async=wrap_async))
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        args["_step_time"] = step_time
        host = task_vars.get("inventory_hostname") or self._play_context.remote_addr or "?"
        try:
            result.update(self._steps(args, task_vars, host))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _steps(self, args, task_vars, host):
        progress = _progress()
        printer = progress.StepPrinter(host, self._say, self._clock, PRINT_EVERY, progress.progress_line)
        steps = []
        limit = self._limit(args)
        started = self._clock()
        while True:
            t0 = self._clock()
            res = self._execute_module(module_args=args, task_vars=task_vars)
            steps.append(res)
            pending = bool(res.get("pending")) and not res.get("failed")
            printer.step(res, self._clock() - t0, final=not pending, first=len(steps) == 1)
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
    for key in ("warnings", "deprecations"):
        merged = []
        for s in steps:
            for item in s.get(key) or ():
                if item not in merged:
                    merged.append(item)
        if merged:
            out[key] = merged
    out["steps"] = len(steps)
    return out
