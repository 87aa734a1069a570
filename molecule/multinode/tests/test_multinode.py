"""Verify scenario `multinode`: REAL state of the two nodes of one server after converge + idempotence.

Values come from molecule.yml's inventory (tests/molecule_support/hostcheck.scenario_vars), the state from the hosts
themselves (files, /proc, sockets, HTTP from inside, across podman's network).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import testinfra

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.molecule_support import hostcheck  # noqa: E402 - importable once sys.path has the repository root

V = hostcheck.scenario_vars()
KEY = V["sglang_server_api_key"]
PORT = V["sglang_server_port"]
RANK0_ADDR = V["sglang_server_dist_init_host"]
DIST = "%s:%d" % (RANK0_ADDR, V["sglang_server_dist_init_port"])
RANKS = {"eagle-mn-1": 0, "eagle-mn-2": 1}
LOG = hostcheck.LOG_DIR + "/sglang.log"
UNIT = "sglang-sglang.service"

HTTP = r"""
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2:
    req.add_header("Authorization", "Bearer " + sys.argv[2])
try:
    print(urllib.request.urlopen(req, timeout=10).status)
except urllib.error.HTTPError as e:
    print(e.code)
except OSError as e:
    print("no answer: %s" % e)
"""


def rank(host):
    return RANKS[host.backend.name]


def node(rank_):
    """The node of that rank, whichever host testinfra parametrizes the other tests with: a test of one rank runs once,
    on that node (nothing is skipped on the other)."""
    (name,) = [name for name, r in RANKS.items() if r == rank_]
    return testinfra.get_host("podman://" + name)


def test_each_node_has_the_groups_config_and_its_rank(host):
    config = host.file(hostcheck.CONFIG)
    assert config.mode == 0o600
    text = config.content_string
    assert "nnodes: 2\n" in text and ("node-rank: %d\n" % rank(host)) in text
    assert 'dist-init-addr: "%s"\n' % DIST in text


def test_each_node_runs_its_server_recorded_as_ours(host, state, procs):
    assert state["pid"] in {p["pid"] for p in procs}
    argv = next(p["argv"] for p in procs if p["pid"] == state["pid"])
    assert any(a.endswith("sglang-emulator") for a in argv)


def test_each_nodes_server_runs_in_its_enabled_notify_unit(host, state):
    out = host.check_output("systemctl show %s" % UNIT)
    u = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert (u["LoadState"], u["ActiveState"], u["SubState"]) == ("loaded", "active", "running")
    assert (u["UnitFileState"], u["Type"]) == ("enabled", "notify")
    # the recorded server is in the unit's own cgroup (a child of the host watcher, the unit's main process)
    assert UNIT in host.file("/proc/%d/cgroup" % state["pid"]).content_string
    assert host.file("/etc/systemd/system/" + UNIT).contains("^# Written by eagle-deploy")


def test_rank0_waited_for_the_other_node_at_its_dist_init_address():
    host = node(0)
    log = host.file(LOG).content_string
    assert "waiting at %s for the other nodes to join" % DIST in log
    assert log.index("every node joined") < log.index("Load weight begin")
    # the follower's connection, established across podman's network
    ss = host.check_output("ss -tn state established '( sport = :%d )'" % V["sglang_server_dist_init_port"])
    assert "10.88.253.12:" in ss


def test_the_servers_health_is_rank0s_across_the_network(host):
    # asked from both nodes: rank 0's /health_generate on its address answers 200 (with the key: a real generation)
    out = host.check_output("python3 -c %s http://%s:%d/health_generate %s"
                            % (shlex.quote(HTTP), RANK0_ADDR, PORT, KEY))
    assert out == "200"


def test_a_followers_health_is_the_dummy_and_it_serves_nothing_else():
    host = node(1)

    def ask(path):
        return host.check_output("python3 -c " + shlex.quote(HTTP) + " http://127.0.0.1:%d/%s" % (PORT, path))
    assert ask("health_generate") == "200"
    assert ask("get_model_info") == "404"


def test_the_followers_status_says_its_load_is_done(host):
    status = json.loads(host.file(hostcheck.RUN_DIR + "/sglang.status.json").content_string)
    assert status["verdict"] == "ready" and status["phase"] == "ready"
