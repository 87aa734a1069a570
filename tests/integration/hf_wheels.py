"""huggingface_hub and what it needs, as wheels, for the tests of the model role: the role installs them into a
virtualenv that lacks them (``sglang_model_hf_packages``, as on the rehearsal's --no-deps SGLang venv) from this
wheelhouse, with no index.

Tests only read the cache (``<repo>/.cache/hf-wheels``, gitignored; override with HF_WHEEL_CACHE); they never
download. Filling it is a set-up step that tests/run.sh runs before pytest, and molecule's ``model`` scenario before
its hosts are made:

    .venv/bin/python tests/integration/hf_wheels.py      (pip download of REQUIREMENTS, cp311 manylinux x86_64)

A test that needs it fails when it is missing (with that command), under CI and elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("HF_WHEEL_CACHE", os.path.join(REPO, ".cache", "hf-wheels"))
# What the role installs: huggingface_hub pinned (the version whose source the role's resume was checked against).
HF_REQUIREMENT = "huggingface_hub==2.4.0"
# It and its whole closure, pinned, so that every fill of the cache holds the same files.
REQUIREMENTS = (
    HF_REQUIREMENT, "anyio==4.16.0", "click==8.5.1", "filelock==4.3.2", "fsspec==2026.9.0", "h11==0.16.0",
    "hf-xet==1.8.0", "httpcore2==2.17.0", "httpx2==2.17.0", "idna==3.20", "packaging==26.4", "PyYAML==6.0.4",
    "tqdm==4.70.1", "truststore==0.10.5", "typing_extensions==4.16.0",
)
COMPLETE = "COMPLETE"
FETCH_COMMAND = ".venv/bin/python tests/integration/hf_wheels.py"


def complete():
    """Whether the cache holds the set this file pins (its marker names exactly REQUIREMENTS)."""
    try:
        with open(os.path.join(CACHE, COMPLETE)) as fh:
            return fh.read().split() == list(REQUIREMENTS)
    except OSError:
        return False


def wheelhouse():
    """The cache's path; fails the calling test, naming the command that fills it, when it is not complete."""
    if not complete():
        import pytest
        pytest.fail("the huggingface_hub wheels are not in %s; fill the cache first: %s (tests/run.sh does)"
                    % (CACHE, FETCH_COMMAND), pytrace=False)
    return CACHE


def fetch():
    """Download REQUIREMENTS (no dependency resolution: the list is the closure) unless the cache holds them."""
    if complete():
        return CACHE
    os.makedirs(CACHE, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--platform", "manylinux_2_34_x86_64", "--platform", "manylinux_2_28_x86_64",
           "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--python-version", "3.11", "--implementation", "cp",
           "-d", CACHE] + list(REQUIREMENTS)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError("cannot download the huggingface_hub wheels (pip rc=%s: %s); put them in %s"
                           % (proc.returncode, tail[0], CACHE))
    with open(os.path.join(CACHE, COMPLETE), "w") as fh:
        fh.write("\n".join(REQUIREMENTS) + "\n")
    return CACHE


def main():
    print("huggingface_hub wheels: %s" % fetch())


if __name__ == "__main__":
    main()
