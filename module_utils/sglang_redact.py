# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keep secrets out of the server's log: a streaming redactor between the server's output and its log file.

Standard library only. SGLang logs its ``server_args`` at INFO, ``api_key`` included, and a server's
output can carry any secret of its environment. The supervisor (``sglang_supervisor``, both launchers) therefore
gives the server a pipe for stdout and stderr, and its ``LogCopy`` thread copies the pipe into the attempt's log
through :class:`Redactor`, which replaces every secret with ``***`` in every encoded form a log line can show
(:func:`encoded_forms`).

Nothing but the secrets is changed: no byte is lost, added or reordered. A secret split across two reads
is still caught: only the bytes at the end of the stream that could begin a secret are held back (at most
the longest form's length - 1), and they are written as soon as the next byte shows they are not one, or
at end of file. There is no timer: a complete line (ending in ``\\n`` or a progress bar's ``\\r``) is written
at once unless a secret starts with that byte, and a partial secret is never written because the stream
paused.
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote, quote_plus

MASK = b"***"
# Shorter secrets are not redacted (the module warns): masking every "1" of a log destroys it, and a value
# that short protects nothing.
MIN_SECRET_LENGTH = 4
READ_SIZE = 65536  # one read of the server's pipe (LogCopy)

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


def write_all(fd, data, write):
    """Write all of ``data`` (short writes continued); False when the file refuses it (disk full): that output is
    lost, never the server's pipe, which keeps being read (``sglang_supervisor.LogCopy``)."""
    view = memoryview(data)
    while view:
        try:
            n = write(fd, view)
        except OSError:
            return False
        view = view[n:]
    return True
