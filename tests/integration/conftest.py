"""The integration tests' marks. ``alone``: a file whose tests assert timings (a verdict within a second, a request
still running when a drain begins, an emulator up within 10 s) that hold on this 2-core machine only while no other
test runs: tests/run.sh runs these files one after another, then the others on several pytest-xdist workers.

The others are handed out one file at a time (``--dist loadfile --no-loadscope-reorder``), in the order set here: the
longest files first, so that no long file starts last and runs alone while the other workers stand idle."""

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


# Seconds each took on this 2-core machine, three workers (pytest --durations): the order the workers get them in.
# The three longest, one a worker; then test_progress_emulator.py (two 3-minute loads, mostly waiting: the worker
# that takes it leaves its core to the others); then by length. Files not listed follow in collection order.
LONGEST_FIRST = (
    "test_playbook_local.py",       # ~860 s
    "test_multinode.py",            # ~820 s (the group's rollback: three tests of ~95-160 s)
    "test_bench_playbook.py",       # ~660 s
    "test_progress_emulator.py",    # ~370 s
    "test_model_role.py",           # ~270 s
    "test_failure_shown_once.py",   # ~140 s
    "test_server_preflight.py",     # ~130 s
    "test_roles_alone.py",          # ~75 s
    "test_run_safety_emulator.py",  # ~70 s
    "test_watched_emulator.py",     # ~65 s
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.basename(str(item.fspath)) in ALONE:
            item.add_marker(pytest.mark.alone)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # sorted() is stable: a file's tests keep their order
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(rank)))
