"""A real headless Chromium (Debian's ``chromium``) driven over the DevTools protocol on a pipe, standard library only.

``open_page(url)`` loads a page and returns what the tests look at: the console and log errors (console.error,
uncaught exceptions, the browser's own error entries such as a Content-Security-Policy violation), the result of a
JavaScript expression run in the page (counting the report's marks in its DOM) and, when asked, a PNG screenshot of
the whole page. ``--remote-debugging-pipe``: commands go to the browser on its fd 3, answers and events come back on
its fd 4, each a JSON text ended by a NUL byte; one page target attached with ``flatten`` (a sessionId per command).

``find_chromium()`` fails the calling test (never skips) when the browser is missing: ``bash tests/setup_bench.sh``
installs it (apt-get install chromium).
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

import pytest

# As the machine's own probe starts it: no network of its own, no first-run work, a fresh profile.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--mute-audio", "--hide-scrollbars"]


def find_chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("chromium is not installed: the report is tested in a real headless Chromium. Run "
                    "`bash tests/setup_bench.sh` (apt-get install -y chromium), as tests/run.sh does.", pytrace=False)
    return path


class Browser:
    """One browser process and one page, over the pipe."""

    def __init__(self, chromium, width=1100, height=900, timeout=60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser's ends above 9, so that putting them on 3 and 4 never closes one of them on the way.
        for name in ("to_browser_r", "from_browser_w"):
            fd = locals()[name]
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            os.close(fd)
            if name == "to_browser_r":
                to_browser_r = high
            else:
                from_browser_w = high

        # The browser reads commands on its fd 3 and writes on its fd 4: bash puts the pipes there and execs it (dash takes
        # no fd above 9).
        wire = 'exec "$0" "$@" 3<&%d 4>&%d %d<&- %d>&-' % (to_browser_r, from_browser_w, to_browser_r, from_browser_w)
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", wire, chromium] + FLAGS
            + ["--remote-debugging-pipe", "--user-data-dir=" + self.profile, "--window-size=%d,%d" % (width, height),
               "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._next = 0
        self.events = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(method, session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=True)

    def _read_message(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("chromium did not answer within %s s" % self.timeout)
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise AssertionError("chromium closed its DevTools pipe (exit %s)" % self.proc.poll())
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method, params=None, session=False):
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise AssertionError("%s failed: %s" % (method, reply["error"]))
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method):
        deadline = time.monotonic() + self.timeout
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def errors(self):
        """Console errors, uncaught exceptions and the browser's error log entries seen so far, as text."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append("console.%s: %s" % (params["type"], [a.get("value", a.get("description")) for a in params.get("args", [])]))
            elif method == "Runtime.exceptionThrown":
                found.append("exception: %s" % params.get("exceptionDetails", {}).get("text"))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                found.append("log %s: %s (%s)" % (entry.get("source"), entry.get("text"), entry.get("url")))
        return found

    def close(self):
        try:
            self.call("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


def open_page(url, expression, screenshot=None, width=1100):
    """Load ``url`` in a fresh headless Chromium; returns (errors, the value of ``expression``). With ``screenshot``
    (a path), the whole page is saved there as PNG."""
    browser = Browser(find_chromium(), width=width)
    try:
        browser.call("Page.navigate", {"url": url}, session=True)
        browser.wait_event("Page.loadEventFired")
        value = browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                             session=True)["result"].get("value")
        if screenshot:
            shot = browser.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                                session=True)
            with open(screenshot, "wb") as handle:
                handle.write(base64.b64decode(shot["data"]))
        # A last round trip, so that log entries of the load are in.
        browser.call("Runtime.evaluate", {"expression": "1"}, session=True)
        return browser.errors(), value
    finally:
        browser.close()
