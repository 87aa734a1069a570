"""The API key and the other secrets never reach a file other than the server's config: the real wait_for_model,
run by Ansible (AnsiballZ ships module_utils/sglang_redact.py to the log writer), on a TEST-ONLY server that
prints its secrets the ways real servers do (secret_printing_server.py); and the real log writer process alone."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote

import pytest

from ansible.module_utils import sglang_proc
from ansible.module_utils.sglang_redact import encoded_forms

import wait_for_model as wfm
from ansible_run import EMULATOR, TARGET_PYTHON, free_port, run_module

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "secret_printing_server.py")
KEY = "it-api-key-'quoted'/7f3a9c"
HF = "hf_integration_token_5d2e"
EXTRA = "extra-secret-b81c"
SECRETS = (KEY, HF, EXTRA)
USER = "nobody"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs the server as another user: needs root")


def hits(top):
    """{path: [secret]} of every file under ``top`` that holds any encoded form of any secret."""
    found = {}
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                data = fh.read()
            bad = [s for s in SECRETS if any(f in data for f in encoded_forms(s))]
            if bad:
                found[path] = bad
    return found


def proc_text(pid, what):
    with open("/proc/%d/%s" % (pid, what), "rb") as fh:
        return fh.read()


@pytest.fixture
def deployment():
    """A config dir the service user can read (the key only there, 0600, the user's), a root-owned log dir."""
    top = tempfile.mkdtemp(prefix="eagle-redact-")
    os.chmod(top, 0o755)
    pw = pwd.getpwnam(USER)
    config = os.path.join(top, "server.yaml")
    with open(config, "w") as fh:
        fh.write("api-key: %s\n" % json.dumps(KEY))
    os.chown(config, pw.pw_uid, pw.pw_gid)
    os.chmod(config, 0o600)
    log_dir = os.path.join(top, "logs")
    os.mkdir(log_dir, 0o755)
    port = free_port()
    d = {"top": top, "config": config, "log_dir": log_dir, "port": port, "uid": pw.pw_uid}
    yield d
    run_module("wait_for_model", {"name": "red", "state": "stopped", "log_dir": log_dir, "on_foreign_pid": "ignore"})
    shutil.rmtree(top, ignore_errors=True)


def module_args(d, **kw):
    a = {"name": "red", "argv": [TARGET_PYTHON, SERVER, "--config", d["config"], "--port", str(d["port"])],
         "log_dir": d["log_dir"], "run_as": USER, "chdir": d["top"], "fingerprint_files": [d["config"]],
         "health_url": "http://127.0.0.1:%d/health" % d["port"], "api_key": KEY,
         "secret_environment": {"HF_TOKEN": HF}, "redact": [EXTRA], "timeout": 60, "stall_timeout": 30}
    a.update(kw)
    return a


# The second case runs the module with this venv's interpreter, which lives where the service user cannot reach
# (/root): the log writer starts as root and switches to the service user itself.
@pytest.mark.parametrize("cgroup, python", [(True, TARGET_PYTHON), (False, sys.executable)],
                         ids=["own_cgroup", "session_root_only_interpreter"])
def test_no_secret_reaches_the_log_dir_and_the_last_lines_survive_the_stop(deployment, cgroup, python):
    d = deployment
    r = run_module("wait_for_model", module_args(d, cgroup=cgroup), python=python)
    assert not r.get("failed"), r.get("msg")
    assert r["tree_tracking"] == ("cgroup" if cgroup and sglang_proc.cgroup2_mount() else "session")
    state = sglang_proc.read_state(d["log_dir"], "red")
    writer, leader = r["log_writer_pid"], r["pid"]
    assert state["pid"] == leader and state["log_writer"]["pid"] == writer
    assert proc_text(leader, "cmdline").split(b"\0")[1] == SERVER.encode()  # the leader is the server itself
    # The log writer: the service user's, no secret in its argv, environment or anyone's ps line.
    assert sglang_proc.proc_uid(writer) == d["uid"]
    for secret in SECRETS:
        assert secret.encode() not in proc_text(writer, "cmdline")
        assert secret.encode() not in proc_text(writer, "environ")
        assert secret not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert sorted(os.listdir("/proc/%d/fd" % writer)) == ["0", "1", "2"]  # the config pipe is closed
    if r["tree_tracking"] == "cgroup":
        assert sglang_proc.proc_cgroup(writer) == sglang_proc.proc_cgroup(leader)
    with open(r["log_path"], "rb") as fh:
        log = fh.read()
    assert b"server_args={'model_path': '/models/tiny', 'api_key': \"***\", 'port'" in log  # repr of a str with '

    assert b"server_args=ServerArgs(model_path='/models/tiny', api_key=\"***\", port=" in log
    assert b'"api_key": "***"' in log
    assert b"GET /v1/models?api_key=*** HTTP/1.1" in log
    assert b"HF token: ***\n" in log and b"split key: *** end\n" in log and b"[child] api_key=***\n" in log
    assert b"\rLoading safetensors checkpoint shards: 1/2 [progress]\n" in log
    assert hits(d["top"]) == {d["config"]: [KEY]}  # the key in its config file, and nowhere else

    stopped = run_module("wait_for_model", {"name": "red", "state": "stopped", "log_dir": d["log_dir"]})
    assert not stopped.get("failed"), stopped.get("msg")
    assert leader in stopped["stopped"]["signalled"] and writer not in stopped["stopped"]["signalled"]
    assert stopped["stopped"]["killed"] == []  # the log writer ended by itself at end of file
    assert not sglang_proc.pid_alive(writer)
    with open(r["log_path"], "rb") as fh:
        log = fh.read()
    assert log.endswith(b"SIGTERM received, shutting down (api_key=***)\nLAST LINE\n")
    assert hits(d["top"]) == {d["config"]: [KEY]}


def test_without_secrets_the_server_writes_its_log_file_itself(deployment):
    d = deployment
    r = run_module("wait_for_model", module_args(d, api_key=None, secret_environment={}, redact=[],
                                                 argv=[TARGET_PYTHON, SERVER, "--port", str(d["port"])]))
    assert not r.get("failed"), r.get("msg")
    assert "log_writer_pid" not in r and "log_writer" not in sglang_proc.read_state(d["log_dir"], "red")
    assert os.readlink("/proc/%d/fd/1" % r["pid"]) == r["log_path"]


def test_the_emulator_logs_the_key_like_sglang_and_the_log_writer_masks_it(deployment):
    """The emulator prints server_args with the key in clear, as SGLang does; a client request with the key in its
    query string lands in uvicorn's access line. Neither reaches the file."""
    d = deployment
    argv = [TARGET_PYTHON, EMULATOR, "--config", d["config"], "--port", str(d["port"]), "--model-path", "/models/tiny",
            "--emulator-load-seconds", "0.5", "--emulator-capture-seconds", "0.1"]
    r = run_module("wait_for_model", module_args(d, argv=argv, health_url="http://127.0.0.1:%d/health_generate" % d["port"]))
    assert not r.get("failed"), r.get("msg")
    url = "http://127.0.0.1:%d/v1/models?api_key=%s" % (d["port"], quote(KEY, safe=""))
    subprocess.run(["curl", "-s", "-o", "/dev/null", url], check=False, timeout=30)
    time.sleep(0.5)
    with open(r["log_path"], "rb") as fh:
        log = fh.read()
    assert log.startswith(b"[EMULATOR] ")
    assert b"server_args=ServerArgs(" in log and b'api_key="***"' in log
    assert b"GET /v1/models?api_key=*** HTTP/1.1" in log  # uvicorn's access line, the key percent-encoded
    assert hits(d["top"]) == {d["config"]: [KEY]}


# ------------------------------------------------------------------ the log writer process alone
def wait_for(path, needle, timeout=3.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(path, "rb") as fh:
            data = fh.read()
        if needle in data:
            return data
        time.sleep(0.02)
    raise AssertionError("%r not in %s after %s s: %r" % (needle, path, timeout, data[-300:]))


@pytest.fixture
def writer(tmp_path):
    path = str(tmp_path / "w.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    handle, pipe = wfm.Popener().spawn_log_writer(fd, [KEY], None, label="eagle-deploy-log-writer:test")
    os.close(fd)
    yield handle, pipe, path
    if handle.poll() is None:
        handle.kill()
        handle.wait()


def test_log_writer_writes_progress_at_once_and_never_a_paused_half_secret(writer):
    handle, pipe, path = writer
    t0 = time.monotonic()
    os.write(pipe, b"\rLoading 50%|#####     | 1/2")
    wait_for(path, b"1/2", timeout=1.0)
    assert time.monotonic() - t0 < 0.5
    os.write(pipe, b"\nkey=" + KEY.encode()[:9])
    time.sleep(0.5)
    with open(path, "rb") as fh:
        assert fh.read().endswith(b"\nkey=")  # a possible secret start waits for the next byte, whatever the pause
    os.write(pipe, KEY.encode()[9:] + b"\n")
    wait_for(path, b"key=***\n")


def test_log_writer_ignores_stop_signals_and_ends_at_end_of_file(writer):
    handle, pipe, path = writer
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        handle.send_signal(sig)
    time.sleep(0.3)
    assert handle.poll() is None
    os.write(pipe, b"last words " + repr(KEY).encode())  # no newline: written at end of file
    os.close(pipe)
    assert handle.wait(timeout=5) == 0
    with open(path, "rb") as fh:
        assert fh.read() == b'last words "***"'
