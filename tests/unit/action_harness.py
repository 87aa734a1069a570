"""What the action plugins' unit tests share: the plugin loaded from action_plugins/, a fake clock, and an
ActionModule whose task, connection and play context are mocks (no Ansible run, no host)."""

from __future__ import annotations

import importlib.util
import os
from unittest import mock

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_plugin(name, as_name):
    """action_plugins/<name>.py as a module of its own (``as_name``: each test file gets its own copy)."""
    spec = importlib.util.spec_from_file_location(as_name, os.path.join(REPO, "action_plugins", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Clock(object):
    """A clock the test moves (``now``), starting at 1000."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make_action(plugin_mod, args, execute_module, clock, check_mode=False, play_check_mode=False, async_val=0,
                **task_attrs):
    """plugin_mod.ActionModule for a task with ``args``: module calls go to ``execute_module``, no temp dir is
    removed, its clock is ``clock``."""
    task = mock.MagicMock()
    task.args = dict(args)
    task.async_val = async_val
    task.check_mode = check_mode
    for key, value in task_attrs.items():
        setattr(task, key, value)
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    connection.has_native_async = False
    play_context = mock.MagicMock()
    play_context.check_mode = play_check_mode
    play_context.remote_addr = "10.0.0.1"
    action = plugin_mod.ActionModule(task, connection, play_context, loader=None, templar=None)
    action._execute_module = execute_module
    action._remove_tmp_path = lambda path: None
    action._clock = clock
    return action
