"""playbooks/rolling_restart.yml against three replicas behind SGLang's real gateway, with client traffic through it
the whole time: once behind sglang-router 0.3.2, once behind smg 1.13.0 (the Shepherd Model Gateway, SGLang's gateway
after sglang-router), the same replicas (converged once) moving from the one to the other.

The replicas are three inventory hosts on this machine (local connection, a prefix and a port each, the group vars of
inventory/local: real SGLang 0.5.23 files, the SGLang EMULATOR as the server, its requests made to take 0.5 s so that
a replica taken out of the router still holds some). The gateway is the real one from PyPI, set up in .cache by
tests/integration/gateway_src.py, with control-plane keys and a 1 s
health-check interval (smg: its workers' drain settle time 1 s instead of 5, through their POST /workers body). The
fleet is converged with serve_eagle3.yml and registered with the gateway; then a client sends /generate through the
gateway from four threads while rolling_restart.yml rolls out a "new version" (a changed --context-length) whose
replica2 crashes on its first request (its SGLang left unpatched, the emulator's eagle scenario).

What must hold: the run fails naming replica2 and its crash; replica1 was restarted with the new version and is back
in the router (smg: Ready); replica2 is out of the router; replica3 was never touched (same process, same config file,
same router id); the client saw no error; and the router never sent a request to a replica that was down (its
metrics count no failed request to any worker, no retry: no circuit breaker moved). Then the re-run after the fix
(replica2 patched again) adds replica2 back.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

import gateway_src
from ansible_run import free_port, local_hosts, run_playbook, write_inventory

API_KEY = "local-rehearsal-key"  # inventory/local's sglang_server_api_key
ADMIN_KEY = "router-admin-key-0123456789abcdef"
REPLICAS = ("replica1", "replica2", "replica3")
GATEWAYS = ("sglang-router-%s" % gateway_src.SGLANG_ROUTER.version, "smg-%s" % gateway_src.SMG.version)
CLIENTS = 4

pytestmark = pytest.mark.slow


def http(url, body=None, key=None, method=None, timeout=30):
    """(status, parsed body) of one request; an HTTP error status is an answer too."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw.decode() or "null")
    except ValueError:
        return status, raw.decode(errors="replace")


def until(what, predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError("%s: not within %s s" % (what, timeout))


class Router:
    """SGLang's real gateway (``kind``: one of GATEWAYS), started from its venv in a session of its own, stopped by its
    process group."""

    def __init__(self, workdir, kind):
        self.kind = kind
        self.port, self.metrics_port = free_port(), free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(workdir, "router-%s.log" % kind)
        common = ["--host", "127.0.0.1", "--port", str(self.port), "--policy", "round_robin",
                  "--health-check-interval-secs", "1", "--prometheus-host", "127.0.0.1",
                  "--prometheus-port", str(self.metrics_port),
                  "--control-plane-api-keys", "fleet-test:fleet test:admin:" + ADMIN_KEY]
        if kind.startswith("smg-"):
            argv = [gateway_src.SMG.program(), "launch", "--shutdown-grace-period-secs", "1"] + common
            # smg drains a worker it removes for its health.drain_settle_secs (5 s by default): 1 s here
            self.worker_config = {"health": {"drain_settle_secs": 1}}
        else:
            argv = [gateway_src.SGLANG_ROUTER.program(), "-m", "sglang_router.launch_router"] + common
            self.worker_config = {}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, close_fds=True)
        until("the router answers", lambda: self._answers(), timeout=60)

    def _answers(self):
        assert self.proc.poll() is None, "the router exited rc=%s:\n%s" % (self.proc.returncode, self.log())
        try:
            return http(self.url + "/workers", key=ADMIN_KEY, timeout=2)[0] == 200
        except OSError:
            return False

    def log(self):
        with open(self.log_path, errors="replace") as handle:
            return handle.read()[-4000:]

    def workers(self):
        status, body = http(self.url + "/workers", key=ADMIN_KEY)
        assert status == 200, body
        return {w["url"]: w for w in body["workers"]}

    def registry(self):
        """What the gateway's registry says of each worker, without the load figures that change on their own."""
        return {url: {key: w.get(key) for key in ("id", "is_healthy", "status")} for url, w in self.workers().items()}

    def serving(self, url):
        """The gateway lists the worker healthy (smg: and Ready)."""
        record = self.workers().get(url)
        return bool(record) and record["is_healthy"] is True and record.get("status", "ready") == "ready"

    def add(self, url):
        status, body = http(self.url + "/workers", dict(self.worker_config, url=url, api_key=API_KEY), key=ADMIN_KEY)
        assert status == 202, body
        return body["worker_id"]

    def play_args(self, *more):
        """rolling_restart.yml's -e arguments for this gateway."""
        args = ["-e", "sglang_fleet_router_url=" + self.url, "-e", "sglang_fleet_router_api_key=" + ADMIN_KEY]
        if self.worker_config:
            args += ["-e", json.dumps({"sglang_fleet_worker_config": self.worker_config})]
        return args + list(more)

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port, timeout=10) as resp:
            return resp.read().decode()

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


class Clients:
    """CLIENTS threads sending short /generate requests through the router until stopped, and long requests
    (``held``) already on a replica; every answer and error is kept."""

    def __init__(self, router_url):
        self.url = router_url + "/generate"
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.ok = 0
        self.routed_ok = 0  # answered through the router
        self.held_ok = 0  # long requests answered
        self.errors = []
        self.threads = [threading.Thread(target=self._loop, args=(n,), daemon=True) for n in range(CLIENTS)]
        for thread in self.threads:
            thread.start()

    def _one(self, url, text, tokens, key=None):
        try:
            status, body = http(url, {"text": text, "sampling_params": {"max_new_tokens": tokens}}, key=key,
                                timeout=120)
            good = status == 200 and isinstance(body, dict) and body.get("meta_info", {}).get("completion_tokens")
            failure = None if good else "%s %s" % (status, str(body)[:200])
        except (OSError, ValueError) as exc:
            failure = "no answer: %s" % exc
        with self.lock:
            if failure is None:
                self.ok += 1
                self.routed_ok += url == self.url
                self.held_ok += url != self.url
            else:
                self.errors.append((time.strftime("%H:%M:%S"), text, failure))

    def _loop(self, n):
        i = 0
        while not self.stop_event.wait(0.1):  # about 20 requests a second from all threads
            i += 1
            self._one(self.url, "client %d request %d" % (n, i), 8)

    def held(self, server_url, seconds):
        """A long request the router has already handed to that server (sent to it directly): it runs ``seconds``."""
        thread = threading.Thread(target=self._one, daemon=True, args=(
            server_url + "/generate", "long request on %s" % server_url, int(seconds * 100), API_KEY))
        thread.start()
        self.threads.append(thread)

    def stop(self):
        self.stop_event.set()
        for thread in self.threads:
            thread.join(120)


def replica_vars(prefix, port, **extra):
    command = ["{{ sglang_install_venv }}/bin/sglang-emulator", "--emulator-scenario", "{{ sglang_emulator_scenario }}",
               "--emulator-load-seconds", "1", "--emulator-capture-seconds", "0.2",
               # a decode step takes 10 ms: a long request holds the server while the rollout begins
               "--emulator-step-ms", "10"]
    return dict({"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "eagle_deploy_prefix": prefix, "sglang_server_port": port, "sglang_fleet_worker_host": "127.0.0.1",
                 "sglang_server_command": command,
                 # the install is not what this test is about: no bytecode compiled for SGLang's 2,000 files
                 "sglang_install_pip_extra_args": "--no-compile"}, **extra)


@pytest.fixture(scope="module")
def fleet():
    """The three replicas, converged once for both gateways."""
    workdir, replicas = local_hosts("fleet", REPLICAS)
    for r in replicas.values():
        r["url"] = "http://127.0.0.1:%d" % r["port"]
    play = run_playbook

    base = os.path.join(workdir, "inventory-now")
    write_inventory(base, {"hosts": {n: replica_vars(r["prefix"], r["port"]) for n, r in replicas.items()}})
    state = {"workdir": workdir, "replicas": replicas, "play": play, "inventory": base}
    try:
        converged = play("serve_eagle3.yml", base)
        assert converged.rc == 0, converged
        yield state
    finally:
        stopped = play("stop.yml", base)
        if stopped.rc == 0:
            shutil.rmtree(workdir, ignore_errors=True)
        else:  # the run state in the prefixes is what finds the servers: keep it
            print("stop.yml failed, %s left in place: %r" % (workdir, stopped), file=sys.stderr)


@pytest.fixture(scope="module", params=GATEWAYS)
def gateway(request, fleet):
    """One gateway in front of the fleet (the tests run for one, then the other), every replica registered and
    serving; stopped after its tests."""
    router = Router(fleet["workdir"], request.param)
    try:
        for r in fleet["replicas"].values():
            router.add(r["url"])
        until("three healthy workers", lambda: all(router.serving(r["url"]) for r in fleet["replicas"].values()))
        yield router
    finally:
        router.stop()


def loads(replica):
    """(running, waiting) of a replica's server, from its /v1/loads."""
    status, body = http(replica["url"] + "/v1/loads?include=core", key=API_KEY)
    assert status == 200, body
    return (sum(load["num_running_reqs"] for load in body["loads"]),
            sum(load["num_waiting_reqs"] for load in body["loads"]))


def run_state(replica):
    with open(os.path.join(replica["prefix"], "var/lib/eagle-deploy/run/sglang.json")) as handle:
        return json.load(handle)


def config_digest(replica):
    with open(os.path.join(replica["prefix"], "etc/sglang/sglang.yaml"), "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def metric(text, name, **labels):
    """Sum of the samples of metric ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), line)
        if not match:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


def test_a_crashing_new_version_stops_the_rollout_with_no_client_error(fleet, gateway):
    replicas, router = fleet["replicas"], gateway
    before = {name: {"pid": run_state(r)["pid"], "config": config_digest(r), "worker": router.workers()[r["url"]]["id"]}
              for name, r in replicas.items()}
    # The new version: one more server argument everywhere; on replica2 its SGLang is also left unpatched, and the
    # server (the emulator's eagle scenario) then dies on its first real request, after health answered.
    new = os.path.join(fleet["workdir"], "inventory-new")
    hosts = {n: replica_vars(r["prefix"], r["port"], sglang_server_context_length=65536) for n, r in replicas.items()}
    hosts["replica2"].update(sglang_patch_enabled=False, sglang_emulator_scenario="eagle")
    write_inventory(new, {"hosts": hosts})

    clients = Clients(router.url)
    try:
        until("client traffic through the router", lambda: clients.ok >= 10)
        # A long request already on replica1 when the rollout begins: it must finish before the server stops (the
        # drain), or the stop cuts it and the client sees an error. 60 s: still running when the drain begins, after
        # the first play's checks and replica1's look, leave and router poll, on a machine busy with other jobs (40 s
        # was too short there: the drain found nothing running).
        clients.held(replicas["replica1"]["url"], 60)
        until("the long request running", lambda: loads(replicas["replica1"])[0] >= 1)
        run = fleet["play"]("rolling_restart.yml", new, *router.play_args("-e", "sglang_fleet_poll_interval=0.25",
                                                                          "-e", "sglang_fleet_drain_timeout=120"))
        served_during = clients.ok
        time.sleep(2)  # traffic goes on a moment after the run, on the two replicas left in the router
    finally:
        clients.stop()
    print("rolling restart: %.1f s, %d client requests answered, %d errors"
          % (run.elapsed, clients.ok, len(clients.errors)))

    # The run fails at replica2, naming it and its crash.
    assert run.rc != 0, run
    failures = run.failures()
    assert set(failures) == {"replica2"}, failures
    msg = failures["replica2"]
    print("the run's failure:\n" + "\n".join(msg.splitlines()[:8]))
    assert msg.startswith("replica replica2 (%s) did not come back; it is out of the router" % replicas["replica2"]["url"])
    assert "why is shown just above" in msg, msg
    shown = run.result("replica2", "Show why the smoke test failed")["msg"]
    assert "crash class: " in shown and "spec_disable_batch_threshold" in shown and "early-init patch" in shown, shown

    # replica1: restarted with the new version, drained and back in the router.
    r1 = replicas["replica1"]
    assert run_state(r1)["pid"] != before["replica1"]["pid"]
    with open(os.path.join(r1["prefix"], "etc/sglang/sglang.yaml")) as handle:
        assert "context-length: 65536" in handle.read()
    drain = run.result("replica1", "Let the server finish the requests it holds")
    assert drain["drained"] is True, drain
    assert drain["max_running"] >= 1, drain  # it waited for something: the long request held on replica1
    joined = run.result("replica1", "Put this replica back into the router")
    assert joined["changed"] is True and joined["gateway"]["name"] == router.kind.rsplit("-", 1)[0], joined
    workers = router.workers()
    assert router.serving(r1["url"]) and workers[r1["url"]]["id"] != before["replica1"]["worker"]
    assert workers[r1["url"]].get("status", "ready") == "ready"  # smg: back only when it says Ready

    # replica2: out of the router, its crashed server gone; its note says the rollout took it out of this router (the
    # next run accepts that the router does not list it: test_check_mode_...). replica1's note went when it came back.
    assert replicas["replica2"]["url"] not in workers
    assert run.result("replica2", "Take this replica out of the router")["changed"] is True
    note = os.path.join(replicas["replica2"]["prefix"], "var/lib/eagle-deploy/run/sglang.fleet-out.json")
    assert os.stat(note).st_mode & 0o077 == 0
    with open(note) as handle:
        assert json.load(handle) == {"router_url": router.url, "worker_url": replicas["replica2"]["url"]}
    assert not os.path.exists(os.path.join(r1["prefix"], "var/lib/eagle-deploy/run/sglang.fleet-out.json"))

    # replica3: never touched. Same process, same config, the same router id all along.
    r3 = replicas["replica3"]
    assert run_state(r3)["pid"] == before["replica3"]["pid"]
    assert config_digest(r3) == before["replica3"]["config"]
    assert workers[r3["url"]]["id"] == before["replica3"]["worker"] and router.serving(r3["url"])
    touched = [n for n, _ in run.results("replica3")]
    assert "Take this replica out of the router" not in touched and "Launch SGLang and wait for health" not in touched
    assert "Say which replicas are left untouched and why" not in touched  # a whole batch failed: the run ended there

    # No client saw an error (the long request on replica1 too: the drain let it finish before the stop), and the
    # router sent no request to a replica that was down: no worker had a failed request and nothing was retried.
    assert clients.errors == [], clients.errors
    assert clients.held_ok == 1
    assert served_during > 50
    text = router.metrics()
    assert metric(text, "smg_worker_cb_outcomes_total", outcome="failure") == 0, text
    assert metric(text, "smg_worker_retries_total") == 0, text
    if router.kind.startswith("smg-"):
        # smg drops a removed worker's own series (replica2's; replica1's until it was back): the gateway-wide counts
        # carry the proof there. Every upstream answer was a 200, and no breaker opened on a worker it still lists.
        assert metric(text, "smg_router_upstream_responses_total") == metric(
            text, "smg_router_upstream_responses_total", status_code="200"), text
        assert metric(text, "smg_worker_cb_transitions_total", to="open") == 0, text
        assert metric(text, "smg_worker_cb_state") == 0, text  # 0: closed
    else:
        assert metric(text, "smg_worker_cb_outcomes_total", outcome="success") >= clients.routed_ok
    assert metric(text, "smg_router_upstream_responses_total", status_code="200") >= clients.routed_ok
    assert API_KEY not in json.dumps(run.out) and ADMIN_KEY not in json.dumps(run.out)


# The check and the bad input read the router's registry and the rollout's note, as the other tests do on both
# gateways (the registry of each is read by the crash and re-run tests): run behind the first gateway only.
@pytest.mark.parametrize("gateway", GATEWAYS[:1], indirect=True)
def test_check_mode_changes_nothing_and_says_what_it_would_do(fleet, gateway):
    """After the crashed rollout: replica2 is out of the router, by the rollout's own note; the re-run's check passes
    (the router not listing replica2 is accepted for it) and says what it would do, changing nothing."""
    replicas, router = fleet["replicas"], gateway
    before = {name: run_state(r)["pid"] for name, r in replicas.items() if os.path.exists(
        os.path.join(r["prefix"], "var/lib/eagle-deploy/run/sglang.json"))}
    workers = router.registry()
    run = fleet["play"]("rolling_restart.yml", fleet["inventory"], "--check",
                        *router.play_args("-e", "sglang_fleet_poll_interval=0.25",
                                          "-e", "sglang_fleet_serial=100%"))  # one batch
    assert run.rc == 0, run
    assert {name: run_state(r)["pid"] for name, r in replicas.items() if name in before} == before
    assert router.registry() == workers
    left = run.result("replica1", "Take this replica out of the router")
    assert left["changed"] and left["msg"].startswith("would remove worker %s" % replicas["replica1"]["url"])
    assert run.result("replica1", "Launch SGLang and wait for health")["changed"] is True  # would restart
    if replicas["replica2"]["url"] in workers:
        return  # run alone: replica2 was never taken out
    assert run.result("replica2", "Read the note of the rollout that took this replica out").get("content")
    # A note of another worker (or router) is not this one's: the check refuses it, nothing touched.
    note = os.path.join(replicas["replica2"]["prefix"], "var/lib/eagle-deploy/run/sglang.fleet-out.json")
    with open(note) as handle:
        kept = handle.read()
    with open(note, "w") as handle:
        json.dump({"router_url": router.url, "worker_url": replicas["replica3"]["url"]}, handle)
    try:
        refused = fleet["play"]("rolling_restart.yml", fleet["inventory"], "--check",
                                "-e", "sglang_fleet_router_url=" + router.url, "-e", "sglang_fleet_router_api_key=" + ADMIN_KEY)
    finally:
        with open(note, "w") as handle:
            handle.write(kept)
    assert refused.rc != 0
    assert refused.failures()["replica2"].startswith("the router does not list %s" % replicas["replica2"]["url"])
    assert router.registry() == workers
    # The right note, but written by a user that is neither root nor the one the play runs as (its directory his too,
    # neither writable by others): not trusted, nothing touched.
    run_dir = os.path.dirname(note)
    owner = os.stat(run_dir)
    os.chown(note, 65534, 65534)
    os.chown(run_dir, 65534, 65534)
    try:
        untrusted = fleet["play"]("rolling_restart.yml", fleet["inventory"], "--check",
                                  "-e", "sglang_fleet_router_url=" + router.url,
                                  "-e", "sglang_fleet_router_api_key=" + ADMIN_KEY)
    finally:
        os.chown(run_dir, owner.st_uid, owner.st_gid)
        os.chown(note, owner.st_uid, owner.st_gid)
    assert untrusted.rc != 0
    assert untrusted.failures()["replica2"].startswith("the router does not list %s" % replicas["replica2"]["url"])
    assert router.registry() == workers


@pytest.mark.parametrize("gateway", GATEWAYS[:1], indirect=True)
def test_bad_input_fails_before_anything_is_touched(fleet, gateway):
    replicas, router = fleet["replicas"], gateway
    pids = {name: run_state(r)["pid"] for name, r in replicas.items() if os.path.exists(
        os.path.join(r["prefix"], "var/lib/eagle-deploy/run/sglang.json"))}
    workers = router.registry()
    run = fleet["play"]("rolling_restart.yml", fleet["inventory"], "-e", "sglang_fleet_router_url=" + router.url,
                        "-e", "sglang_fleet_router_api_key=wrong-admin-key-0123456789")
    assert run.rc != 0
    assert all("401" in msg and "router_api_key" in msg for msg in run.failures().values()), run
    assert {name: run_state(r)["pid"] for name, r in replicas.items() if name in pids} == pids
    assert router.registry() == workers


def test_the_rerun_after_a_fix_adds_the_crashed_replica_back(fleet, gateway):
    """After the crashed rollout, the fix (replica2's SGLang patched again, the new version kept) and the re-run for
    replica2: its note lets the first check pass, the rollout restarts it and puts it back; the gateway calls it
    healthy (smg: Ready) and the note is gone."""
    replicas, router = fleet["replicas"], gateway
    r2 = replicas["replica2"]
    fixed = os.path.join(fleet["workdir"], "inventory-fixed")
    write_inventory(fixed, {"hosts": {n: replica_vars(r["prefix"], r["port"], sglang_server_context_length=65536)
                                      for n, r in replicas.items()}})
    if router.kind.startswith("smg-"):
        # Once, on the last gateway: with sglang_server_rollback, the still broken version on replica2 is rolled back
        # to its last good deployment (the fixed one of the first gateway's re-run: its patched file put back from
        # the record's copy), which goes back into the gateway; the run fails naming the replica and the crash, and
        # no client sees an error.
        broken = os.path.join(fleet["workdir"], "inventory-broken")
        hosts = {n: replica_vars(r["prefix"], r["port"], sglang_server_context_length=65536) for n, r in replicas.items()}
        hosts["replica2"].update(sglang_patch_enabled=False, sglang_emulator_scenario="eagle", sglang_server_rollback=True)
        write_inventory(broken, {"hosts": hosts})
        good = json.load(open(os.path.join(r2["prefix"], "var/lib/eagle-deploy/run/sglang.good.json")))["deployments"][0]
        clients = Clients(router.url)
        try:
            until("client traffic through the router", lambda: clients.ok >= 10)
            run = fleet["play"]("rolling_restart.yml", broken, "--limit", "replica2",
                                *router.play_args("-e", "sglang_fleet_poll_interval=0.25"))
            time.sleep(2)
        finally:
            clients.stop()
        assert run.rc != 0, run
        msg = " ".join(run.failures()["replica2"].split())
        assert msg.startswith("replica replica2 (%s) failed and was rolled back to %s, SGLang 0.5.23, serving, pid %d"
                              % (r2["url"], good["fingerprint"][:16], run_state(r2)["pid"])), msg
        assert "eagle_worker_v2.py); back in the router, and no replica after it was touched." in msg, msg
        assert "crash class: first_request_crash" in run.result("replica2", "Show why the smoke test failed")["msg"]
        assert run_state(r2)["fingerprint"] == good["fingerprint"] and router.serving(r2["url"])
        assert clients.errors == [], clients.errors
    others = {url: w for url, w in router.registry().items() if url != r2["url"]}
    run = fleet["play"]("rolling_restart.yml", fixed, "--limit", "replica2",
                        *router.play_args("-e", "sglang_fleet_poll_interval=0.25"))
    assert run.rc == 0, run
    joined = run.result("replica2", "Put this replica back into the router")
    assert joined["changed"] is True and joined["gateway"]["name"] == router.kind.rsplit("-", 1)[0], joined
    assert router.serving(r2["url"]), router.workers().get(r2["url"])
    assert not os.path.exists(os.path.join(r2["prefix"], "var/lib/eagle-deploy/run/sglang.fleet-out.json"))
    assert {url: w for url, w in router.registry().items() if url != r2["url"]} == others  # the others untouched
