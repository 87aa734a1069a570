"""The production inventories (inventory/blackwell, inventory/h200-8x), issue 40: playbooks/pin_models.yml pins their
models against the Hub test double (tests/integration/hub_double.py), then `serve_eagle3.yml --check` runs with each,
its host replaced by this machine, where a virtualenv holds the real files of SGLang 0.5.23 (out of the wheel cache,
tests/unit/sglang_src.py; no torch, so the argument check reads SGLang's sources): the argument and environment checks
pass and every setting is one this SGLang knows. A branch is refused where pins are required; a stale SGLANG_
variable fails the environment check."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest
import yaml

import hub_double
from ansible_run import REPO, run_playbook

sys.path.insert(0, os.path.join(REPO, "tests", "unit"))
import sglang_src  # noqa: E402 - the wheel cache, next to the unit tests

INVENTORIES = ("blackwell", "h200-8x")
REPOS = ("moonshotai/Kimi-K2.5", "AQ-MedAI/Kimi-K25-eagle3")
ARGS_CHECK = "Check the server arguments against the installed SGLang"
PIN_CHECK = "Refuse a revision that is not pinned to a commit"
KEY = "production-inventory-test-key-0123"
# The settings this run checks and nothing else: the role's settings check, the argument check (tagged always) and
# the model role's pin check. Nothing is installed, fetched, written or started (--check).
TAGS = "sglang_server_validate,sglang_model_pins"


@pytest.fixture(scope="module")
def world():
    """A work dir with a virtualenv holding SGLang 0.5.23's Python files and dist-info (as pip installs them, from
    the real wheel), and a Hub double serving small stand-ins of both repos."""
    work = tempfile.mkdtemp(prefix="eagle-prod-inv-")
    venv = os.path.join(work, "venv-0.5.23")
    subprocess.run([shutil.which("python3", path="/usr/bin") or "python3", "-m", "venv", "--without-pip", venv],
                   check=True)
    site = subprocess.run([os.path.join(venv, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with zipfile.ZipFile(sglang_src.wheel_path("0.5.23")) as wheel:
        wheel.extractall(site, [m for m in wheel.namelist()
                                if (m.startswith("sglang/") and m.endswith(".py")) or ".dist-info/" in m])
    repos = []
    for i, repo in enumerate(REPOS):
        src = os.path.join(work, "src", str(i))
        hub_double.make_model(src, shards=1, shard_size=1024, seed=repo)
        repos.append(hub_double.Repo(repo, src))
    double = hub_double.Double(repos)
    server = hub_double.serve(double)
    yield {"work": work, "venv": venv, "site": site, "double": double,
           "commits": dict((r.repo_id, r.commit) for r in repos),
           "url": "http://127.0.0.1:%d" % server.server_address[1]}
    server.shutdown()
    shutil.rmtree(work, ignore_errors=True)


def local_copy(world, name):
    """inventory/<name> copied, its host replaced by this machine (local connection)."""
    dest = tempfile.mkdtemp(prefix="inv-%s-" % name, dir=world["work"])
    shutil.copytree(os.path.join(REPO, "inventory", name, "group_vars"), os.path.join(dest, "group_vars"))
    with open(os.path.join(dest, "hosts.yml"), "w") as handle:
        json.dump({"all": {"children": {"sglang_servers": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}, handle)
    return dest


def group_vars(inventory):
    with open(os.path.join(inventory, "group_vars", "sglang_servers.yml")) as handle:
        return handle.read()


def pin(world, inventory, *extra):
    return run_playbook("pin_models.yml", inventory, "-e", "sglang_model_hf_endpoint=%s" % world["url"], *extra,
                        timeout=300)


def serve_check(world, inventory, *extra):
    return run_playbook("serve_eagle3.yml", inventory, "--check", "--tags", TAGS,
                        "-e", "ansible_become=false", "-e", "sglang_install_venv=%s" % world["venv"],
                        "-e", "vault_sglang_api_key=%s" % KEY, *extra, timeout=300)


@pytest.mark.parametrize("name", INVENTORIES)
def test_pin_models_writes_each_commit_and_serve_check_passes_on_sglang_0_5_23(world, name):
    inventory = local_copy(world, name)
    before = yaml.safe_load(group_vars(inventory))
    assert before["sglang_model_require_pinned"] is True
    assert [m["repo"] for m in before["sglang_model_models"]] == list(REPOS)
    assert before["sglang_server_environment"] == {}

    pinned = pin(world, inventory)
    assert pinned.rc == 0, pinned
    after = yaml.safe_load(group_vars(inventory))
    assert [(m["repo"], m["revision"]) for m in after["sglang_model_models"]] == [
        (r, world["commits"][r]) for r in REPOS]
    assert "# main, pinned by playbooks/pin_models.yml" in group_vars(inventory)
    # Everything else as it was.
    for key, value in before.items():
        if key != "sglang_model_models":
            assert after[key] == value, key
    again = pin(world, inventory)
    assert again.rc == 0 and "every model is pinned already" in json.dumps(again.result("localhost", "Show the pins"))

    play = serve_check(world, inventory)
    assert play.rc == 0, play
    assert not play.result("localhost", PIN_CHECK).get("failed")
    check = play.result("localhost", ARGS_CHECK)
    assert not check.get("failed"), check.get("msg")
    assert (check["sglang_version"], check["method"]) == ("0.5.23", "ast")
    assert check["sglang_root"] == os.path.join(world["site"], "sglang")
    for flag in ("--context-length", "--mem-fraction-static", "--trust-remote-code", "--reasoning-parser",
                 "--tool-call-parser", "--speculative-draft-model-path", "--speculative-num-draft-tokens"):
        assert flag in check["checked_args"], flag
    assert (check["environment_checked"], check["environment_unread"]) == ([], [])
    assert not check.get("warnings")
    # The values the names-only check cannot judge: the parsers are registered under these names in 0.5.23.
    for parser, registry in (("reasoning-parser", "srt/parser/reasoning_parser.py"),
                             ("tool-call-parser", "srt/function_call/function_call_parser.py")):
        with open(os.path.join(world["site"], "sglang", registry)) as handle:
            assert re.search(r'"%s"\s*:' % after["sglang_server_extra_args"][parser], handle.read()), parser


@pytest.mark.parametrize("name", INVENTORIES)
def test_an_unpinned_branch_is_refused_before_anything_else(world, name):
    play = serve_check(world, local_copy(world, name))
    assert play.rc != 0
    refused = play.result("localhost", PIN_CHECK)
    assert refused.get("failed")
    assert "Kimi-K2.5-INT4 revision main" in refused["msg"] and "playbooks/pin_models.yml" in refused["msg"]


def test_pin_models_prints_without_writing_when_asked(world):
    inventory = local_copy(world, "blackwell")
    before = group_vars(inventory)
    play = pin(world, inventory, "-e", "eagle_deploy_pin_write=false")
    assert play.rc == 0, play
    shown = json.dumps(play.result("localhost", "Show the pins"))
    assert all(world["commits"][r] in shown for r in REPOS)
    assert group_vars(inventory) == before


def test_the_stale_spec_v2_variable_fails_the_environment_check(world):
    inventory = local_copy(world, "blackwell")
    assert pin(world, inventory).rc == 0
    extra = json.dumps({"sglang_server_environment": {"SGLANG_ENABLE_SPEC_V2": "1"},
                        "sglang_server_environment_compare": [sglang_src.wheel_path("0.5.9")]})
    play = serve_check(world, inventory, "-e", extra)
    assert play.rc != 0
    check = play.result("localhost", ARGS_CHECK)
    assert check.get("failed") and check["unknown_environment"] == ["SGLANG_ENABLE_SPEC_V2"]
    assert "SGLANG_ENABLE_SPEC_V2 (read by 0.5.9, not by 0.5.23)" in check["msg"]
