"""The sglang_server role's refusals that come from the host, run through the real playbook on inventory/local:
a model dir that is missing or holds no config.json (preflight, before anything is configured), and a port held
by a process that is not our server (wait_for_model's check, before our running server is stopped)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request

import pytest

from ansible_run import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
API_KEY = "local-rehearsal-key"  # inventory/local's sglang_server_api_key


def play(prefix, port, *extra, playbook="serve_eagle3.yml"):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join("playbooks", playbook), "-i", "inventory/local",
           "-e", "eagle_deploy_prefix=%s" % prefix, "-e", "sglang_server_port=%d" % port] + list(extra)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("no JSON (rc=%s):\n%s\n%s" % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:]))
    results = [(t["task"]["name"].split(" : ", 1)[-1], t["hosts"].get("localhost", {}))
               for p in out["plays"] for t in p["tasks"]]
    failed = [(n, r) for n, r in results if r.get("failed") and not r.get("ignore_errors")]
    return proc.returncode, results, failed


@pytest.fixture
def prefix():
    # Not under pytest's tmp dir: /tmp/pytest-of-root is 0700 and the service user must walk into the prefix.
    path = tempfile.mkdtemp(prefix="eagle-deploy-preflight-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_model_dir_missing_or_without_config_json_is_named(prefix, tmp_path):
    missing = str(tmp_path / "no-such-model")
    empty = tmp_path / "draft-without-config"
    empty.mkdir()
    fresh = os.path.join(prefix, "fresh")
    rc, results, failed = play(fresh, free_port(), "--check", "--tags", "preflight",
                               "-e", "sglang_server_model_path=%s" % missing,
                               "-e", "sglang_server_draft_model_path=%s" % empty)
    assert rc != 0
    assert [n for n, _ in failed] == ["Fail when a model dir is missing or has no config.json"], failed
    msg = failed[0][1]["msg"]
    assert "sglang_server_model_path: %s does not exist" % missing in msg
    assert ("sglang_server_draft_model_path: the directory %s exists but holds no %s/config.json" % (empty, empty)) in msg
    assert not os.path.exists(fresh)


def test_model_dirs_with_config_json_pass(prefix, tmp_path):
    for name in ("target", "draft"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    rc, results, failed = play(os.path.join(prefix, "fresh"), free_port(), "--check", "--tags", "preflight",
                               "-e", "sglang_server_model_path=%s" % (tmp_path / "target"),
                               "-e", "sglang_server_draft_model_path=%s" % (tmp_path / "draft"))
    assert rc == 0 and not failed, failed


def _healthy(port):
    req = urllib.request.Request("http://127.0.0.1:%d/health" % port, headers={"Authorization": "Bearer " + API_KEY})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status == 200


def test_foreign_port_holder_is_refused_before_our_server_is_stopped(prefix):
    port = free_port()
    rc, _, failed = play(prefix, port)
    assert rc == 0, failed
    with open(os.path.join(prefix, "var/lib/eagle-deploy/run/sglang.json")) as f:
        before = json.load(f)
    try:
        with socket.socket() as foreign:
            foreign.bind(("127.0.0.1", 0))
            foreign.listen(1)
            taken = foreign.getsockname()[1]
            # A new port is a new config: a restart is due, and the new port is held by this test process.
            rc, results, failed = play(prefix, taken)
        assert rc != 0
        assert "why is shown just above" in failed[-1][1]["msg"], failed
        msg = [r for n, r in results if n == "Show why the server did not come up"][-1]["msg"]
        assert "port %d is held by a process that is not ours: PID %d" % (taken, os.getpid()) in msg, failed
        assert "Nothing was stopped or launched" in msg
        # Our server was left alone: same process, same run state, still serving on its port.
        with open(os.path.join(prefix, "var/lib/eagle-deploy/run/sglang.json")) as f:
            after = json.load(f)
        assert (after["pid"], after["attempt"]) == (before["pid"], before["attempt"])
        os.kill(before["pid"], 0)
        assert _healthy(port)
    finally:
        stopped = play(prefix, port, playbook="stop.yml")
        assert stopped[0] == 0, stopped[2]
