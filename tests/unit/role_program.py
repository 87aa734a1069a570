"""A role's ``python -c`` program as its task builds it, for unit tests: the task's
``query('ansible.builtin.file', 'a.py', 'b.py', ...) | join(...)`` read from the task file, the files read from the
role's files/ (links followed, as the lookup does) and run, in that order, as one module. A test of the program
therefore fails when the task stops shipping a file the program needs."""
from __future__ import annotations

import os
import re
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parts(role, task, program):
    """The files the task's -c program is made of, in order (the one whose list ends with ``program``)."""
    with open(os.path.join(REPO, "roles", role, "tasks", task), encoding="utf-8") as fh:
        text = fh.read()
    for found in re.findall(r"query\('ansible\.builtin\.file', ((?:'[\w.]+'(?:, )?)+)\)", text):
        names = re.findall(r"'([\w.]+)'", found)
        if names[-1] == program:
            return names
    raise AssertionError("roles/%s/tasks/%s builds no -c program ending with %s" % (role, task, program))


def load(role, task, program):
    """The program as one module (its ``__name__`` is not ``__main__``: main() does not run)."""
    module = types.ModuleType(program[:-3])
    module.__file__ = os.path.join(REPO, "roles", role, "files", program)
    for name in parts(role, task, program):
        path = os.path.join(REPO, "roles", role, "files", name)
        with open(path, encoding="utf-8") as fh:
            exec(compile(fh.read(), path, "exec"), module.__dict__)  # pylint: disable=exec-used
    return module
