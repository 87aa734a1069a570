"""The SGLang emulator as a real process tree, for the integration tests (test_emulator.py, test_emulator_drain.py):
started the way wait_for_model starts a server (own session, stdout+stderr into a log file), asked over HTTP, its
session killed at the end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from ansible.module_utils.sglang_proc import process_table
from ansible_run import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EMULATOR = os.path.join(REPO, "tests", "emulator", "sglang-emulator")  # the emulator package, run from the tree
CORPUS = os.path.join(REPO, "tests", "data", "sglang-logs")

LOAD_SECONDS = 0.3
FAST = ["--emulator-load-seconds", str(LOAD_SECONDS), "--emulator-capture-seconds", "0.1"]
READY = "The server is fired up and ready to roll!"
BANNER = re.compile(r"\[EMULATOR\] sglang-emulator [0-9.]+: this is NOT SGLang")  # its first line, any version
SIGQUIT = "Received sigquit from a child process. It usually means the child failed."


def proc_children(pid):
    """PIDs whose parent is pid (from /proc), with their state letter."""
    return dict((p, row["state"]) for p, row in process_table().items() if row["ppid"] == pid)


def session_left(sid, timeout=2.0):
    """Live members of session sid, after giving dying ones up to timeout seconds."""
    deadline = time.monotonic() + timeout
    members = session_members(sid)
    while members and time.monotonic() < deadline:
        time.sleep(0.05)
        members = session_members(sid)
    return members


def session_members(sid):
    """The live (not zombie) processes of session sid."""
    return sorted(p for p, row in process_table().items() if row["sid"] == sid and row["state"] != "Z")


class Emulator:
    def __init__(self, tmp_path, *args, port=None):
        self.port = port or free_port()
        self.log_path = str(tmp_path / "sglang.log")
        self.argv = [sys.executable, EMULATOR, "--host", "127.0.0.1", "--port", str(self.port)] + list(args)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, close_fds=True)
        self.pid = self.proc.pid

    def text(self):
        with open(self.log_path, encoding="utf-8", errors="replace", newline="") as handle:
            return handle.read()

    def wait_for(self, needle, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return
            if self.proc.poll() is not None and needle not in self.text():
                raise AssertionError("exited rc=%s before %r:\n%s" % (self.proc.returncode, needle, self.text()))
            time.sleep(0.05)
        raise AssertionError("no %r within %ss:\n%s" % (needle, timeout, self.text()))

    def stays_without(self, needle, seconds):
        """Fail as soon as ``needle`` shows up in the log or the process exits within ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert needle not in self.text() and self.proc.poll() is None, self.text()
            time.sleep(0.05)
        assert needle not in self.text(), self.text()

    def wait_exit(self, timeout=10.0):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("still running after %ss:\n%s" % (timeout, self.text()))

    def request(self, path, body=None, headers=None, timeout=5.0):
        """(status, parsed JSON or None)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = dict(headers or {})
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, (json.loads(raw) if raw else None)

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait(5)
        else:  # leader gone: still reap anything left in its session
            for pid in session_members(self.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
