"""The API key and the other secrets never reach a file other than the server's config (and, while the server runs,
the supervisor's own 0600 config for the secret environment): the real wait_for_model, run by Ansible, and the real
supervisor program it starts (its log copy masks them), on a TEST-ONLY server that prints its secrets the ways real
servers do (secret_printing_server.py); and the supervisor's log copy alone on a pipe."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote

import pytest

from ansible.module_utils import sglang_proc, sglang_supervisor
from ansible.module_utils.sglang_redact import encoded_forms

from ansible_run import EMULATOR, TARGET_PYTHON, free_port, run_module

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "secret_printing_server.py")
KEY = "it-api-key-'quoted'/7f3a9c"
HF = "hf_integration_token_5d2e"
EXTRA = "extra-secret-b81c"
SECRETS = (KEY, HF, EXTRA)
USER = "nobody"

@pytest.fixture(autouse=True)
def _root():
    """The server runs as another user: without root these tests cannot run, and they fail saying so."""
    if os.geteuid() != 0:
        pytest.fail("runs the server as another user: needs root (tests/run.sh runs as root)", pytrace=False)


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
    run_dir = os.path.join(top, "run")
    os.mkdir(run_dir, 0o755)
    port = free_port()
    d = {"top": top, "config": config, "log_dir": log_dir, "run_dir": run_dir, "port": port, "uid": pw.pw_uid,
         "supervisor_config": os.path.join(run_dir, "red.watcher.json")}
    yield d
    run_module("wait_for_model", {"name": "red", "state": "stopped", "log_dir": log_dir, "run_dir": run_dir,
                                  "on_foreign_pid": "ignore"})
    shutil.rmtree(top, ignore_errors=True)


def module_args(d, **kw):
    a = {"name": "red", "argv": [TARGET_PYTHON, SERVER, "--config", d["config"], "--port", str(d["port"])],
         "log_dir": d["log_dir"], "run_dir": d["run_dir"], "run_as": USER, "chdir": d["top"],
         "fingerprint_files": [d["config"]],
         "health_url": "http://127.0.0.1:%d/health" % d["port"], "api_key": KEY,
         "secret_environment": {"HF_TOKEN": HF}, "redact": [EXTRA], "timeout": 60, "stall_timeout": 30}
    a.update(kw)
    return a


# The second case runs the module with this venv's interpreter, which lives where the service user cannot reach
# (/root): the supervisor runs as root with it and starts the server as the service user.
@pytest.mark.parametrize("cgroup, python", [(True, TARGET_PYTHON), (False, sys.executable)],
                         ids=["own_cgroup", "session_root_only_interpreter"])
def test_no_secret_reaches_the_log_dir_and_the_last_lines_survive_the_stop(deployment, cgroup, python):
    d = deployment
    r = run_module("wait_for_model", module_args(d, cgroup=cgroup), python=python)
    assert not r.get("failed"), r.get("msg")
    assert r["tree_tracking"] == ("cgroup" if cgroup and sglang_proc.cgroup2_mount() else "session")
    state = sglang_proc.read_state(d["run_dir"], "red")
    supervisor, leader = r["supervisor_pid"], r["pid"]
    assert state["pid"] == leader and state["watcher"]["pid"] == supervisor
    assert proc_text(leader, "cmdline").split(b"\0")[1] == SERVER.encode()  # the leader is the server itself
    assert sglang_proc.proc_uid(leader) == d["uid"] and os.readlink("/proc/%d/fd/1" % leader).startswith("pipe:")
    # The supervisor: no secret in its argv, environment or anyone's ps line.
    for secret in SECRETS:
        for pid in (supervisor, leader):
            assert secret.encode() not in proc_text(pid, "cmdline")
        assert secret.encode() not in proc_text(supervisor, "environ")
        assert secret not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    if r["tree_tracking"] == "cgroup":
        assert sglang_proc.proc_cgroup(supervisor) == sglang_proc.proc_cgroup(leader)
    with open(r["log_path"], "rb") as fh:
        log = fh.read()
    assert b"server_args={'model_path': '/models/tiny', 'api_key': \"***\", 'port'" in log  # repr of a str with '
    assert b"server_args=ServerArgs(model_path='/models/tiny', api_key=\"***\", port=" in log
    assert b'"api_key": "***"' in log
    assert b"GET /v1/models?api_key=*** HTTP/1.1" in log
    assert b"HF token: ***\n" in log and b"split key: *** end\n" in log and b"[child] api_key=***\n" in log
    assert b"\rLoading safetensors checkpoint shards: 1/2 [progress]\n" in log
    # the key in its config file only; the secret environment in the supervisor's 0600 config while it runs
    assert hits(d["top"]) == {d["config"]: [KEY], d["supervisor_config"]: [HF, EXTRA]}

    stopped = run_module("wait_for_model", {"name": "red", "state": "stopped", "log_dir": d["log_dir"],
                                            "run_dir": d["run_dir"]})
    assert not stopped.get("failed"), stopped.get("msg")
    assert leader in stopped["stopped"]["signalled"] and stopped["stopped"]["killed"] == []
    assert not sglang_proc.pid_alive(supervisor) and not sglang_proc.pid_alive(leader)
    with open(r["log_path"], "rb") as fh:
        log = fh.read()
    assert log.endswith(b"SIGTERM received, shutting down (api_key=***)\nLAST LINE\n")  # copied to the end
    assert hits(d["top"]) == {d["config"]: [KEY]}  # nothing else holds a secret once stopped


def test_without_secrets_the_output_is_copied_all_the_same(deployment):
    d = deployment
    r = run_module("wait_for_model", module_args(d, api_key=None, secret_environment={}, redact=[],
                                                 argv=[TARGET_PYTHON, SERVER, "--port", str(d["port"])]))
    assert not r.get("failed"), r.get("msg")
    assert os.readlink("/proc/%d/fd/1" % r["pid"]).startswith("pipe:")  # the supervisor's: it copies and follows
    with open(r["log_path"], "rb") as fh:
        assert b"Loading safetensors checkpoint shards" in fh.read()


def test_the_emulator_logs_the_key_like_sglang_and_the_supervisor_masks_it(deployment):
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
    assert hits(d["top"]) == {d["config"]: [KEY], d["supervisor_config"]: [HF, EXTRA]}


# ------------------------------------------------------------------ the supervisor's log copy alone
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
def copy(tmp_path):
    path = str(tmp_path / "w.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    r, w = os.pipe()
    thread = sglang_supervisor.LogCopy(r, fd, [KEY])
    thread.start()
    yield thread, w, path
    try:
        os.close(w)
    except OSError:
        pass
    thread.join(5)
    os.close(fd)


def test_the_log_copy_writes_progress_at_once_and_never_a_paused_half_secret(copy):
    _thread, pipe, path = copy
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


def test_the_log_copy_writes_the_last_bytes_at_end_of_file(copy):
    thread, pipe, path = copy
    os.write(pipe, b"last words " + repr(KEY).encode())  # no newline: written at end of file
    os.close(pipe)
    thread.join(5)
    assert not thread.is_alive()
    with open(path, "rb") as fh:
        assert fh.read() == b'last words "***"'
