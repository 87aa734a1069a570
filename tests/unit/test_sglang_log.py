"""LogFollower (offsets, truncation, rotation) and LogClassifier edge cases not in the corpus."""
from __future__ import annotations

import os

import pytest

from ansible.module_utils.sglang_log import LogClassifier, LogFollower, classify_bytes, strip_prefix


def test_follower_reads_each_byte_once_and_keeps_partial_lines(tmp_path):
    p = tmp_path / "s.log"
    f = LogFollower(str(p))
    assert f.read() == b""  # not created yet
    p.write_bytes(b"line one\npart")
    assert f.read() == b"line one\npart"
    assert f.read() == b""
    with open(p, "ab") as fh:
        fh.write(b"ial\n")
    assert f.read() == b"ial\n"
    clf = LogClassifier()
    clf.feed(b"[2026-01-01 00:00:00] The server is fired ")
    assert clf.state == "loading"  # half a line decides nothing
    clf.feed(b"up and ready to roll!\n")
    assert clf.state == "ready"


def test_follower_restarts_after_truncation(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"a" * 100 + b"\n")
    f = LogFollower(str(p))
    f.read()
    p.write_bytes(b"new\n")  # copytruncate
    assert f.read() == b"new\n"
    assert f.truncations == 1


def test_follower_drains_the_old_file_then_follows_the_new_one(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"old 1\n")
    f = LogFollower(str(p))
    assert f.read() == b"old 1\n"
    with open(p, "ab") as fh:
        fh.write(b"old 2\n")
    os.rename(p, tmp_path / "s.log.1")
    p.write_bytes(b"new 1\n")
    assert f.read() == b"old 2\nnew 1\n"
    assert f.rotations == 1


def test_carriage_returns_nuls_and_crlf():
    data = (b"Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:01<00:03]\r"
            b"Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:02<00:02]\r\n"
            b"\x00\x00[17:43:23 TP6] Load weight end. type=X, avail mem=20.62 GB\r\n")
    clf = classify_bytes(data)
    assert clf.shards == (2, 4)
    assert clf.phase == "kv_cache"
    assert clf.lineno == 2


@pytest.mark.parametrize("prefix", [
    "", "[2025-09-22 14:35:35 DP1 TP3 EP3] ", "[17:43:23 TP6] ", "(SGLangEngine pid=6680) [2025-09-22 14:35:35] ",
    "2025-09-22T14:35:35.123456789Z ", "sglang-0 | ",
])
def test_crash_signatures_survive_every_prefix(prefix):
    data = (prefix + "Scheduler hit an exception: Traceback (most recent call last):\n"
            + prefix + '  File "/x/scheduler.py", line 1, in run_scheduler_process\n'
            + prefix + "    scheduler.event_loop_overlap()\n"
            + prefix + "RuntimeError: CUDA error: an illegal memory access was encountered\n").encode()
    s = classify_bytes(data).summary()
    assert s["state"] == "crashed" and s["crash_class"] == "cuda_error"
    assert s["lineno"] == 1


def test_newer_sigquit_wording_and_port_in_use():
    s = classify_bytes(b"[2026-01-01 00:00:00] SIGQUIT received. signum=None, frame=None. "
                       b"It usually means one child failed.\n").summary()
    assert s["crash_class"] == "child_sigquit"
    s = classify_bytes(b"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
                       b"address already in use\n").summary()
    assert s["crash_class"] == "port_in_use"


def test_a_recovered_traceback_and_benign_error_lines_are_not_crashes():
    data = (b"[2026-01-01 00:00:00] Ignore import error when loading sglang.srt.models.x: No module named 'x'\n"
            b"Traceback (most recent call last):\n"
            b'  File "/usr/lib/python3/dist-packages/foo.py", line 3, in probe\n'
            b"    import bar\n"
            b"ModuleNotFoundError: No module named 'bar'\n"
            b"[2026-01-01 00:00:01] Load weight begin. avail mem=70 GB\n"
            b'loc("/x/decode_attention.py":310:16): error: operation scheduled before its operands\n'
            b"[2026-01-01 00:00:02] Warning: ... may lead to incorrect model outputs or CUDA errors.\n")
    s = classify_bytes(data).summary()
    assert s["state"] == "loading" and s["crash_class"] is None


def test_killed_line_at_a_buffer_start_and_mid_buffer():
    assert classify_bytes(b"Killed\n").summary()["crash_class"] == "killed"
    s = classify_bytes(b"[2026-01-01 00:00:00] Load weight begin\nKilled\n").summary()
    assert s["crash_class"] == "killed" and s["lineno"] == 2
    clf = LogClassifier()
    clf.feed(b"[2026-01-01 00:00:00] Load weight begin\n")
    clf.feed(b"Killed\n")
    assert clf.summary()["crash_class"] == "killed"


def test_nvcc_error_summary_is_a_compile_error():
    s = classify_bytes(b"/tmp/k.cu(12): error: identifier \"x\" is undefined\n\n"
                       b"1 error detected in the compilation of \"/tmp/k.cu\".\n").summary()
    assert s["crash_class"] == "compile_error"


def test_strip_prefix():
    assert strip_prefix("[2025-01-01 00:00:00 TP0] hello") == ("hello", True)
    assert strip_prefix("(E pid=1) [12:00:00 DP1 TP1] hi") == ("hi", True)
    assert strip_prefix("plain") == ("plain", False)


def _eagle_crash_after(lines_after_ready):
    return ("[2026-12-02 14:34:15 TP0] Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, \n"
            "[2026-12-02 14:34:15 TP0] Decode batch. #running-req: 1, #token: 14, token usage: 0.00, \n"
            "[2026-12-02 14:34:15] The server is fired up and ready to roll!\n"
            + lines_after_ready +
            "[2026-12-02 14:34:17 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/x/sglang/srt/managers/scheduler.py", line 4674, in run_batch\n'
            "    batch_result = self.model_worker.forward_batch_generation(model_worker_batch)\n"
            "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'\n").encode()


def test_crash_on_the_first_client_request_after_a_warmup_that_decoded():
    first = _eagle_crash_after("[2026-12-02 14:34:17 TP0] Prefill batch. #new-seq: 1, #new-token: 1, #cached-token: 0, \n")
    s = classify_bytes(first).summary()
    assert s["crash_class"] == "first_request_crash" and "early-init patch" in s["hint"]
    later = _eagle_crash_after("[2026-12-02 14:34:17 TP0] Prefill batch. #new-seq: 1, #new-token: 1, #cached-token: 0, \n"
                               "[2026-12-02 14:34:17 TP0] Decode batch. #running-req: 1, #token: 40, \n")
    assert classify_bytes(later).summary()["crash_class"] == "python_exception"


def test_unknown_architecture_is_bad_config():
    # Real SGLang 0.5.23 on CPU with "architectures": ["NoSuchArchForCausalLM"] (molecule sglang-cpu, fault a).
    data = (b"[2026-12-02 14:20:01] Scheduler hit an exception: Traceback (most recent call last):\n"
            b'  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 3081, '
            b"in run_scheduler_process\n"
            b"    scheduler = Scheduler(\n"
            b'  File "/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/model_loader/utils.py", line 95, '
            b"in get_model_architecture\n"
            b"    raise ValueError(\n"
            b"ValueError: Cannot find model module. 'NoSuchArchForCausalLM' is not a registered model in the "
            b"Transformers library (only relevant if the model is meant to be in Transformers)\n")
    assert classify_bytes(data).summary()["crash_class"] == "bad_config"


def test_rotation_drains_all_of_the_old_file_even_past_one_read(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"a\n")
    f = LogFollower(str(p), max_read=4)
    assert f.read() == b"a\n"
    with open(p, "ab") as fh:
        fh.write(b"0123456789\n")  # more than one read's worth, written before the rotation
    os.rename(p, tmp_path / "s.log.1")
    p.write_bytes(b"new\n")
    got = b""
    for _ in range(20):  # bounded: a follower that never runs dry fails instead of looping forever
        chunk = f.read()
        if not chunk:
            break
        got += chunk
    else:
        pytest.fail("LogFollower.read() still returns data after 20 reads")
    assert got == b"0123456789\nnew\n"


def test_follower_starts_at_start_offset_and_still_sees_a_rewrite(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"old 1\nold 2\n")
    f = LogFollower(str(p), start_offset=6)
    assert f.read() == b"old 2\n"
    assert f.offset == 12 and f.truncations == 0
    p.write_bytes(b"new 1\nnew 2\nnew 3\n")  # copytruncate, rewritten past our offset
    assert f.read() == b"new 1\nnew 2\nnew 3\n"
    assert f.truncations == 1


def test_follower_start_offset_past_the_end_starts_at_zero(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"short\n")
    f = LogFollower(str(p), start_offset=1000)
    assert f.read() == b"short\n"
    assert f.truncations == 1


def test_follower_start_offset_of_a_file_not_there_yet(tmp_path):
    p = tmp_path / "s.log"
    f = LogFollower(str(p), start_offset=4)
    assert f.read() == b""
    p.write_bytes(b"ab\n")
    assert f.read() == b"ab\n"  # a new file, shorter than the offset


def test_follower_of_an_open_descriptor_path(tmp_path):
    """The module passes /proc/self/fd/N of a log it opened and checked: the follower reads that file, from
    the offset, and a rename or a new file at the old name never makes it switch (no false rotation)."""
    p = tmp_path / "s.log"
    p.write_bytes(b"one\ntwo\n")
    fd = os.open(str(p), os.O_RDONLY)
    try:
        f = LogFollower("/proc/self/fd/%d" % fd, start_offset=4)
        assert f.read() == b"two\n"
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # the caller's descriptor is not moved
        with open(p, "ab") as fh:
            fh.write(b"three\n")
        assert f.read() == b"three\n"
        os.rename(p, tmp_path / "s.log.1")
        p.write_bytes(b"other file\n")
        with open(tmp_path / "s.log.1", "ab") as fh:
            fh.write(b"four\n")
        assert f.read() == b"four\n"
        assert f.read() == b""
        assert f.rotations == 0
        with open(tmp_path / "s.log.1", "r+b") as fh:
            fh.truncate(0)
            fh.write(b"cut\n")
        assert f.read() == b"cut\n"
        assert f.truncations == 1
        f.close()
    finally:
        os.close(fd)
