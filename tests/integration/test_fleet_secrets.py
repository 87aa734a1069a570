"""A router URL with a user:password@ is never printed or written: not by a failed task at default verbosity, at -vvv
or with --check --diff, and not into the rollout's note (<name>.fleet-out.json).

Two quick runs: playbooks/rolling_restart.yml against a router that does not answer (it fails at its first look at the
router, before anything is touched), and the fleet role's leave (tests/integration/fleet_leave.yml) against a small
router double in this process that takes the worker out only with the URL's credentials (HTTP basic authentication):
the modules still send them, and no output and no file holds them."""
from __future__ import annotations

import base64
import http.server
import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from ansible_run import BIN, REPO, free_port, local_hosts, write_inventory

USER = "fleet-operator"
PASSWORD = "Rout3r-Passw0rd-9c1e"
VERBOSITY = ((), ("-vvv",), ("--check", "--diff"))


def ansible_playbook(playbook, inventory, *extra):
    """(rc, stdout + stderr) of ansible-playbook with the operator's own output (the default callback)."""
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    env.pop("ANSIBLE_STDOUT_CALLBACK", None)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), playbook, "-i", inventory] + list(extra), cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def leaks(text):
    """The credential's pieces found in ``text`` (the password alone, and percent-encoded)."""
    return [s for s in (PASSWORD, "%s:%s" % (USER, PASSWORD), PASSWORD.replace("-", "%2D")) if s in text]


@pytest.fixture(scope="module")
def replica():
    workdir, hosts = local_hosts("fleet-secrets", ["replica1"])
    inventory = os.path.join(workdir, "inventory")
    write_inventory(inventory, {"hosts": {"replica1": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "eagle_deploy_prefix": hosts["replica1"]["prefix"], "sglang_server_port": hosts["replica1"]["port"],
        "sglang_fleet_worker_host": "127.0.0.1"}}})
    yield {"workdir": workdir, "inventory": inventory, "port": hosts["replica1"]["port"],
           "prefix": hosts["replica1"]["prefix"]}
    shutil.rmtree(workdir, ignore_errors=True)  # nothing was started there


@pytest.mark.parametrize("flags", VERBOSITY, ids=["default", "vvv", "check-diff"])
def test_a_router_url_with_credentials_is_never_printed_by_a_failed_rollout(replica, flags):
    router = "http://%s:%s@127.0.0.1:%d" % (USER, PASSWORD, free_port())  # nothing listens there
    rc, out = ansible_playbook("playbooks/rolling_restart.yml", replica["inventory"],
                               "-e", "sglang_fleet_router_url=" + router, *flags)
    assert rc != 0 and "the router does not answer" in out, out[-3000:]
    assert leaks(out) == [], out[-3000:]
    if "-vvv" in flags:  # the invocation is printed, the credential masked in it
        assert "router_url: http://********@127.0.0.1" in out, out[-3000:]


def test_a_router_url_with_credentials_and_a_wrong_scheme_is_named_without_them(replica):
    router = "htp://%s:%s@router.example.internal:30000" % (USER, PASSWORD)
    rc, out = ansible_playbook("playbooks/rolling_restart.yml", replica["inventory"],
                               "-e", "sglang_fleet_router_url=" + router)
    assert rc != 0 and "sglang_fleet_router_url=htp://router.example.internal:30000 is not an http" in out, out[-3000:]
    assert leaks(out) == [], out[-3000:]


class RouterDouble(http.server.ThreadingHTTPServer):
    """sglang-router 0.3.2's worker API for one worker, answering only with the expected basic authentication: the
    worker is listed until it is deleted, then gone (404). A request without it gets 401 and the challenge."""

    def __init__(self, worker_url):
        super().__init__(("127.0.0.1", 0), RouterHandler)
        self.worker = {"id": "686c3591-8445-4fca-a983-6c8a391cc881", "url": worker_url, "is_healthy": True}
        self.other = {"id": "11111111-2222-3333-4444-555555555555", "url": "http://127.0.0.1:9", "is_healthy": True}
        self.deleted = False
        self.authorized = 0


class RouterHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="router"')
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self):
        want = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()
        if self.headers.get("Authorization") == want:
            self.server.authorized += 1
            return True
        self._send(401, {"error": "unauthorized"})
        return False

    def do_GET(self):  # noqa: N802 - BaseHTTPRequestHandler's name
        if not self._authorized():
            return
        router = self.server
        if self.path == "/workers":
            listed = [router.other] + ([] if router.deleted else [router.worker])
            return self._send(200, {"workers": listed, "total": len(listed)})
        if self.path == "/workers/" + router.worker["id"] and not router.deleted:
            return self._send(200, router.worker)
        return self._send(404, {"error": "WORKER_NOT_FOUND"})

    def do_DELETE(self):  # noqa: N802 - BaseHTTPRequestHandler's name
        if not self._authorized():
            return
        self.server.deleted = True
        self._send(202, {"status": "accepted"})


def test_the_rollout_note_and_output_of_a_leave_hold_no_credential(replica):
    worker_url = "http://127.0.0.1:%d" % replica["port"]
    router = RouterDouble(worker_url)
    thread = threading.Thread(target=router.serve_forever, daemon=True)
    thread.start()
    state_dir = os.path.join(replica["prefix"], "run")
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    router_url = "http://%s:%s@127.0.0.1:%d" % (USER, PASSWORD, router.server_address[1])
    extra = ["-e", json.dumps({"sglang_fleet_router_url": router_url, "sglang_fleet_worker_url": worker_url,
                               "sglang_fleet_state_dir": state_dir, "sglang_fleet_drain_timeout": 0,
                               "sglang_fleet_poll_interval": 0.05, "sglang_fleet_router_delegate_to": ""})]
    try:
        start = time.monotonic()
        rc, out = ansible_playbook("tests/integration/fleet_leave.yml", replica["inventory"], "-vvv", "--diff", *extra)
        print("leave: %.1f s" % (time.monotonic() - start))
    finally:
        router.shutdown()
        router.server_close()
    assert rc == 0, out[-3000:]
    assert router.deleted and router.authorized >= 3  # the credentials were sent, as basic authentication
    note = os.path.join(state_dir, "sglang.fleet-out.json")
    with open(note) as handle:
        written = handle.read()
    assert json.loads(written) == {"router_url": "http://127.0.0.1:%d" % router.server_address[1],
                                   "worker_url": worker_url}
    assert leaks(out) == [] and leaks(written) == [], out[-3000:]
    assert "removed worker %s" % worker_url in out
