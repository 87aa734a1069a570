"""The integration tests' marks. ``alone``: a file whose tests assert timings (a verdict within a second, a request
still running when a drain begins, an emulator up within 10 s) that hold on this 2-core machine only while no other
test runs: tests/run.sh runs these files one after another, then the others on several pytest-xdist workers."""

import os

import pytest

ALONE = frozenset((
    "test_client_text.py",
    "test_dropped_caller.py",
    "test_emulator.py",
    "test_emulator_drain.py",
    "test_prompt_echo.py",
    "test_rolling_restart.py",
    "test_step_ends_on_verdict.py",
    "test_wait_events.py",
))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.basename(str(item.fspath)) in ALONE:
            item.add_marker(pytest.mark.alone)
