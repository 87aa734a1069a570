"""The host watcher program (module_utils/sglang_supervisor.py) as systemd runs it, with real processes: the SGLang
emulator as its server, a datagram socket of the test as NOTIFY_SOCKET (what systemd reads), the program installed
from the module_utils files as wait_for_model installs it (python3 -I, its files side by side)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from ansible.module_utils import sglang_contract, sglang_proc, sglang_program

from ansible_run import EMULATOR, TARGET_PYTHON, free_port
from installed_programs import install_supervisor

SECRET = "sk-watcher-test-0123456789"


class Watched(object):
    """One watcher run: its run dir, log dir, notify socket and process."""

    def __init__(self, tmp_path):
        self.run_dir = str(tmp_path / "run")
        self.log_dir = str(tmp_path / "logs")
        os.makedirs(self.run_dir, mode=0o755)
        os.chmod(self.run_dir, 0o755)
        os.makedirs(self.log_dir)
        self.program = install_supervisor(self.run_dir)  # as the role sglang_server does (tasks/program.yml)
        self.port = free_port()
        self.sock_path = str(tmp_path / "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.sock_path)
        self.sock.settimeout(0.2)
        self.messages = []
        self.proc = None

    def start(self, scenario="normal", load=2.0, shards=4, stall=30, secrets=(), extra=(), api_key_file=None,
              env=None, **settings):
        config = {
            "launch": "t1", "argv": [TARGET_PYTHON, EMULATOR, "--port", str(self.port), "--model-path", "/models/tiny",
                                     "--emulator-scenario", scenario, "--emulator-load-seconds", str(load),
                                     "--emulator-shards", str(shards), "--emulator-capture-seconds", "0.3"] + list(extra),
            "env": {"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "1", "SECRET_TOKEN": SECRET},
            "chdir": self.log_dir, "user": None, "log_dir": self.log_dir,
            "health_url": "http://127.0.0.1:%d/health_generate" % self.port, "headers": {},
            "secrets": list(secrets), "fingerprint": "f" * 64, "fingerprint_parts": {}, "port": self.port,
            "keep_attempts": 5, "unit": None, "timeout": 0, "stop_timeout": 10, "tail_lines": 20,
            "settings": {"health_interval": 0.25, "health_timeout": 10, "unhealthy_after": 3, "child_grace": 2.0,
                         "settle_time": 0.3, "stall_timeout": stall, "poll_interval": 0.1, "extend_timeout": 40},
        }
        config["settings"].update(settings)
        config["env"].update(env or {})
        if api_key_file is not None:
            config["api_key_file"] = api_key_file
        sglang_proc.write_files(self.run_dir, ((sglang_contract.CONFIG % "emu", json.dumps(config)),), mode=0o600)
        env = {"PATH": os.environ["PATH"], "NOTIFY_SOCKET": self.sock_path}
        self.proc = subprocess.Popen(sglang_program.argv(TARGET_PYTHON, self.program, self.run_dir, "emu"), env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        return self

    def notes(self, until, timeout):
        """Notify messages until one contains ``until`` (or the watcher ended); the list."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                self.messages.append(self.sock.recv(65536).decode())
            except socket.timeout:
                if self.proc.poll() is not None:
                    break
                continue
            if until in self.messages[-1]:
                return self.messages
        raise AssertionError("no notify message with %r in %s s: %s" % (until, timeout, self.messages[-10:]))

    def status(self):
        return sglang_proc.read_json(self.run_dir, sglang_contract.STATUS % "emu")

    def end(self, timeout=30):
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    def cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        state = sglang_proc.read_state(self.run_dir, "emu")
        if state and state.get("pid"):
            for pid in sglang_proc.our_tree(state):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        self.sock.close()


@pytest.fixture
def watched(tmp_path):
    w = Watched(tmp_path)
    yield w
    w.cleanup()


def test_phases_ready_then_a_clean_stop(watched):
    watched.start(load=2.0, shards=4, secrets=[SECRET])
    notes = watched.notes("READY=1", 60)
    statuses = [m.split("STATUS=", 1)[1].split("\n")[0] for m in notes if "STATUS=" in m]
    assert any("loading weights" in s and "/4 shards" in s for s in statuses), statuses
    assert any("EXTEND_TIMEOUT_USEC=40000000" in m for m in notes)
    ready = [m for m in notes if "READY=1" in m][0]
    assert "STATUS=serving" in ready
    st = watched.status()
    assert st["verdict"] == "ready" and st["launch"] == "t1" and st["attempt"] == 1
    assert [p["phase"] for p in st["phases"]][:2] == ["launching", "loading_weights"]
    state = sglang_proc.read_state(watched.run_dir, "emu")
    assert state["pid"] == st["server_pid"] and sglang_proc.state_is_alive_and_ours(state)
    assert state["watcher"]["pid"] == watched.proc.pid
    loads = json.loads(open(os.path.join(watched.run_dir, "emu.loads.json")).read())["loads"]
    assert loads[-1]["attempt"] == 1 and loads[-1]["total"] > 2.0
    tree = set(sglang_proc.our_tree(state))
    assert tree
    # systemctl stop: SIGTERM (systemd signals the cgroup; here the watcher alone, it stops the server's session)
    os.kill(watched.proc.pid, signal.SIGTERM)
    rc, out, _err = watched.end()
    assert rc == sglang_contract.EXIT_STOPPED
    assert watched.status()["verdict"] == "stopped"
    assert not [p for p in tree if sglang_proc.pid_alive(p)]
    with open(st["log_path"]) as fh:
        log = fh.read()
    assert "fired up" in log
    assert SECRET not in log and SECRET not in out  # the log file and the journal (stdout) are redacted


def test_a_start_that_fails_exits_78_with_its_class(watched):
    watched.start(scenario="crash_loading", load=2.0, shards=4)
    rc, _out, err = watched.end(timeout=60)
    assert rc == sglang_contract.EXIT_PERMANENT
    st = watched.status()
    assert st["verdict"] == "cuda_oom" and st["report"]["crash_class"] == "cuda_oom"
    assert st["report"]["exit_status"] == 78 and st["report"]["after_ready"] is False
    assert "OutOfMemoryError" in (st["report"].get("crash_exception") or "")
    assert "failed: cuda_oom" in err and "not restarted" in err
    watched.notes("failed: cuda_oom", 5)
    state = sglang_proc.read_state(watched.run_dir, "emu")
    assert not sglang_proc.our_tree(state)


def _serving_tree(watched):
    """Once READY=1: the run state and the server's processes by role."""
    watched.notes("READY=1", 60)
    state = sglang_proc.read_state(watched.run_dir, "emu")
    tree = sglang_proc.our_tree(state)
    table = sglang_proc.process_table()
    kids = [pid for pid in tree if table.get(pid, {}).get("ppid") == state["pid"]]
    roles = {"worker": [], "other": []}
    for pid in kids:
        roles["worker" if "spawn_main" in " ".join(sglang_proc.proc_cmdline(pid) or []) else "other"].append(pid)
    return state, roles


def _ends_69_with_evidence(watched, t0, err_hint=""):
    rc, _out, err = watched.end(timeout=60)
    assert rc == sglang_contract.EXIT_RESTARTABLE, err
    st = watched.status()
    assert st["report"]["after_ready"] is True and st["report"]["exit_status"] == 69
    assert "evidence" in st["report"]
    assert time.monotonic() - t0 < 5  # a poll of a serving server (0.5 s) plus the log's settle time and the stop
    return st


def test_a_serving_server_whose_worker_is_killed_exits_69(watched):
    watched.start(load=1.0, shards=2)
    _state, roles = _serving_tree(watched)
    assert roles["worker"], roles  # the emulator's scheduler and detokenizer (multiprocessing spawn)
    t0 = time.monotonic()
    os.kill(roles["worker"][0], signal.SIGKILL)
    st = _ends_69_with_evidence(watched, t0)
    assert st["verdict"] in ("child_died", "child_sigquit", "killed"), st["verdict"]
    assert st["report"]["evidence"] == "worker PID %d of the server died" % roles["worker"][0]


def test_a_child_seen_only_briefly_before_ready_is_part_of_the_serving_server(watched):
    # The cause of a flaky test: a Python child (multiprocessing's resource tracker) seen for less than child_grace
    # when the server became ready was forgotten when it died. Alive at ready = part of the serving server.
    watched.start(load=0.2, shards=1, child_grace=30.0)
    _state, roles = _serving_tree(watched)
    assert roles["other"], roles  # multiprocessing's resource tracker: a plain Python child
    t0 = time.monotonic()
    os.kill(roles["other"][0], signal.SIGKILL)
    st = _ends_69_with_evidence(watched, t0)
    assert st["report"]["evidence"] == "worker PID %d of the server died" % roles["other"][0]


def test_a_serving_server_whose_health_never_answers_and_nothing_moves_is_stuck_and_with_restart_exits_69(watched):
    """Failed health while serving is a question: the server runs and waits nothing (/v1/loads), writes no line of its
    own (access lines are not its own), so once nothing moved for serve_stuck_seconds it is stuck; the restart
    action ends it (exit 69, the failed tree stopped)."""
    import json as _json
    import urllib.request
    watched.start(load=0.2, shards=1, env={"SGLANG_HEALTH_CHECK_TIMEOUT": "1"}, health_timeout=1,
                  serve_health_interval=0.3, serve_stuck_seconds=8, serve_stuck_action="restart")
    state, _roles = _serving_tree(watched)
    tree = set(sglang_proc.our_tree(state))
    req = urllib.request.Request("http://127.0.0.1:%d/emulator/health_delay" % watched.port, method="POST",
                                 data=_json.dumps({"seconds": 60, "count": 100}).encode())
    assert urllib.request.urlopen(req, timeout=5).status == 200  # no health request answers any more
    t0 = time.monotonic()
    rc, _out, err = watched.end(timeout=90)
    assert rc == sglang_contract.EXIT_RESTARTABLE, err
    st = watched.status()
    assert st["verdict"] == "stuck" and st["report"]["after_ready"] is True, st
    assert "nothing moved" in st["report"]["evidence"]
    assert 2 <= time.monotonic() - t0 < 40  # 8 s after the last 200 (at most one interval, 6 s, before t0)
    assert tree and not [p for p in tree if sglang_proc.pid_alive(p)]  # the failed tree is stopped


def test_a_hang_is_stalled_and_may_be_retried(watched):
    watched.start(scenario="hang", stall=3)
    rc, _out, err = watched.end(timeout=60)
    assert rc == sglang_contract.EXIT_RESTARTABLE, err
    assert watched.status()["verdict"] == "stalled"


def test_the_api_key_is_read_from_the_servers_config_file_for_health_and_redaction(watched, tmp_path):
    # wait_for_model writes no API key into the watcher's config, only where it is: the server's 0600 --config file
    # (the role writes "api-key: <JSON>"). The watcher reads it there: its health requests carry the bearer header
    # (the server answers 401 without it, so "ready" proves it), and the log and the journal never show the key
    # (the emulator logs its server_args, the key included, as SGLang does).
    key = "sk-from-the-config-file-0123456789"
    config = tmp_path / "sglang.yaml"
    config.write_text('model-path: "/models/tiny"\napi-key: "%s"\n' % key)
    os.chmod(str(config), 0o600)
    watched.start(load=0.5, shards=2, extra=["--config", str(config)],
                  api_key_file={"path": str(config), "key": "api-key"})
    watched.notes("READY=1", 60)
    assert key not in open(os.path.join(watched.run_dir, sglang_contract.CONFIG % "emu")).read()
    os.kill(watched.proc.pid, signal.SIGTERM)
    rc, out, err = watched.end()
    assert rc == sglang_contract.EXIT_STOPPED
    with open(watched.status()["log_path"]) as fh:
        log = fh.read()
    assert "api_key='***'" in log and key not in log and key not in out and key not in err
