"""Fixtures of the molecule scenarios' testinfra tests (both scenarios read the same host state)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.molecule_support import hostcheck  # noqa: E402 - importable once sys.path has the repository root


@pytest.fixture(scope="module")
def state(host):
    """Our server's run-state record (written by wait_for_model) on the host."""
    return hostcheck.run_state(host, hostcheck.RUN_DIR)


@pytest.fixture(scope="module")
def procs(host):
    """Every process on the host, from /proc."""
    return hostcheck.processes(host)
