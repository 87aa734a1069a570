"""House rule for unit tests: no test spawns a process, sleeps or busy-waits.

For the duration of every test under tests/unit, subprocess.Popen (and so subprocess.run, check_output and
AnsibleModule.run_command), os.fork, os.posix_spawn(p), os.system and the real time.sleep raise
AssertionError. A module under test may still be handed an injected sleep (a fake clock's); only the real
one is banned. A test that needs a real process belongs in tests/integration.
"""
from __future__ import annotations

import os
import subprocess
import time

import pytest

MESSAGE = "unit tests spawn no processes / sleep nothing: move this test to tests/integration"

# (owner, attribute) pairs banned during each unit test; getattr guard: posix_spawn is POSIX-only.
BANNED = [(subprocess, "Popen"), (os, "fork"), (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system"),
          (time, "sleep")]


def _refuse(name):
    def refused(*args, **kwargs):
        raise AssertionError("%s (%s called)" % (MESSAGE, name))

    refused.__name__ = "refused_" + name.rsplit(".", 1)[-1]
    return refused


@pytest.fixture(autouse=True)
def no_processes_no_sleep(monkeypatch):
    """Makes process launch and the real time.sleep raise AssertionError while the test runs."""
    for owner, name in BANNED:
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, _refuse("%s.%s" % (owner.__name__, name)))


@pytest.fixture(autouse=True)
def target_side_warnings(request, monkeypatch):
    """Modules run on the target, where module.warn() collects its warnings for the result. Importing a controller
    plugin (the action plugin's tests) switches ansible.module_utils to the controller's Display for the whole
    session; every other test gets the target's behaviour back."""
    from ansible.module_utils import _internal
    if "action" not in request.node.module.__name__:
        monkeypatch.setattr(_internal, "is_controller", False)
