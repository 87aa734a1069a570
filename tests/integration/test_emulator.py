"""Integration tests: the SGLang emulator as a real process tree on a free loopback port, one run per scenario.

Each test starts the emulator package (tests/emulator, run from the tree) the way wait_for_model does (own session, stdout+stderr into a log file),
talks to it over HTTP, reads its log and /proc, and kills its session at the end whatever happened.
"""

from __future__ import annotations

import glob
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from ansible_run import TARGET_PYTHON, free_port, install_sglang_files

from emulator_proc import (  # the harness (test_emulator_drain.py takes it from there too)
    BANNER, CORPUS, EMULATOR, FAST, LOAD_SECONDS, READY, REPO, SIGQUIT, Emulator, proc_children, session_left,
)


@pytest.fixture
def start(tmp_path):
    started = []

    def _start(*args, **kwargs):
        emulator = Emulator(tmp_path, *args, **kwargs)
        started.append(emulator)
        return emulator

    yield _start
    for emulator in started:
        emulator.stop()


@pytest.fixture(scope="module")
def sglang_root(tmp_path_factory):
    """An 'installed' sglang package dir holding the real 0.5.23 eagle_worker_v2.py and scheduler.py (the emulator's
    eagle scenario reads them)."""
    return install_sglang_files(tmp_path_factory.mktemp("site"))


def watcher(emu):
    """The project's log watcher (module_utils/sglang_log.py) on the emulator's log: its summary, or None if absent."""
    path = os.path.join(REPO, "module_utils", "sglang_log.py")
    if not os.path.isfile(path):
        return None
    # the project's module_utils as ansible.module_utils (tests/conftest.py puts it there): its files import one
    # another relatively
    from ansible.module_utils import sglang_log
    return sglang_log.classify_file(emu.log_path).summary()


def assert_watcher(emu, state, crash_class=None):
    summary = watcher(emu)
    if summary is None:
        return
    assert summary["state"] == state, summary
    assert emu.text().startswith("[EMULATOR] "), emu.text()[:200]  # its banner: the watcher does not know it
    if crash_class:
        assert summary["crash_class"] == crash_class, summary


def _ordered(text, needles):
    pos = -1
    for needle in needles:
        nxt = text.find(needle, pos + 1)
        assert nxt > pos, "%r missing or out of order in:\n%s" % (needle, text)
        pos = nxt


def test_normal_startup_endpoints_children_and_sigterm(start):
    emu = start("--tp-size", "2", "--served-model-name", "llama", *FAST)
    emu.wait_for(READY)
    text = emu.text()
    assert BANNER.match(text.splitlines()[0])
    _ordered(text, [
        "] server_args=ServerArgs(", " TP0] Load weight begin. avail mem=",
        "\rLoading safetensors checkpoint shards:  50% Completed | 2/4 [", " TP0] Load weight end. ",
        " TP0] KV Cache is allocated. #tokens: ", " TP0] Memory pool end. ", " TP0] Capture cuda graph begin. ",
        " TP0] Capture cuda graph end. ", " TP0] max_total_num_tokens=",
        "] INFO:     Started server process [%d]" % emu.pid,
        "] INFO:     Uvicorn running on http://127.0.0.1:%d (Press CTRL+C to quit)" % emu.port,
        " TP0] Prefill batch. #new-seq: 1, ", '"POST /generate HTTP/1.1" 200 OK', "] " + READY,
    ])
    assert " TP1] Load weight begin." in text
    assert_watcher(emu, "ready")

    assert emu.request("/health")[0] == 200
    assert emu.request("/health_generate")[0] == 200
    status, info = emu.request("/get_model_info")
    assert status == 200 and info["emulator"] is True
    assert emu.request("/v1/models")[1]["data"][0]["id"] == "llama"
    status, out = emu.request("/generate", {"text": "Hello there", "sampling_params": {"max_new_tokens": 7}})
    assert status == 200 and out["meta_info"]["completion_tokens"] == 7 and len(out["output_ids"]) == 7
    assert out["meta_info"]["prompt_tokens"] == 2
    assert emu.request("/generate", {"text": "Hello there", "sampling_params": {"max_new_tokens": 7}})[1]["text"] \
        == out["text"]
    status, comp = emu.request("/v1/completions", {"model": "llama", "prompt": "Say hi", "max_tokens": 3})
    assert status == 200 and comp["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    status, batch = emu.request("/generate", {"text": ["a", "b c"], "sampling_params": {"max_new_tokens": 2}})
    assert status == 200 and [o["meta_info"]["prompt_tokens"] for o in batch] == [1, 2]
    stream_req = urllib.request.Request(
        "http://127.0.0.1:%d/generate" % emu.port, headers={"Content-Type": "application/json"},
        data=json.dumps({"text": "Hello there", "stream": True, "sampling_params": {"max_new_tokens": 7}}).encode())
    with urllib.request.urlopen(stream_req, timeout=5) as resp:
        assert resp.headers["Transfer-Encoding"] == "chunked"
        events = resp.read().decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e[len("data: "):]) for e in events[:-2]]
    # SGLang streams the text and ids so far, one event per decode step; finish_reason only in the last one.
    assert len(chunks) > 1 and chunks[-1]["text"] == out["text"] and chunks[-1]["output_ids"] == out["output_ids"]
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == list(range(1, 8))
    assert [c["meta_info"]["finish_reason"] for c in chunks[:-1]] == [None] * 6
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 7}
    # SGLang logs a decode line every 40 decode steps: a 120-token request crosses one (with speculation too).
    status, _ = emu.request("/generate", {"text": "long", "sampling_params": {"max_new_tokens": 120}})
    assert status == 200
    emu.wait_for(" TP0] Decode batch. #running-req: 1, ")
    assert emu.request("/nope")[0] == 404

    children = proc_children(emu.pid)
    # detokenizer + 2 schedulers (+ multiprocessing's resource tracker), all running Python
    assert len([pid for pid, state in children.items() if state != "Z"]) >= 3
    for pid in children:
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            assert b"multiprocessing" in handle.read()

    started = time.monotonic()
    emu.proc.send_signal(signal.SIGTERM)
    assert emu.wait_exit(5) == 0
    assert time.monotonic() - started < 3
    assert session_left(emu.pid) == []


def test_api_key_from_config_is_enforced_and_cli_overrides_config(start, tmp_path):
    port = free_port()
    cfg = tmp_path / "server.yaml"
    cfg.write_text('model-path: "/models/m"\napi_key: "s3cret"\nport: 1\nenable-metrics: true\n')
    emu = start("--config", str(cfg), "--port", str(port), *FAST, port=port)
    emu.wait_for(READY)
    assert emu.request("/get_model_info")[0] == 401
    assert emu.request("/get_model_info", headers={"Authorization": "Bearer wrong"})[0] == 401
    status, info = emu.request("/get_model_info", headers={"Authorization": "Bearer s3cret"})
    assert status == 200 and info["model_path"] == "/models/m"
    assert emu.request("/generate", {"text": "x"})[0] == 401
    assert emu.request("/health")[0] == 200  # health stays open, as in SGLang
    text = emu.text()
    # As SGLang does: server_args at INFO with the key in clear (keeping it off disk is the deployment's job),
    # and uvicorn's access line for every request, 401 included.
    assert "api_key='s3cret'" in text and text.count("s3cret") == 1
    assert '"GET /get_model_info HTTP/1.1" 401 Unauthorized' in text
    assert "ignoring SGLang options the emulator does not model: --enable-metrics true" in text


def test_crash_loading_traceback_sigquit_and_exit(start):
    emu = start("--emulator-scenario", "crash_loading", *FAST)
    rc = emu.wait_exit(10)
    text = emu.text()
    assert rc == -signal.SIGKILL  # SGLang's kill_process_tree includes the parent itself
    _ordered(text, ["Load weight begin.", " TP0] Scheduler hit an exception: Traceback (most recent call last):",
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "] " + SIGQUIT])
    assert READY not in text and "Uvicorn running" not in text
    assert session_left(emu.pid) == []
    assert_watcher(emu, "crashed", "cuda_oom")


def test_eagle_unpatched_crashes_on_first_client_decode(start, sglang_root):
    emu = start("--emulator-scenario", "eagle", "--speculative-algorithm", "EAGLE3",
                "--emulator-sglang-root", str(sglang_root), *FAST)
    emu.wait_for(READY)
    text = emu.text()
    digest = hashlib.sha256((sglang_root / "srt/speculative/eagle_worker_v2.py").read_bytes()).hexdigest()
    assert "sha256=%s" % digest in text
    assert "path=unpatched" in text
    assert "WARNING: EAGLE draft worker initialization failed in EAGLEWorkerV2.__init__" in text
    assert emu.request("/health_generate")[0] == 200  # warm-up and health checks survive
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
        emu.request("/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 8}})
    assert emu.wait_exit(5) == -signal.SIGKILL
    _ordered(emu.text(), [READY, " TP0] Scheduler hit an exception: Traceback (most recent call last):",
                          "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'",
                          "] " + SIGQUIT])
    assert_watcher(emu, "crashed")


def test_eagle_patched_decodes(start, sglang_root, tmp_path):
    from ansible.module_utils.early_init_plan import EarlyInitPatcher  # the patch's own code (tests/conftest.py)
    root = tmp_path / "patched" / "sglang"
    (root / "srt" / "speculative").mkdir(parents=True)
    source = (sglang_root / "srt/speculative/eagle_worker_v2.py").read_bytes()
    new = EarlyInitPatcher("x.py", "EAGLEWorkerV2", "__init__", {"spec_disable_batch_threshold": "0"},
                           "present").compute(source)["new"]
    (root / "srt" / "speculative" / "eagle_worker_v2.py").write_bytes(new)
    emu = start("--emulator-scenario", "eagle", "--speculative-algorithm", "EAGLE3",
                "--emulator-sglang-root", str(root), *FAST)
    emu.wait_for(READY)
    assert "path=patched" in emu.text()
    for _ in range(2):
        status, out = emu.request("/generate", {"text": "Hello", "sampling_params": {"max_new_tokens": 8}})
        assert status == 200 and out["meta_info"]["completion_tokens"] == 8
    assert emu.proc.poll() is None
    assert "Scheduler hit an exception" not in emu.text()


def test_eagle_without_installed_sglang_fails_clearly(start, tmp_path):
    emu = start("--emulator-scenario", "eagle", "--speculative-algorithm", "EAGLE3",
                "--emulator-sglang-root", str(tmp_path / "nowhere"), *FAST)
    assert emu.wait_exit(10) == 2
    assert "eagle scenario needs the installed sglang package" in emu.text()


def test_child_dies_parent_lives_health_generate_fails(start, monkeypatch):
    monkeypatch.setenv("SGLANG_HEALTH_CHECK_TIMEOUT", "1")  # SGLang's health window, shortened (20 s by default)
    emu = start("--emulator-scenario", "child_dies", "--emulator-child-die-after", "0.3", *FAST)
    emu.wait_for(READY)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if emu.request("/health_generate")[0] == 503:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("health_generate never failed:\n" + emu.text())
    assert emu.request("/health")[0] == 200  # the trap: plain /health still says fine
    assert emu.proc.poll() is None
    assert "Health check failed." in emu.text()
    assert "Scheduler hit an exception" not in emu.text()
    states = proc_children(emu.pid)
    assert "Z" in states.values()  # the dead scheduler, unreaped


def test_hang_prints_a_few_lines_then_nothing(start):
    emu = start("--emulator-scenario", "hang", *FAST)
    emu.wait_for("Load weight begin.")
    emu.stays_without("Load weight end.", 3 * LOAD_SECONDS)  # a normal load would have ended by then
    assert "Uvicorn running" not in emu.text()
    with pytest.raises(urllib.error.URLError):
        emu.request("/health", timeout=1)
    assert emu.proc.poll() is None
    assert_watcher(emu, "loading")
    emu.proc.send_signal(signal.SIGTERM)
    assert emu.wait_exit(5) == 0


def test_health_503_forever(start):
    emu = start("--emulator-scenario", "health_503", *FAST)
    emu.wait_for(READY)
    assert emu.request("/health")[0] == 503
    assert emu.request("/health_generate")[0] == 503
    assert emu.request("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})[0] == 200


def test_port_taken_scenario_reports_the_real_errno(start):
    emu = start("--emulator-scenario", "port_taken", *FAST)
    assert emu.wait_exit(10) == 1
    assert ("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', %d): address already in use"
            % emu.port) in emu.text()
    assert session_left(emu.pid) == []
    assert_watcher(emu, "crashed")


def test_busy_port_fails_like_uvicorn_in_normal_scenario(start):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        emu = start(*FAST, port=busy.getsockname()[1])
        assert emu.wait_exit(10) == 1
    assert "[Errno 98] error while attempting to bind on address" in emu.text()


def _corpus(name):
    path = os.path.join(CORPUS, name)
    if not os.path.isfile(path):
        pytest.fail("corpus copy missing: %s (the test data is part of the repository)" % path, pytrace=False)
    return path


def test_replay_ready_log_then_serves(start):
    path = _corpus("041-ready-eagle3-llama31-8b-docs-ci.log")
    emu = start("--emulator-scenario", "replay", "--emulator-replay", path, "--emulator-replay-speed", "1000")
    emu.wait_for("[2025-08-11 02:18:47] " + READY)
    deadline = time.monotonic() + 5
    while emu.request("/health")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert emu.request("/health")[0] == 200
    assert emu.request("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})[0] == 200
    with open(path, encoding="utf-8") as handle:
        assert handle.read().splitlines()[-1] in emu.text()


def test_replay_crashed_log_exits_1(start):
    path = _corpus("019-crash-eagle3-tuning-sigquit-exit-minus9.log")
    emu = start("--emulator-scenario", "replay", "--emulator-replay", path, "--emulator-replay-speed", "1000")
    assert emu.wait_exit(15) == 1
    assert "[2025-10-31 02:16:22] " + SIGQUIT in emu.text()


def test_replay_loading_log_hangs(start):
    path = _corpus("049-loading-deepseek-r1-2x8-h800-capture-begin.log")
    emu = start("--emulator-scenario", "replay", "--emulator-replay", path, "--emulator-replay-speed", "1000")
    with open(path, encoding="utf-8") as handle:
        last = handle.read().splitlines()[-1]
    emu.wait_for(last)
    emu.stays_without(READY, 3 * LOAD_SECONDS)  # the replay ends on a capture that never finishes
    assert emu.proc.poll() is None
    with pytest.raises(urllib.error.URLError):
        emu.request("/health", timeout=1)


def test_log_level_warning_never_prints_the_ready_line_but_serves(start):
    emu = start("--log-level", "warning", *FAST)
    deadline = time.monotonic() + 10
    status = None
    while time.monotonic() < deadline:
        try:
            status = emu.request("/health_generate", timeout=2)[0]
        except (urllib.error.URLError, ConnectionError):
            status = None
        if status == 200:
            break
        time.sleep(0.1)
    assert status == 200
    text = emu.text()
    assert READY not in text and "Load weight begin" not in text and "Uvicorn running" not in text
    assert BANNER.match(text)


def test_children_die_with_a_killed_leader(start):
    emu = start(*FAST)
    emu.wait_for(READY)
    children = [pid for pid, state in proc_children(emu.pid).items() if state != "Z"]
    assert len(children) >= 2
    emu.proc.send_signal(signal.SIGKILL)
    emu.wait_exit(5)
    assert session_left(emu.pid, timeout=3) == []


def _python39():
    """A Python 3.9 interpreter (the emulator's oldest supported), or None."""
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9")))
    candidates += [path for path in (shutil.which("python3.9"),) if path]
    for path in candidates:
        try:
            out = subprocess.run([path, "-c", "import sys; print(sys.version_info[:2] == (3, 9))"],
                                 capture_output=True, text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.strip() == "True":
            return path
    return None


def test_runs_on_python_3_9(tmp_path):
    python = _python39()
    if python is None:
        pytest.fail("no Python 3.9 interpreter found (pyenv's, or python3.9 on PATH): the emulator's oldest "
                    "supported Python is tested, never skipped", pytrace=False)
    port = free_port()
    log_path = tmp_path / "py39.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([python, EMULATOR, "--port", str(port)] + FAST,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while READY not in log_path.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")
            time.sleep(0.05)
        with urllib.request.urlopen("http://127.0.0.1:%d/health_generate" % port, timeout=5) as resp:
            assert resp.status == 200
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def test_installs_offline_as_a_package_with_its_console_script(tmp_path):
    # What the rehearsal inventories do through sglang_install_extra_packages: pip builds the package with its
    # own stdlib backend, so no index is needed; the module_utils links become plain files in the venv.
    venv = tmp_path / "venv"
    subprocess.run([TARGET_PYTHON, "-m", "venv", str(venv)], check=True, timeout=120)
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_DEPS="1", PIP_FIND_LINKS="")
    out = subprocess.run([str(venv / "bin" / "pip"), "install", os.path.join(REPO, "tests", "emulator")], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    (site,) = glob.glob(str(venv / "lib" / "python3*" / "site-packages"))
    for name in ("init_order.py", "sglang_paths.py"):
        installed = os.path.join(site, "sglang_emulator", name)
        assert not os.path.islink(installed)
        with open(installed, "rb") as a, open(os.path.join(REPO, "module_utils", name), "rb") as b:
            assert a.read() == b.read()
    run = subprocess.run([str(venv / "bin" / "sglang-emulator"), "--help"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    assert BANNER.match(run.stderr)
    assert "--emulator-scenario" in run.stdout


def test_health_in_a_long_prefill_waits_its_window_stays_resident_and_enough_resident_crash_the_scheduler(
        start, monkeypatch):
    """SGLang 0.5.23's health: while the scheduler is busy (the test control's long prefill, no output at all) a health
    request waits SGLANG_HEALTH_CHECK_TIMEOUT s and fails; the request stays resident in the scheduler, also when its
    client gave up; answered once the prefill ends; --emulator-health-resident-crash of them at once crash the
    scheduler (SGLang #35884: its tree then ends)."""
    monkeypatch.setenv("SGLANG_HEALTH_CHECK_TIMEOUT", "1")
    emu = start("--emulator-health-resident-crash", "3", *FAST)
    emu.wait_for(READY)
    assert emu.request("/health_generate")[0] == 200
    assert emu.request("/emulator/long_prefill", {"seconds": 3, "running": 2})[0] == 200
    assert emu.request("/v1/loads")[1]["loads"][0]["num_running_reqs"] == 2
    t0 = time.monotonic()
    assert emu.request("/health_generate")[0] == 503 and 0.9 <= time.monotonic() - t0 < 3
    assert emu.request("/emulator/health_state")[1]["resident"] == 1  # kept after its 503
    time.sleep(2.5)
    assert emu.request("/emulator/health_state")[1]["resident"] == 0  # the prefill is over: answered
    assert emu.request("/health_generate")[0] == 200
    assert emu.request("/emulator/long_prefill", {"seconds": 30, "running": 1})[0] == 200
    for _ in range(2):
        assert emu.request("/health_generate")[0] == 503
    assert emu.proc.poll() is None  # two resident: still up
    try:
        emu.request("/health_generate", timeout=0.3)  # the third: its client gives up, the scheduler crashes
    except OSError:
        pass
    emu.wait_exit(15)
    assert "health check requests are resident in the scheduler" in emu.text() and SIGQUIT in emu.text()
