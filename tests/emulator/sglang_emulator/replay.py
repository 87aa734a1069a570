# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Replay of a real SGLang log (time compressed): its lines, then the outcome the log had."""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import time

from sglang_emulator import READY_LINE
from sglang_emulator.logs import emit_raw, emu

_STAMP_RE = re.compile(r"\[(\d{4}-\d{2}-\d{2} )?(\d{2}:\d{2}:\d{2})")
_CRASH_MARKERS = ("Scheduler hit an exception", "Received sigquit from a child", "SIGQUIT received",
                  "scheduler died during initialization", "Initialization failed. warmup error",
                  "Traceback (most recent call last)", "Killed")


def line_time(line):
    """Seconds from the line's ``[date time`` or ``[time`` prefix, or None."""
    match = _STAMP_RE.search(line[:80])
    if not match:
        return None
    date = (match.group(1) or "2000-01-01 ").strip()
    try:
        stamp = datetime.datetime.strptime("%s %s" % (date, match.group(2)), "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return stamp.timestamp()


def replay_outcome(path, text):
    """ready | crashed | loading for a replayed log: MANIFEST.tsv next to it decides, else the log's text."""
    manifest = os.path.join(os.path.dirname(os.path.abspath(path)), "MANIFEST.tsv")
    if os.path.isfile(manifest):
        import csv
        with open(manifest, encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                if row.get("file") == os.path.basename(path) and row.get("label") in ("ready", "crashed", "loading"):
                    return row["label"]
    if READY_LINE in text:
        return "ready"
    if any(marker in text for marker in _CRASH_MARKERS):
        return "crashed"
    return "loading"


def replay_delays(lines, speed, fixed=0.005):
    """Delay before each line: timestamp gaps divided by speed, or a fixed small delay for unstamped lines."""
    delays, last = [], None
    for line in lines:
        stamp = line_time(line)
        if stamp is None:
            delays.append(fixed)
            continue
        delays.append(0.0 if last is None else max(0.0, (stamp - last) / max(speed, 1e-6)))
        last = stamp
    return delays


def run_replay(engine, args):
    path = args.emulator_replay
    with open(path, "rb") as handle:
        text = handle.read().decode("utf-8", "replace")
    outcome = replay_outcome(path, text)
    emu("replay: %s (%d bytes, sha256 %s), speed x%g, outcome when it ends: %s"
        % (path, len(text), hashlib.sha256(text.encode("utf-8", "replace")).hexdigest(), args.emulator_replay_speed,
           outcome))
    lines = text.splitlines(keepends=True)
    for delay, line in zip(replay_delays(lines, args.emulator_replay_speed), lines):
        if delay:
            time.sleep(delay)
        emit_raw(line if line.endswith(("\n", "\r")) else line + "\n")
        if outcome == "ready" and engine.server is None and "Uvicorn running on" in line:
            engine.bind_quiet()
    if outcome == "ready":
        if engine.server is None:
            engine.bind_quiet()
        engine.up = engine.ready = True
        engine.broadcast({"type": "server_ready"})
        while True:
            time.sleep(3600)
    if outcome == "crashed":
        engine.kill_children()
        os._exit(1)
    while True:
        time.sleep(3600)


