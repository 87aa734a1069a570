"""module_utils/sglang_redact.py: the streaming redactor between the server's output and its log file, and the
supervisor's LogCopy (sglang_supervisor) that runs it on the server's pipe.

The property every test leans on: whatever the chunking of the stream, the redactor's output equals the
whole-stream reference (every occurrence of every encoded form found in the complete stream, overlapping ones
merged, each merged run replaced by ``***``), so no byte is lost, added or moved and no secret byte is written."""
from __future__ import annotations

import errno
import json
import os
import random
from urllib.parse import quote, quote_plus

import pytest

from ansible.module_utils import sglang_redact as sr
from ansible.module_utils import sglang_supervisor
from ansible.module_utils.sglang_redact import MASK, Redactor, encoded_forms

KEY = "molecule-cpu-secret-4b1e0d"
TRICKY = "k3y'with\"quotes\\back/slash é ü\n\ttab%+&="


def reference(stream, secrets):
    """Whole-stream redaction: merge overlapping occurrences of every form, replace each run with ***."""
    forms = set()
    for s in secrets:
        if len(s) >= sr.MIN_SECRET_LENGTH:
            forms.update(encoded_forms(s))
    spans = []
    for f in forms:
        i = stream.find(f)
        while i >= 0:
            spans.append((i, i + len(f)))
            i = stream.find(f, i + 1)
    spans.sort()
    merged = []
    for a, b in spans:
        if merged and a < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, pos = bytearray(), 0
    for a, b in merged:
        out += stream[pos:a] + MASK
        pos = b
    return bytes(out + stream[pos:])


def stream_through(secrets, pieces):
    r = Redactor(secrets)
    out = b"".join(r.feed(p) for p in pieces)
    return out + r.flush()


def chunks(data, cuts):
    cuts = [0] + sorted(cuts) + [len(data)]
    return [data[a:b] for a, b in zip(cuts, cuts[1:])]


SERVER_ARGS = ("[2026-12-03 10:00:00] server_args={'model_path': '/data/models/tiny-llama', 'api_key': %r, "
               "'admin_api_key': None, 'port': 30000}\n" % KEY).encode()


def test_no_secrets_is_a_plain_copy():
    r = Redactor([])
    data = b"any bytes \x00\xff\r\n" * 100
    assert r.feed(data) == data and r.flush() == b""
    assert r.held == b""


def test_real_sglang_server_args_line_is_redacted():
    out = stream_through([KEY], [SERVER_ARGS])
    assert out == SERVER_ARGS.replace(KEY.encode(), b"***")
    assert b"'api_key': '***'" in out


@pytest.mark.parametrize("render", [
    lambda s: "api_key=%s" % s,
    lambda s: "server_args=ServerArgs(api_key=%r, port=1)" % s,
    lambda s: "server_args=%r" % {"api_key": s, "port": 1},
    lambda s: "args=%r" % [repr(s)],  # a repr of a repr
    lambda s: json.dumps({"api_key": s}),
    lambda s: json.dumps({"api_key": s}, ensure_ascii=False),
    lambda s: json.dumps({"msg": "server_args=%r" % {"api_key": s}}),  # a repr inside a JSON log record
    lambda s: "GET /v1/models?key=%s HTTP/1.1" % quote(s, safe=""),
    lambda s: "GET /v1/models?key=%s HTTP/1.1" % quote(s),
    lambda s: "GET /v1/models?key=%s HTTP/1.1" % quote(s, safe="").lower(),
    lambda s: "POST body key=%s" % quote_plus(s),
    lambda s: "Authorization: Bearer %s" % s,
], ids=["raw", "dataclass_repr", "dict_repr", "repr_of_repr", "json", "json_utf8", "json_of_repr", "pct",
        "pct_slash", "pct_lower_hex", "pct_plus", "header"])
@pytest.mark.parametrize("secret", [KEY, TRICKY], ids=["plain_key", "tricky_key"])
def test_every_encoded_form_is_redacted(render, secret):
    line = ("[2026-12-03 10:00:00 TP0] " + render(secret) + "\n").encode("utf-8")
    out = stream_through([secret], [line])
    assert out == reference(line, [secret])
    assert b"***" in out
    for form in encoded_forms(secret):
        assert form not in out
    assert out.startswith(b"[2026-12-03 10:00:00 TP0] ") and out.endswith(b"\n")


def test_a_secret_split_at_every_position_is_caught():
    data = b"before " + SERVER_ARGS + b"after\n"
    want = reference(data, [KEY])
    assert KEY.encode() not in want
    for cut in range(1, len(data)):
        assert stream_through([KEY], [data[:cut], data[cut:]]) == want, cut


def test_byte_by_byte_equals_whole():
    data = SERVER_ARGS * 3 + json.dumps({"k": TRICKY}).encode() + b"\n"
    assert stream_through([KEY, TRICKY], [bytes([b]) for b in data]) == reference(data, [KEY, TRICKY])


def test_random_chunkings_equal_the_whole_stream_reference():
    rng = random.Random(13)
    secrets = [KEY, TRICKY, "abcd", "cdef", "zzzz"]
    alphabet = b"abcdefz \n\r'\"\\%"
    for _ in range(300):
        parts = []
        for _ in range(rng.randint(1, 30)):
            if rng.random() < 0.3:
                s = rng.choice(secrets)
                parts.append(rng.choice(encoded_forms(s)))
            else:
                parts.append(bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
        data = b"".join(parts)
        cuts = rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(0, 20))) if len(data) > 1 else []
        assert stream_through(secrets, chunks(data, cuts)) == reference(data, secrets)


def test_overlapping_secrets_become_one_mask_and_leak_nothing():
    data = b"x abcdef y\n"
    for cut in range(1, len(data)):
        out = stream_through(["abcd", "cdef"], [data[:cut], data[cut:]])
        assert out == b"x *** y\n", cut


def test_a_secret_overlapping_itself_is_one_mask_and_neighbours_are_two():
    assert stream_through(["aaaa"], [b"<aaaaaaa>"]) == b"<***>"
    assert stream_through(["aaaa"], [b"<aaaaaaaa>"]) == b"<***>"
    assert stream_through(["abab"], [b"<abababab>"]) == b"<***>"
    assert stream_through(["abcd"], [b"<abcdabcd>"]) == b"<******>"
    for cut in range(1, 10):
        assert stream_through(["aaaa"], [b"<aaaaaaaa>"[:cut], b"<aaaaaaaa>"[cut:]]) == b"<***>"


def test_multiple_secrets_on_one_line():
    line = ("api_key=%r hf=%s other=%s\n" % (KEY, "hf_" + "x" * 30, json.dumps(TRICKY))).encode()
    out = stream_through([KEY, "hf_" + "x" * 30, TRICKY], [line])
    assert out == b"api_key='***' hf=*** other=\"***\"\n"


def test_progress_lines_with_cr_are_written_at_once():
    r = Redactor([KEY])
    bar = b"\rLoading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.2it/s]"
    assert r.feed(bar) == bar and r.held == b""
    assert r.feed(b"\rdone 100%\n") == b"\rdone 100%\n"


def test_only_a_possible_secret_start_is_held_and_released_by_the_next_byte():
    r = Redactor([KEY])
    assert r.feed(b"api_key='molecule-c") == b"api_key='"
    assert r.held == b"molecule-c"
    assert r.feed(b"at'\n") == b"molecule-cat'\n"  # not the key after all: every byte written, in order
    assert r.held == b""
    assert r.feed(b"key=molecule-cpu-sec") == b"key="
    assert r.feed(b"ret-4b1e0d\n") == b"***\n"


def test_held_bytes_never_exceed_the_longest_form_and_eof_writes_them():
    r = Redactor([KEY])
    longest = max(len(f) for f in encoded_forms(KEY))
    assert r.feed(b"x" + KEY.encode()[:-1]) == b"x"
    assert len(r.held) == len(KEY) - 1 < longest
    assert r.flush() == KEY.encode()[:-1]  # end of file: a prefix alone is not the secret


def test_huge_line_without_newline_keeps_memory_bounded():
    r = Redactor([KEY, TRICKY])
    longest = max(len(f) for s in (KEY, TRICKY) for f in encoded_forms(s))
    block = (b"y" * 65530 + KEY.encode())  # the key straddles every 64 KiB read
    data = block * 128  # 8 MiB, one line
    out = bytearray()
    for i in range(0, len(data), 65536):
        out += r.feed(data[i:i + 65536])
        assert len(r.held) < longest
        assert len(r.buf) <= 2 * longest + 65536
    out += r.flush()
    assert bytes(out) == (b"y" * 65530 + b"***") * 128


def test_short_secrets_are_not_redacted():
    assert Redactor(["abc", "", None]).forms == []
    assert stream_through(["1", KEY], [b"rank 1 key " + KEY.encode()]) == b"rank 1 key ***"


def test_encoded_forms_are_distinct_and_longest_first():
    forms = encoded_forms(TRICKY)
    assert len(forms) == len(set(forms)) and b"" not in forms
    assert [len(f) for f in forms] == sorted((len(f) for f in forms), reverse=True)
    assert encoded_forms(KEY) == [KEY.encode()]  # a key of URL-safe characters has one form


# ------------------------------------------------------------------ the supervisor's LogCopy, on pipes (no process)
# LogCopy.run() is called in the test's own thread: no thread is started, nothing sleeps. Short writes and a log
# that refuses a write (disk full) are write_all's; /dev/full refuses every write with ENOSPC.
class ShortWrites(object):
    def __init__(self, fail_writes=0):
        self.written = bytearray()
        self.fail_writes = fail_writes

    def write(self, fd, data):
        if self.fail_writes:
            self.fail_writes -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        n = min(len(data), 7)  # short writes
        self.written += bytes(data[:n])
        return n


def test_write_all_continues_short_writes_and_reports_a_refused_write():
    out = ShortWrites()
    assert sr.write_all(1, SERVER_ARGS, out.write) and bytes(out.written) == SERVER_ARGS
    out = ShortWrites(fail_writes=1)
    assert not sr.write_all(1, b"first line\n", out.write) and out.written == b""


def copy_through(data, sizes, log_fd, secrets=(KEY,), echo=True):
    """LogCopy.run() on a real pipe fed ``data`` in ``sizes`` pieces (closed after); (echo bytes, the LogCopy)."""
    r, w = os.pipe()
    er, ew = os.pipe() if echo else (None, None)
    for part in chunks(data, sizes):
        os.write(w, part)  # the test's data fits a pipe's buffer: no write blocks
    os.close(w)
    copy = sglang_supervisor.LogCopy(r, log_fd, list(secrets), echo_fd=ew)
    copy.run()
    echoed = b""
    if echo:
        os.close(ew)
        echoed = b"".join(iter(lambda: os.read(er, 65536), b""))
        os.close(er)
    return echoed, copy


def test_log_copy_writes_the_pipe_redacted_into_the_log_and_the_journal_until_eof(tmp_path):
    data = SERVER_ARGS + b"tail without newline " + KEY.encode()[:5]
    fd = os.open(str(tmp_path / "sglang_r1.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    echoed, copy = copy_through(data, [10, 40, 41, len(data) - 3], fd)
    os.close(fd)
    assert (tmp_path / "sglang_r1.log").read_bytes() == reference(data, [KEY]) == echoed
    assert KEY.encode() not in echoed and copy.lost == 0
    with pytest.raises(OSError):
        os.fstat(copy.pipe_fd)  # closed at end of file


def test_log_copy_keeps_reading_the_server_when_the_log_cannot_be_written():
    fd = os.open("/dev/full", os.O_WRONLY)
    data = b"first line\n" + SERVER_ARGS
    echoed, copy = copy_through(data, [len(data)], fd)
    os.close(fd)
    assert echoed == reference(data, [KEY])  # the pipe was read to its end: the server never blocks on a full disk
    assert copy.lost == len(echoed)  # every byte the log refused is counted
