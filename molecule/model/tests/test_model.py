"""Verify scenario `model`: the REAL state of the two test hosts after converge, idempotence, check mode and the side
effect (a shard corrupted on eagle-model-2, the playbook run again), and what the Hub test double served.

Values come from molecule.yml's inventory (tests/molecule_support/hostcheck.scenario_vars); the state from the hosts
(files, their hashes, the role's manifests and status files, HTTP from inside) and the double's request log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import testinfra

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.molecule_support import hostcheck  # noqa: E402 - importable once sys.path has the repository root

V = hostcheck.scenario_vars()
MODELS = V["sglang_model_models"]
TOKEN = V["sglang_model_hf_token"]
HUB = V["sglang_model_hf_endpoint"]
STATE_DIR = "/var/lib/eagle-deploy/models"  # the role's default
SEEDER, PULLER = "eagle-model-1", "eagle-model-2"
ADDRESS = {SEEDER: "10.88.251.11", PULLER: "10.88.251.12"}


def other(name):
    return testinfra.get_host("podman://%s" % name)


def read_json(host, path):
    return json.loads(host.check_output("cat %s" % path))


@pytest.fixture(scope="module")
def hub_log():
    """Every request the Hub test double answered during the whole scenario (asked from inside the seeder)."""
    return json.loads(other(SEEDER).check_output("curl -sf %s/_double/stats" % HUB))


@pytest.fixture(scope="module")
def hub_files():
    """The double's file list of each repo ({repo: {path: entry}}), with the token (the target repo is gated)."""
    out = {}
    for m in MODELS:
        text = other(SEEDER).check_output(
            "curl -sf -H 'Authorization: Bearer %s' '%s/api/models/%s/tree/main?recursive=true'" % (TOKEN, HUB, m["repo"]))
        entries = json.loads(text)
        # the double pages its tree (5 entries a page): follow the cursor
        cursor = 5
        while len(entries) == cursor:
            more = json.loads(other(SEEDER).check_output(
                "curl -sf -H 'Authorization: Bearer %s' '%s/api/models/%s/tree/main?recursive=true&cursor=%d'"
                % (TOKEN, HUB, m["repo"], cursor)))
            entries += more
            cursor += 5
            if not more:
                break
        out[m["repo"]] = dict((e["path"], e) for e in entries if e["type"] == "file")
    return out


def test_each_file_was_fetched_from_the_hub_once_by_the_seeder_alone(hub_log, hub_files):
    gets = [r for r in hub_log if r["method"] == "GET" and r.get("file")]
    assert {r["client"] for r in hub_log} == {ADDRESS[SEEDER]}, {r["client"] for r in hub_log}
    per_file = {}
    for r in gets:
        per_file.setdefault(r["path"], []).append((r["start"], r["sent"]))
    wanted = sum(len(files) for files in hub_files.values())
    assert len(per_file) == wanted, sorted(per_file)
    assert all(len(v) == 1 and v[0][0] == 0 for v in per_file.values()), per_file
    assert sum(v[0][1] for v in per_file.values()) == sum(
        e["size"] for files in hub_files.values() for e in files.values())


@pytest.mark.parametrize("m", MODELS, ids=lambda m: m["name"])
def test_every_file_is_in_place_with_the_hubs_checksum_roots_and_readable_by_the_service_group(host, m, hub_files):
    files = hub_files[m["repo"]]
    manifest = read_json(host, "%s/%s.manifest.json" % (STATE_DIR, m["name"]))
    assert set(manifest["files"]) == set(files)
    sums = dict(line.split("  ", 1)[::-1] for line in host.check_output(
        "cd %s && sha256sum %s" % (m["path"], " ".join("'%s'" % p for p in sorted(files)))).splitlines())
    for rel, entry in files.items():
        f = host.file("%s/%s" % (m["path"], rel))
        assert (f.user, f.group, f.mode) == ("root", V["sglang_install_group"], 0o640), rel
        if "lfs" in entry:
            assert sums[rel] == entry["lfs"]["oid"], rel
        assert manifest["files"][rel]["sha256"] == sums[rel], rel
        assert manifest["files"][rel]["size"] == entry["size"] == f.size, rel
    for d in {m["path"]} | {"%s/%s" % (m["path"], rel.rsplit("/", 1)[0]) for rel in files if "/" in rel}:
        dd = host.file(d)
        assert (dd.user, dd.group, dd.mode) == ("root", V["sglang_install_group"], 0o750), d
    assert not host.file("%s/.eagle-fetch" % m["path"]).exists
    assert host.run("runuser -u %s -- cat %s/config.json" % (V["sglang_install_user"], m["path"])).rc == 0


def test_the_manifests_are_roots_and_name_the_commit_of_the_branch(host):
    for m in MODELS:
        f = host.file("%s/%s.manifest.json" % (STATE_DIR, m["name"]))
        assert (f.user, f.mode) == ("root", 0o644)
        source = json.loads(f.content_string)["source"]
        assert source["repo"] == m["repo"] and source["revision"] == "main" and len(source["commit"]) == 40


def test_the_second_host_copied_from_the_first(host):
    for m in MODELS:
        source = read_json(other(PULLER), "%s/%s.manifest.json" % (STATE_DIR, m["name"]))["source"]
        assert source["via"] == "%s:%s" % (ADDRESS[SEEDER], m["path"]), source
        assert "via" not in read_json(other(SEEDER), "%s/%s.manifest.json" % (STATE_DIR, m["name"]))["source"]


def test_the_shard_corrupted_on_the_second_host_was_copied_again_alone_from_the_first():
    status = read_json(other(PULLER), "%s/Kimi-K2.5-INT4.status.json" % STATE_DIR)
    assert status["verdict"] == "done"
    summary = status["summary"]
    assert summary["source"] == "peer"
    assert summary["refetched"] == ["model-00002-of-00003.safetensors"], summary
    assert summary["fetched"] == 1 and summary["verified"] == 1, summary


def test_no_copy_key_or_access_is_left_behind():
    assert "eagle-deploy-fanout" not in other(SEEDER).run("cat /root/.ssh/authorized_keys").stdout
    leftovers = other(PULLER).run("ls -d %s/*.peer" % STATE_DIR)
    assert leftovers.rc != 0, leftovers.stdout


def test_the_token_is_in_no_file_and_never_reached_the_host_that_copied(host):
    found = host.run("grep -rl -- %s /var/lib/eagle-deploy /data/models /etc/sglang /var/log/sglang /root /tmp" % TOKEN)
    assert found.stdout.strip() == "", found.stdout
    assert found.rc == 1, found.stderr


def test_the_server_serves_the_fetched_model(host):
    info = json.loads(host.check_output(
        "curl -sf -H 'Authorization: Bearer %s' http://127.0.0.1:%d/get_model_info"
        % (V["sglang_server_api_key"], V["sglang_server_port"])))
    assert info["model_path"] == V["sglang_server_model_path"], info
