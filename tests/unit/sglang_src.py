"""Real SGLang sources for unit tests: `eagle_worker_v2.py` of several releases, taken from PyPI wheels.

Wheels are fetched once with `pip download --no-deps --only-binary=:all: sglang==X` (pinned to the
cp311 manylinux_2_34_x86_64 wheel where a release has per-platform wheels) into a cache
(`<repo>/.cache/sglang-wheels`, gitignored; override with SGLANG_WHEEL_CACHE) and reused; only the one
file is read out of the wheel with `zipfile`. If a wheel is not cached and PyPI cannot be reached, the
test that needs it is skipped with the reason.
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


def _cached_wheel(version):
    found = sorted(glob.glob(os.path.join(glob.escape(CACHE), "sglang-%s-*.whl" % version)))
    return found[0] if found else None


def wheel_path(version):
    """Path of the cached sglang wheel for `version`, downloading it if needed (skips if impossible)."""
    wheel = _cached_wheel(version)
    if wheel:
        return wheel
    os.makedirs(CACHE, exist_ok=True)
    # Later releases ship per-platform wheels; pin one so every controller gets the same file.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--platform", "manylinux_2_34_x86_64", "--python-version", "3.11", "--implementation", "cp",
           "sglang==%s" % version, "-d", CACHE]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip("cannot download sglang==%s from PyPI (%s); put the wheel in %s" % (version, exc, CACHE))
    wheel = _cached_wheel(version)
    if proc.returncode != 0 or not wheel:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        pytest.skip("cannot download sglang==%s from PyPI (pip rc=%s: %s); put the wheel in %s"
                    % (version, proc.returncode, tail[0], CACHE))
    return wheel


def eagle_worker_v2_source(version):
    """Bytes of sglang/srt/speculative/eagle_worker_v2.py as released in sglang `version`."""
    with zipfile.ZipFile(wheel_path(version)) as wheel:
        return wheel.read(MEMBER)
