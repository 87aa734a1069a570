"""The real smg (Shepherd Model Gateway, SGLang's gateway after sglang-router) for the tests
(tests/integration/test_rolling_restart.py): its PyPI wheel (a Rust extension in a manylinux wheel, with a Python
launcher, ``smg launch``) in a venv of its own under the checkout's cache.

Tests only use the cache (`<repo>/.cache/smg/`, gitignored; override with SMG_CACHE); they never download. Filling it
is a set-up step that tests/run.sh runs before pytest:

    .venv/bin/python tests/integration/smg_src.py    (`pip download --no-deps --only-binary=:all:` of the pinned
                                                     wheel, then a venv with it and its dependencies: setproctitle,
                                                     grpcio, grpcio-health-checking, pyyaml)

A test that needs it fails, naming that command: it never skips.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("SMG_CACHE", os.path.join(REPO, ".cache", "smg"))
VERSION = "1.13.0"
FETCH_COMMAND = ".venv/bin/python tests/integration/smg_src.py"


def _venv():
    return os.path.join(CACHE, "venv-%s" % VERSION)


def _ready_marker():
    return os.path.join(_venv(), ".eagle-deploy-ready")


def _cached_wheel():
    found = sorted(glob.glob(os.path.join(glob.escape(CACHE), "smg-%s-*.whl" % VERSION)))
    return found[0] if found else None


def program():
    """The venv's ``smg`` launcher (fails, naming the set-up command, if the set-up has not run)."""
    if os.path.exists(_ready_marker()):
        return os.path.join(_venv(), "bin", "smg")
    msg = "smg %s not set up in %s; run first: %s (tests/run.sh does)" % (VERSION, CACHE, FETCH_COMMAND)
    pytest.fail(msg, pytrace=False)


def _run(cmd, what):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:] or ["no output"]
        raise RuntimeError("%s failed (rc=%s): %s" % (what, proc.returncode, " | ".join(tail)))


def fetch():
    """Download the wheel unless cached, make the venv unless ready; return the venv's smg launcher."""
    if os.path.exists(_ready_marker()):
        return os.path.join(_venv(), "bin", "smg")
    os.makedirs(CACHE, exist_ok=True)
    if not _cached_wheel():
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
              "--disable-pip-version-check", "--platform", "manylinux2014_x86_64", "--python-version", "3.11",
              "--implementation", "cp", "smg==%s" % VERSION, "-d", CACHE],
             "pip download smg==%s (PyPI)" % VERSION)
    wheel = _cached_wheel()
    if not wheel:
        raise RuntimeError("no smg-%s wheel in %s after the download" % (VERSION, CACHE))
    _run([sys.executable, "-m", "venv", "--clear", _venv()], "python -m venv %s" % _venv())
    _run([os.path.join(_venv(), "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q", wheel],
         "pip install %s and its dependencies (PyPI)" % os.path.basename(wheel))
    _run([os.path.join(_venv(), "bin", "python"), "-c", "import smg.smg_rs"], "importing smg's Rust extension")
    with open(_ready_marker(), "w") as handle:
        handle.write(os.path.basename(wheel) + "\n")
    return os.path.join(_venv(), "bin", "smg")


def main():
    print("smg %s: %s" % (VERSION, fetch()))


if __name__ == "__main__":
    main()
