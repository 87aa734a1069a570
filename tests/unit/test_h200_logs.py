"""Real SGLang 0.5.17 logs from the lent H200 (tests/data/h200-sglang, README there) replayed through the
log classifier: the verdict an operator must get from each, whole and as a growing file."""
from __future__ import annotations

import json
import os

import pytest

from ansible.module_utils.sglang_log import LogClassifier, classify_bytes, classify_file

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "h200-sglang")


def _path(name):
    return os.path.join(DATA, name)


def _read(name):
    with open(_path(name), "rb") as fh:
        return fh.read()


def _lines(name):
    return _read(name).decode("utf-8", "replace").split("\n")


def _lineno_of(name, text):
    return next(i for i, line in enumerate(_lines(name), 1) if text in line)


def _result(name):
    with open(os.path.join(DATA, "results", name)) as fh:
        return json.load(fh)


READY_LINE = "The server is fired up and ready to roll!"

# file -> (state, crash class, text of the deciding line)
VERDICTS = {
    # Ready, decoded through EAGLEWorkerV2, then stopped by wait_for_model state=stopped (SIGTERM to the tree):
    # 0.5.17 logs the orderly shutdown as "Subprocess scheduler_0 ... crashed with exit code -15. Triggering
    # SIGQUIT" right after "SIGTERM received ... Draining requests and shutting down". A stop we asked for is
    # not a crash: the verdict stays ready.
    "ready_eagle3.log": ("ready", None, READY_LINE),
    # --mem-fraction-static 0.999: torch.OutOfMemoryError while the draft's KV pool is allocated.
    "oom_mem_fraction_0.999.log": ("crashed", "cuda_oom", "Scheduler hit an exception"),
    # --mem-fraction-static 0.0005: 0.5.17's own check, "Loaded weights leave no GPU memory for the KV cache
    # under --mem-fraction-static=0.0005. Raise --mem-fraction-static above 0.001": the KV pool does not fit.
    "kv_pool_mem_fraction_0.0005.log": ("crashed", "kv_pool_oom", "Scheduler hit an exception"),
    # kill -9 of the real sglang::scheduler after ready: the launcher logs the child's exit code -9 and tears
    # the whole tree down with SIGQUIT; the log alone shows exactly that.
    "scheduler_kill9.log": ("crashed", "child_sigquit", "SIGQUIT received"),
    # 0.5.17's --config refuses deprecated flags (what the playbook first wrote into the config file).
    "bad_config_disable_cuda_graph.log": ("crashed", "bad_config", "Traceback (most recent call last):"),
    "bad_config_cuda_graph_backend_prefill.log": ("crashed", "bad_config", "Traceback (most recent call last):"),
}


def test_every_log_has_a_verdict():
    assert sorted(f for f in os.listdir(DATA) if f.endswith(".log")) == sorted(VERDICTS)


def test_ready_log_is_ready_at_the_ready_line_before_the_stop():
    """Up to the SIGTERM of our stop, the log is a ready EAGLE-3 server that decoded requests."""
    lines = _lines("ready_eagle3.log")
    cut = _lineno_of("ready_eagle3.log", "SIGTERM received")
    s = classify_bytes(("\n".join(lines[:cut - 1]) + "\n").encode()).summary()
    assert s["state"] == "ready"
    assert s["crash_class"] is None
    assert s["lineno"] == _lineno_of("ready_eagle3.log", READY_LINE)


def test_ready_log_shows_eagle3_and_its_draft_model():
    text = _read("ready_eagle3.log").decode()
    assert "type=LlamaForCausalLMEagle3" in text
    assert "speculative_algorithm='EAGLE3'" in text


def test_kill_log_before_the_kill_is_ready():
    lines = _lines("scheduler_kill9.log")
    cut = _lineno_of("scheduler_kill9.log", "crashed with exit code -9")
    s = classify_bytes(("\n".join(lines[:cut - 1]) + "\n").encode()).summary()
    assert (s["state"], s["crash_class"]) == ("ready", None)


def test_oom_log_names_the_torch_out_of_memory_error():
    s = classify_file(_path("oom_mem_fraction_0.999.log")).summary()
    assert s["exception"].startswith("torch.OutOfMemoryError: CUDA out of memory")


def test_module_results_match_the_logs():
    """What wait_for_model returned on the device agrees with the kept logs (same class, same line)."""
    oom = _result("oom_start.json")
    assert oom["crash_class"] == "cuda_oom"
    assert oom["deciding_line"] == _lines("oom_mem_fraction_0.999.log")[oom["deciding_lineno"] - 1]
    watch = _result("kill_watch.json")["watch"]
    assert watch["crash_class"] == "child_sigquit"
    assert watch["deciding_line"] == _lines("scheduler_kill9.log")[watch["deciding_lineno"] - 1]
    serve = _result("serve_start.json")
    assert "crash_class" not in serve and serve["health_polls"]["last"] == 200


def test_stop_freed_the_gpu():
    stop = _result("serve_stop.json")
    assert stop["nvidia_smi_before_stop"][1].startswith("30044 MiB")
    assert "sglang::scheduler" in stop["nvidia_smi_before_stop"][3]
    assert stop["nvidia_smi_after_stop"][1].startswith("0 MiB")
    assert stop["stop"]["stopped"]["remaining"] == []


# ---- tests/data/h200-sglang/run2: a run with the project at f0ac88b (README there, "Second run") ---------------
RUN2 = os.path.join(DATA, "run2")


def _read2(name):
    with open(os.path.join(RUN2, name), "rb") as fh:
        return fh.read()


def _lines2(name):
    return _read2(name).decode("utf-8", "replace").split("\n")


def _lineno2(name, text):
    return next(i for i, line in enumerate(_lines2(name), 1) if text in line)


def _result2(name):
    with open(os.path.join(RUN2, "results", name)) as fh:
        return json.load(fh)


def _stamp2(log, text):
    """Wall-clock time at which the 2 ms poller saw the first line of ``log`` containing ``text``."""
    with open(os.path.join(RUN2, "results", "log_stamps.tsv")) as fh:
        for row in fh:
            t, f, line = row.rstrip("\n").split("\t", 2)
            if f == log and text in line:
                return float(t)
    raise AssertionError("%s not stamped in %s" % (text, log))


VERDICTS2 = {
    # Ready (line 243), decoded, smoke burst, then our own stop: SIGTERM ... exit code -15 ... SIGQUIT. Ready.
    "ready_eagle3_stop.log": ("ready", None, READY_LINE),
    # kill -9 of sglang::scheduler: "crashed with exit code -9. Triggering SIGQUIT", then 0.5.17 sleeps 5 s
    # before it tears its tree down.
    "scheduler_kill9.log": ("crashed", "child_sigquit", "SIGQUIT received"),
    "oom_mem_fraction_0.999.log": ("crashed", "cuda_oom", "Scheduler hit an exception"),
    "kv_pool_mem_fraction_0.0005.log": ("crashed", "kv_pool_oom", "Scheduler hit an exception"),
}


def test_run2_every_log_has_a_verdict():
    assert sorted(f for f in os.listdir(RUN2) if f.endswith(".log")) == sorted(VERDICTS2)


# Both runs' logs: (folder, file name, expected verdict).
ALL_LOGS = [(DATA, n, v) for n, v in sorted(VERDICTS.items())] + [(RUN2, n, v) for n, v in sorted(VERDICTS2.items())]


@pytest.mark.parametrize("folder, name, verdict", ALL_LOGS, ids=[os.path.relpath(os.path.join(f, n), DATA)
                                                                 for f, n, _ in ALL_LOGS])
def test_h200_log_verdict(folder, name, verdict):
    state, crash_class, deciding = verdict
    path = os.path.join(folder, name)
    s = classify_file(path).summary()
    assert (s["state"], s["crash_class"]) == (state, crash_class)
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        assert deciding in f.read().split("\n")[s["lineno"] - 1]


@pytest.mark.parametrize("folder, name, verdict", ALL_LOGS, ids=[os.path.relpath(os.path.join(f, n), DATA)
                                                                 for f, n, _ in ALL_LOGS])
def test_h200_log_verdict_does_not_depend_on_chunking(folder, name, verdict):
    """The same verdict when the log arrives in pieces of 1, 2, 3, ... bytes (a live, growing file)."""
    with open(os.path.join(folder, name), "rb") as f:
        data = f.read()
    whole = classify_bytes(data).summary()
    clf = LogClassifier()
    pos, step = 0, 1
    while pos < len(data):
        clf.feed(data[pos:pos + step])
        pos += step
        step = step % 97 + 1
    clf.finalize()
    piece = clf.summary()
    assert (piece["state"], piece["crash_class"], piece["lineno"]) == (whole["state"], whole["crash_class"], whole["lineno"])


def test_run2_stop_log_stays_ready_and_names_the_stop():
    s = classify_file(os.path.join(RUN2, "ready_eagle3_stop.log")).summary()
    assert s["lineno"] == _lineno2("ready_eagle3_stop.log", READY_LINE) == 243
    assert s["stop"]["lineno"] == _lineno2("ready_eagle3_stop.log", "SIGTERM received")
    assert "crashed with exit code -15" in _lines2("ready_eagle3_stop.log")[s["stop"]["lineno"]]


def test_run2_kill_log_before_the_kill_is_ready():
    lines = _lines2("scheduler_kill9.log")
    cut = _lineno2("scheduler_kill9.log", "crashed with exit code -9")
    s = classify_bytes(("\n".join(lines[:cut - 1]) + "\n").encode()).summary()
    assert (s["state"], s["crash_class"]) == ("ready", None)


def test_run2_args_check_put_disable_cuda_graph_on_argv():
    """sglang_args_check config_refused=argv against the real 0.5.17 parser, and every launch used its config_argv."""
    a = _result2("argscheck.json")
    assert a["method"] == "sglang_parser" and a["values_checked"] is True
    assert a["config_refused_args"] == ["disable-cuda-graph"] and a["config_argv"] == ["--disable-cuda-graph"]
    for step in ("serve", "kill", "oom", "lowmem"):
        argv = _result2("%s_start.json" % step)["launched_argv"]
        assert argv[-3:] == ["--config", "/tmp/sglang/etc/sglang.yaml", "--disable-cuda-graph"]
    for name in VERDICTS2:
        assert "Unsupported config option" not in _read2(name).decode()


def test_run2_module_results_match_the_logs():
    serve = _result2("serve_start.json")
    assert "crash_class" not in serve and serve["health_polls"]["last"] == 200
    # ready-detection delay (upper bound: includes Ansible's turn-around): ~1.1 s
    assert 0 < serve["returned_at"] - _stamp2("sglang_r1.log", READY_LINE) < 2
    for step, log, cls in (("oom", "oom_mem_fraction_0.999.log", "cuda_oom"),
                           ("lowmem", "kv_pool_mem_fraction_0.0005.log", "kv_pool_oom")):
        r = _result2("%s_start.json" % step)
        assert r["crash_class"] == cls
        assert r["deciding_line"] == _lines2(log)[r["deciding_lineno"] - 1]


def test_run2_kill_watch_waited_for_the_process_side():
    """The log said child_sigquit ~0.6 s after the kill, but the parent lived 5 s more (0.5.17 sleeps before
    kill_process_tree): the watch answered only after the tree was gone, and the stop then found it gone."""
    k = _result2("kill_watch.json")
    assert "parent-alive" in k["kill"]
    watch = k["watch"]
    assert watch["crash_class"] == "child_sigquit"
    assert watch["deciding_line"] == _lines2("scheduler_kill9.log")[watch["deciding_lineno"] - 1]
    sigquit = _stamp2("sglang_r2.log", "SIGQUIT received")
    teardown = _stamp2("sglang_r2.log", "kill_process_tree called")
    assert 4.5 < teardown - sigquit < 6
    assert watch["elapsed"] > 4.5
    stop = _result2("kill_stop.json")
    assert stop["stop"]["stale_state"] == "PID %s is not running" % k["parent_pid"]
    assert stop["nvidia_smi_after_stop"][1].startswith("0 MiB")


def test_run2_stop_freed_the_gpu():
    stop = _result2("serve_stop.json")
    assert stop["nvidia_smi_before_stop"][1].startswith("30044 MiB")
    assert "sglang::scheduler" in stop["nvidia_smi_before_stop"][3]
    assert stop["nvidia_smi_after_stop"][1].startswith("0 MiB")
    assert stop["nvidia_smi_after_stop"][-1] == "0 MiB"
    assert stop["stop"]["stopped"]["remaining"] == [] and stop["stop"]["stopped"]["killed"] == []
