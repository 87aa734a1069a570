"""Real SGLang sources for tests: `eagle_worker_v2.py` and the server options of several releases, read out
of PyPI wheels with `zipfile`.

Tests only read the cache (`<repo>/.cache/sglang-wheels`, gitignored; override with SGLANG_WHEEL_CACHE); they
never download. Filling it is a set-up step that tests/run.sh runs before pytest:

    .venv/bin/python tests/unit/sglang_src.py      (`pip download --no-deps --only-binary=:all:` of each
                                                    release, pinned to the cp311 manylinux_2_34_x86_64 wheel)

A test whose wheel is missing fails, naming that command: it never skips.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("SGLANG_WHEEL_CACHE", os.path.join(REPO, ".cache", "sglang-wheels"))
MEMBER = "sglang/srt/speculative/eagle_worker_v2.py"

# The file first appears in 0.5.4; its EAGLEWorkerV2.__init__ differs in each of these.
RELEASES = ("0.5.4", "0.5.5", "0.5.9", "0.5.15", "0.5.20", "0.5.23")
# Every wheel a test reads: RELEASES and 0.5.17 (the release that ran on the H200, tests/data/h200-sglang).
WHEELS = RELEASES + ("0.5.17",)


def _cached_wheel(version):
    found = sorted(glob.glob(os.path.join(glob.escape(CACHE), "sglang-%s-*.whl" % version)))
    return found[0] if found else None


FETCH_COMMAND = ".venv/bin/python tests/unit/sglang_src.py"


def _missing(version):
    """Fail, naming the command that fills the cache (a green run must not hide a test that could not run)."""
    msg = ("sglang==%s wheel not in %s; fill the cache first: %s (tests/run.sh does)"
           % (version, CACHE, FETCH_COMMAND))
    pytest.fail(msg, pytrace=False)


def wheel_path(version):
    """Path of the cached sglang wheel for `version` (fails, naming the command, if it is not cached)."""
    return _cached_wheel(version) or _missing(version)


def fetch(version):
    """Download the wheel of sglang `version` into the cache unless it is there; return its path."""
    wheel = _cached_wheel(version)
    if wheel:
        return wheel
    os.makedirs(CACHE, exist_ok=True)
    # Later releases ship per-platform wheels; pin one so every controller gets the same file.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--platform", "manylinux_2_34_x86_64", "--python-version", "3.11", "--implementation", "cp",
           "sglang==%s" % version, "-d", CACHE]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    wheel = _cached_wheel(version)
    if proc.returncode != 0 or not wheel:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError("cannot download sglang==%s from PyPI (pip rc=%s: %s); put the wheel in %s"
                           % (version, proc.returncode, tail[0], CACHE))
    return wheel


def eagle_worker_v2_source(version):
    """Bytes of sglang/srt/speculative/eagle_worker_v2.py as released in sglang `version`."""
    with zipfile.ZipFile(wheel_path(version)) as wheel:
        return wheel.read(MEMBER)


def main():
    for version in WHEELS:
        print("sglang %s: %s" % (version, fetch(version)))


if __name__ == "__main__":
    main()
