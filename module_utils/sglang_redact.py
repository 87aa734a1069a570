# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep secrets out of the server's log: a streaming redactor between the server's output and its log file.

Standard library only. SGLang logs its ``server_args`` at INFO, ``api_key`` included, and a server's
output can carry any secret of its environment. ``wait_for_model`` therefore gives the server a pipe for
stdout and stderr instead of the log file when it has secrets to protect, and a small process, the *log
writer*, copies the pipe into the log file through :class:`Redactor`, which replaces every secret with
``***`` in every encoded form a log line can show (:func:`encoded_forms`).

The log writer runs ``python -I -S -c BOOTSTRAP <fd> <label>``: the bootstrap reads this file's source and
the secrets (JSON) from an inherited pipe descriptor, so no secret is ever in its argv or environment, and
the code reaches the target host inside the module's AnsiballZ payload like any module_util. It ignores
SIGTERM, SIGINT and SIGHUP and exits at end of file, after every process of the server closed the pipe,
so the last lines of a dying server still reach the log.

Nothing but the secrets is changed: no byte is lost, added or reordered. A secret split across two reads
is still caught: only the bytes at the end of the stream that could begin a secret are held back (at most
the longest form's length - 1), and they are written as soon as the next byte shows they are not one, or
at end of file. There is no timer: a complete line (ending in ``\\n`` or a progress bar's ``\\r``) is written
at once unless a secret starts with that byte, and a partial secret is never written because the stream
paused.
"""

from __future__ import annotations

import json
import os
import re
import signal
from urllib.parse import quote, quote_plus

MASK = b"***"
# Shorter secrets are not redacted (the module warns): masking every "1" of a log destroys it, and a value
# that short protects nothing.
MIN_SECRET_LENGTH = 4
READ_SIZE = 65536

_PCT = re.compile(rb"%[0-9A-F]{2}")


def _repr_single(text):
    # Python's repr of a str, single-quoted ("'" escaped): repr() picks single quotes for this string.
    return repr(text + '"')[1:-2]


def _repr_auto(text):
    # repr() as Python chooses the quotes (double quotes, "'" unescaped, when the text holds "'" only).
    return repr(text)[1:-1]


def _json_ascii(text):
    return json.dumps(text)[1:-1]


def _json_utf8(text):
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _pct(text):
    return quote(text, safe="")


def _pct_keep_slash(text):
    return quote(text)


def _pct_plus(text):
    return quote_plus(text, safe="")


ENCODERS = (lambda text: text, _repr_single, _repr_auto, _json_ascii, _json_utf8, _pct, _pct_keep_slash, _pct_plus)


def encoded_forms(secret):
    """Every byte string under which ``secret`` (a str) can appear in a log line: raw (UTF-8), escaped as
    Python's ``repr`` does (either quote style), as JSON does (ASCII-only or not), percent-encoded (with
    ``/`` kept or not, ``+`` for a space, upper- or lowercase hex), and each of these escaped once more by
    any of them (a repr inside a JSON log record, a repr of a repr). Longest first, no duplicates."""
    forms = set()
    for outer in ENCODERS:
        for inner in ENCODERS:
            form = outer(inner(secret)).encode("utf-8", "surrogatepass")
            forms.add(form)
            forms.add(_PCT.sub(lambda m: m.group(0).lower(), form))
    forms.discard(b"")
    return sorted(forms, key=lambda f: (-len(f), f))


class Redactor(object):
    """Replace every secret in a byte stream with ``***``; everything else passes unchanged and in order.

    ``feed(data)`` returns what can be written now; ``flush()`` returns the rest at end of file. Occurrences
    that overlap (two secrets sharing bytes, a secret repeated into itself) become one ``***``; an occurrence
    that starts inside an already written mask extends it (nothing more is written for it). Memory: the held
    bytes (< the longest form) plus as much context before them, and one read."""

    def __init__(self, secrets):
        forms = set()
        for secret in secrets:
            if isinstance(secret, str) and len(secret) >= MIN_SECRET_LENGTH:
                forms.update(encoded_forms(secret))
        self.forms = sorted(forms, key=lambda f: (-len(f), f))
        self.longest = len(self.forms[0]) if self.forms else 0
        self.by_first = {}
        for form in self.forms:
            self.by_first.setdefault(form[:1], []).append(form)
        self.buf = bytearray()  # stream bytes from position self.base on: context, then held bytes
        self.base = 0
        self.emitted = 0  # stream position up to which output was produced
        self.masked_to = -1  # stream position where the last written mask ends

    @property
    def held(self):
        """Bytes read but not written yet."""
        return bytes(self.buf[self.emitted - self.base:])

    def feed(self, data):
        if not self.forms:
            return bytes(data)
        if not data:
            return b""
        self.buf += data
        out = self._emit(final=False)
        keep_from = max(self.base, self.emitted - (self.longest - 1))
        if keep_from > self.base:
            del self.buf[:keep_from - self.base]
            self.base = keep_from
        return out

    def flush(self):
        """Everything still held (end of file: a held prefix was not a secret)."""
        if not self.forms:
            return b""
        out = self._emit(final=True)
        self.base, self.buf = self.emitted, bytearray()
        return out

    # ------------------------------------------------------------------ internals
    def _occurrences(self):
        """Merged [start, end) stream intervals of every occurrence that ends after ``emitted``."""
        found = []
        buf, base = self.buf, self.base
        for form in self.forms:
            i = buf.find(form)
            while i >= 0:
                if base + i + len(form) > self.emitted:
                    found.append((base + i, base + i + len(form)))
                i = buf.find(form, i + 1)
        found.sort()
        merged = []
        for start, end in found:
            if merged and start < merged[-1][1]:
                if end > merged[-1][1]:
                    merged[-1][1] = end
            else:
                merged.append([start, end])
        return merged

    def _hold_from(self):
        """Earliest stream position from which the held-back end of the stream could begin a secret."""
        end = self.base + len(self.buf)
        lo = max(self.emitted, end - (self.longest - 1))
        best = end
        for first, forms in self.by_first.items():
            i = self.buf.find(first, lo - self.base)
            while i >= 0 and self.base + i < best:
                tail = bytes(self.buf[i:])
                if any(len(f) > len(tail) and f.startswith(tail) for f in forms):
                    best = self.base + i
                    break
                i = self.buf.find(first, i + 1)
        return best

    def _emit(self, final):
        end = self.base + len(self.buf)
        merged = self._occurrences()
        cut = end if final else self._hold_from()
        for start, stop in merged:
            if start < cut < stop:
                cut = stop
        out = bytearray()
        pos = self.emitted
        for start, stop in merged:
            if start >= cut:
                break
            if start > pos:
                out += self.buf[pos - self.base:start - self.base]
            if start >= self.emitted or self.masked_to < self.emitted:
                out += MASK
            # else: it continues the mask written last time (its first bytes were inside it)
            pos = stop
            self.masked_to = stop
        if cut > pos:
            out += self.buf[pos - self.base:cut - self.base]
        self.emitted = max(self.emitted, cut)
        return bytes(out)


# ------------------------------------------------------------------ the log writer process
# argv of the log writer: python -I -S -c BOOTSTRAP <fd> <label>. It reads this file's source and the JSON
# config, separated by a NUL byte, from <fd> until end of file, then runs serve(config) on stdin/stdout.
BOOTSTRAP = (
    "import os,signal,sys;"
    "[signal.signal(s,signal.SIG_IGN) for s in (signal.SIGHUP,signal.SIGINT,signal.SIGTERM)];"
    "f=int(sys.argv[1]);d=b''.join(iter(lambda:os.read(f,65536),b''));os.close(f);"
    "s,_,c=d.partition(b'\\0');g={'__name__':'sglang_redact'};"
    "exec(compile(s,'sglang_redact.py','exec'),g);g['serve'](c)"
)


def writer_argv(python, fd, label):
    """The log writer's command line: the interpreter, the bootstrap, the config descriptor, a label for ps."""
    return [python, "-I", "-S", "-c", BOOTSTRAP, str(fd), label]


def writer_payload(source, secrets, user=None):
    """What the log writer reads from its config descriptor: this module's source, NUL, the JSON config
    (the secrets, and ``user``: (uid, gid, groups) to switch to before the first read of the server's output)."""
    if isinstance(source, str):
        source = source.encode("utf-8")
    config = {"secrets": list(secrets), "user": [user[0], user[1], list(user[2])] if user else None}
    return source + b"\0" + json.dumps(config).encode("utf-8")


def _write_all(fd, data, write):
    """Write all of ``data``; False when the file refuses it (disk full): that output is lost, never the
    server's pipe, which keeps being read."""
    view = memoryview(data)
    while view:
        try:
            n = write(fd, view)
        except OSError:
            return False
        view = view[n:]
    return True


def serve(config, in_fd=0, out_fd=1, read=os.read, write=os.write):
    """The log writer: copy ``in_fd`` (the server's output) to ``out_fd`` (the log file) through the
    redactor until end of file. Stop signals are ignored: the server's end closes the pipe, and then the
    last held bytes are written. Started by root, it switches to the service user (``user`` of the config)
    after its code is loaded and before it reads a byte of the server's output: so it can run the module's
    interpreter wherever that lives (a venv under /root, say). Returns the number of bytes that could not
    be written."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    if isinstance(config, (bytes, bytearray)):
        config = config.decode("utf-8")
    config = json.loads(config)
    redactor = Redactor(config["secrets"])
    user = config.get("user")
    config = None
    if user and os.geteuid() == 0:
        os.setgroups(user[2])
        os.setgid(user[1])
        os.setuid(user[0])
    lost = 0
    while True:
        data = read(in_fd, READ_SIZE)
        if not data:
            break
        out = redactor.feed(data)
        if out and not _write_all(out_fd, out, write):
            lost += len(out)
    out = redactor.flush()
    if out and not _write_all(out_fd, out, write):
        lost += len(out)
    return lost
