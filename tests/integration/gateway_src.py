"""SGLang's real gateways for the tests (tests/integration/test_rolling_restart.py), each its PyPI wheel (a Rust
extension in a manylinux wheel, with a Python launcher) in a venv of its own under the checkout's cache:

- sglang-router 0.3.2 (``python -m sglang_router.launch_router``), in `<repo>/.cache/sglang-router/` (override with
  SGLANG_ROUTER_CACHE); its dependencies: aiohttp, fastapi, orjson, setproctitle, uvicorn;
- smg 1.13.0, the Shepherd Model Gateway, SGLang's gateway after sglang-router (``smg launch``), in
  `<repo>/.cache/smg/` (override with SMG_CACHE); its dependencies: setproctitle, grpcio, grpcio-health-checking,
  pyyaml.

Tests only use the cache (gitignored); they never download. Filling it is a set-up step that tests/run.sh runs
before pytest, one gateway at a time:

    .venv/bin/python tests/integration/gateway_src.py sglang-router   (`pip download --no-deps --only-binary=:all:`
    .venv/bin/python tests/integration/gateway_src.py smg              of the pinned wheel, then a venv with it and
                                                                       its dependencies; no argument: both)

A test that needs one fails, naming that command: it never skips.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Gateway:
    """One pinned gateway: its PyPI ``package`` at ``version``, cached in ``<repo>/.cache/<package>`` (or the directory
    in the environment variable ``cache_env``); ``runs_it``: the venv's file that starts it (``bin/<runs_it>``);
    ``extension``: the module whose import proves its Rust extension loads."""

    def __init__(self, package, version, cache_env, runs_it, extension):
        self.package, self.version, self.runs_it, self.extension = package, version, runs_it, extension
        self.cache = os.environ.get(cache_env, os.path.join(REPO, ".cache", package))
        self.fetch_command = ".venv/bin/python tests/integration/gateway_src.py %s" % package

    def _venv(self):
        return os.path.join(self.cache, "venv-%s" % self.version)

    def _ready_marker(self):
        return os.path.join(self._venv(), ".eagle-deploy-ready")

    def _runs_it(self):
        return os.path.join(self._venv(), "bin", self.runs_it)

    def _ready(self):
        """Set up, and still runnable: the ready marker, and the interpreter the venv's launcher names is there (a
        venv made through another checkout's path to a shared cache names a python that may be gone)."""
        if not os.path.exists(self._ready_marker()):
            return False
        try:
            with open(self._runs_it(), "rb") as handle:
                first = handle.readline()
        except OSError:
            return False
        return not first.startswith(b"#!") or os.path.exists(first[2:].split()[0].decode("utf-8", "replace"))

    def _cached_wheel(self):
        found = sorted(glob.glob(os.path.join(glob.escape(self.cache), "%s-%s-*.whl" % (
            self.package.replace("-", "_"), self.version))))
        return found[0] if found else None

    def program(self):
        """The venv's file that runs the gateway (fails, naming the set-up command, if the set-up has not run)."""
        if self._ready():
            return self._runs_it()
        msg = "%s %s not set up in %s; run first: %s (tests/run.sh does)" % (
            self.package, self.version, self.cache, self.fetch_command)
        pytest.fail(msg, pytrace=False)

    def fetch(self):
        """Download the wheel unless cached, make the venv unless ready; return the venv's file that runs it."""
        if self._ready():
            return self._runs_it()
        os.makedirs(self.cache, exist_ok=True)
        if not self._cached_wheel():
            _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                  "--disable-pip-version-check", "--platform", "manylinux2014_x86_64", "--python-version", "3.11",
                  "--implementation", "cp", "%s==%s" % (self.package, self.version), "-d", self.cache],
                 "pip download %s==%s (PyPI)" % (self.package, self.version))
        wheel = self._cached_wheel()
        if not wheel:
            raise RuntimeError("no %s-%s wheel in %s after the download" % (
                self.package.replace("-", "_"), self.version, self.cache))
        python = os.path.join(self._venv(), "bin", "python")
        _run([sys.executable, "-m", "venv", "--clear", self._venv()], "python -m venv %s" % self._venv())
        _run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", wheel],
             "pip install %s and its dependencies (PyPI)" % os.path.basename(wheel))
        _run([python, "-c", "import %s" % self.extension], "importing %s's Rust extension" % self.package)
        with open(self._ready_marker(), "w") as handle:
            handle.write(os.path.basename(wheel) + "\n")
        return self._runs_it()


def _run(cmd, what):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:] or ["no output"]
        raise RuntimeError("%s failed (rc=%s): %s" % (what, proc.returncode, " | ".join(tail)))


SGLANG_ROUTER = Gateway("sglang-router", "0.3.2", "SGLANG_ROUTER_CACHE", "python", "sglang_router.sglang_router_rs")
SMG = Gateway("smg", "1.13.0", "SMG_CACHE", "smg", "smg.smg_rs")
GATEWAYS = {g.package: g for g in (SGLANG_ROUTER, SMG)}


def main(argv):
    unknown = [a for a in argv if a not in GATEWAYS]
    if unknown:
        sys.exit("usage: %s [%s] ...: unknown gateway %s" % (sys.argv[0], "|".join(GATEWAYS), ", ".join(unknown)))
    for name in argv or list(GATEWAYS):
        gateway = GATEWAYS[name]
        print("%s %s: %s" % (gateway.package, gateway.version, gateway.fetch()))


if __name__ == "__main__":
    main(sys.argv[1:])
