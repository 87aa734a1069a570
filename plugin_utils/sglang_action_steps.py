# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the action plugins of ``wait_for_model`` and ``sglang_model`` share, on the controller only: a module called
in steps (``SteppedAction``: the plugin's task arguments ``progress`` and ``step_time``, the one call without steps,
the host's name, the progress lines and where they go) and the steps' results merged (``merge_messages``).

It is the collection eagle.deploy's ``plugins/plugin_utils`` (the collection's place for code that only plugins
import), and so are the project's module_utils its ``plugins/module_utils``: in the playbook project both are seen
through ``collections/ansible_collections/eagle/deploy`` (links to ``plugin_utils/`` and ``module_utils/``), which
ansible.cfg's ``collections_path`` names; bin/build-collection copies both into the collection. ansible-core finds
a project's own module_utils only for what it ships to a host, never for a controller's import.
"""
from __future__ import annotations

import time

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.eagle.deploy.plugins.module_utils import sglang_progress

STEP_TIME = 10.0  # seconds a step waits on the host before it answers "pending"
PRINT_EVERY = 30.0  # a progress line at least this often while a step answers pending


def to_stderr():
    """Whether the stdout callback writes JSON (ansible.builtin.json, ansible.posix.jsonl, ...): the progress lines
    go to stderr then, and its output stays parseable."""
    return "json" in str(C.config.get_config_value("DEFAULT_STDOUT_CALLBACK") or "").lower()


def merge_messages(steps, out):
    """``out`` with the warnings and deprecations of every step, each once, in order; returned."""
    for key in ("warnings", "deprecations"):
        merged = []
        for step in steps:
            for item in step.get(key) or ():
                if item not in merged:
                    merged.append(item)
        if merged:
            out[key] = merged
    return out


class SteppedAction(ActionBase):
    """An action plugin that calls its module in steps of ``step_time`` seconds and prints a progress line per host
    between them (``sglang_progress.StepPrinter``). ``STEP_TIME_MAY_BE_ZERO``: whether ``step_time: 0`` is a step."""

    _supports_check_mode = True
    _supports_async = True
    STEP_TIME_MAY_BE_ZERO = False

    # the clock of the steps and the progress lines (a seam: the unit tests set a fake one on an instance)
    _clock = staticmethod(time.monotonic)

    def _say(self, line):
        self._display.display(line, stderr=to_stderr())

    def _step_options(self, args):
        """``progress`` and ``step_time``, the plugin's own task arguments, taken out of ``args``."""
        try:
            progress = boolean(args.pop("progress", True), strict=True)
            step_time = args.pop("step_time", None)
            step_time = STEP_TIME if step_time is None else float(step_time)
            low, word = (0 <= step_time, ">=") if self.STEP_TIME_MAY_BE_ZERO else (0 < step_time, ">")
            if not (low and step_time <= 86400):
                raise TypeError("step_time must be %s 0 and <= 86400 (got %s)" % (word, step_time))
        except (TypeError, ValueError) as e:
            raise AnsibleActionFail("progress / step_time: %s" % e)
        return progress, step_time

    def _checking(self):
        return bool(self._task.check_mode) or bool(self._play_context.check_mode)

    def _host(self, task_vars):
        return task_vars.get("inventory_hostname") or self._play_context.remote_addr or "?"

    def _one_call(self, args, task_vars):
        """The module called once, as without this plugin (an async task: started, or run by the connection)."""
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        result = self._execute_module(module_args=args, task_vars=task_vars, wrap_async=wrap_async)
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _printer(self, host, line):
        """The progress lines of ``host``'s steps, each made by ``line`` (``sglang_progress.progress_line``, ...)."""
        return sglang_progress.StepPrinter(host, self._say, self._clock, PRINT_EVERY, line)
