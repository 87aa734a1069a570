# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang-shaped log lines. One os.write per line, so lines of several processes sharing the log file never mix."""

from __future__ import annotations

import datetime
import os


def _now_prefix(rank=None):
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    if rank is None:
        return "[%s] " % stamp
    return "[%s TP%d] " % (stamp, rank)


def emit_raw(text):
    """Write text as is (it carries its own line ends) to stderr, unbuffered."""
    data = text.encode("utf-8", "replace")
    while data:
        try:
            written = os.write(2, data)
        except InterruptedError:
            continue
        except OSError:
            return
        data = data[written:]


_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_MIN_LEVEL = [20]


def set_log_level(name):
    _MIN_LEVEL[0] = _LEVELS.get(name, 20)


def log(msg, rank=None, level="info"):
    """Log one SGLang-style line: ``[date time] msg`` (main process) or ``[date time TPn] msg`` (scheduler)."""
    if _LEVELS[level] < _MIN_LEVEL[0]:
        return
    emit_raw("".join(_now_prefix(rank) + line + "\n" for line in msg.split("\n")))


def log_block(lines_text, rank=None):
    """Log an error block (traceback): prefix on the first line only, like Python's logging."""
    emit_raw(_now_prefix(rank) + lines_text.rstrip("\n") + "\n")


def emu(msg):
    """An emulator-only line, always marked ``[EMULATOR]``."""
    emit_raw("[EMULATOR] %s\n" % msg)


def tqdm_line(desc, n, total, elapsed, unit_s):
    """A tqdm progress line as SGLang's shard loader prints it (a carriage return first, no newline)."""
    pct = int(100 * n / total)
    remaining = (total - n) * unit_s
    fmt = lambda s: "%02d:%02d" % (int(s) // 60, int(s) % 60)  # noqa: E731
    if n == 0:
        rate = "?it/s"
        rem = "?"
    else:
        rate = "%5.2fs/it" % unit_s if unit_s >= 1 else "%5.2fit/s" % (1.0 / max(unit_s, 1e-3))
        rem = fmt(remaining)
    return "\r%s: %3d%% Completed | %d/%d [%s<%s, %s]" % (desc, pct, n, total, fmt(elapsed), rem, rate)


