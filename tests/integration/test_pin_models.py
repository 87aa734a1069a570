"""playbooks/pin_models.yml against the Hub test double (tests/integration/hub_double.py), on an inventory of this
machine written here: the token of a gated repo never reaches the output (-vvv, the default callback, a pass and a
failed lookup), a failed lookup says its status and message, an answer that is not a commit hash is never written,
and only the entry on the branch being pinned is rewritten (another entry of the same repo, pinned or on another
branch, is left as it is)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import yaml

import hub_double
from ansible_run import BIN, REPO, run_playbook

TOKEN = "hf_pintesttoken_9c4d2a7e1b6f3058"
GATED = "test-org/gated-pin"
OPEN = "test-org/open-pin"
OLD_PIN = "0123abcd" * 5


@pytest.fixture(scope="module")
def world():
    """A work dir and a Hub double serving a gated repo (the token required) and an open one with a second branch."""
    work = tempfile.mkdtemp(prefix="eagle-pin-")
    repos = []
    for i, repo_id in enumerate((GATED, OPEN)):
        src = os.path.join(work, "src", str(i))
        hub_double.make_model(src, shards=1, shard_size=1024, seed=repo_id)
        repos.append(hub_double.Repo(repo_id, src, gated=repo_id == GATED))
    by_id = dict((r.repo_id, r) for r in repos)
    by_id[OPEN].branches["dev"] = "d" * 40
    double = hub_double.Double(repos, token=TOKEN)
    server = hub_double.serve(double)
    yield {"work": work, "repos": by_id, "url": "http://127.0.0.1:%d" % server.server_address[1]}
    server.shutdown()
    shutil.rmtree(work, ignore_errors=True)


def inventory(world, models):
    """An inventory of this machine (local connection) whose group vars list ``models`` (YAML text)."""
    dest = tempfile.mkdtemp(prefix="inv-", dir=world["work"])
    os.mkdir(os.path.join(dest, "group_vars"))
    with open(os.path.join(dest, "group_vars", "sglang_servers.yml"), "w") as handle:
        handle.write("---\nsglang_model_require_pinned: true\nsglang_model_models:\n" + models)
    with open(os.path.join(dest, "hosts.yml"), "w") as handle:
        json.dump({"all": {"children": {"sglang_servers": {"hosts": {"localhost": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}, handle)
    return dest


def group_vars(inv):
    with open(os.path.join(inv, "group_vars", "sglang_servers.yml")) as handle:
        return handle.read()


def pin_verbose(world, inv, *extra):
    """pin_models.yml at -vvv with the default callback, as a user runs it: (rc, stdout + stderr)."""
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
               ANSIBLE_NOCOLOR="1")
    cmd = [os.path.join(BIN, "ansible-playbook"), os.path.join("playbooks", "pin_models.yml"), "-i", inv, "-vvv",
           "-e", "sglang_model_hf_endpoint=%s" % world["url"]] + list(extra)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def model(name, repo, revision):
    return "  - name: %s\n    repo: %s\n    revision: %s\n    path: /srv/models/%s\n" % (name, repo, revision, name)


def test_a_gated_repo_is_pinned_with_the_token_and_the_token_is_never_printed(world):
    inv = inventory(world, model("gated", GATED, "main") + model("open", OPEN, "main"))
    rc, out = pin_verbose(world, inv, "-e", json.dumps({"sglang_model_hf_token": TOKEN}))
    assert rc == 0, out[-4000:]
    assert TOKEN not in out
    pinned = yaml.safe_load(group_vars(inv))["sglang_model_models"]
    assert [m["revision"] for m in pinned] == [world["repos"][GATED].commit, world["repos"][OPEN].commit]
    # The json callback prints every task's whole result: the token is in none either.
    inv = inventory(world, model("gated", GATED, "main"))
    play = run_playbook("pin_models.yml", inv, "-e", "sglang_model_hf_endpoint=%s" % world["url"],
                        "-e", json.dumps({"sglang_model_hf_token": TOKEN}), timeout=300)
    assert play.rc == 0, play
    assert TOKEN not in json.dumps(play.out)


def test_a_failed_lookup_says_its_status_and_message_and_never_the_token(world):
    inv = inventory(world, model("gated", GATED, "main") + model("gone", "test-org/no-such-repo", "main"))
    before = group_vars(inv)
    rc, out = pin_verbose(world, inv, "-e", json.dumps({"sglang_model_hf_token": TOKEN}))
    assert rc != 0
    assert TOKEN not in out
    assert "test-org/no-such-repo revision main (status 404" in out, out[-4000:]
    assert "Repository Not Found" in out
    assert group_vars(inv) == before
    # Without the token the gated repo answers 401 and says why (the lookups are not hidden then: no secret).
    play = run_playbook("pin_models.yml", inventory(world, model("gated", GATED, "main")),
                        "-e", "sglang_model_hf_endpoint=%s" % world["url"], timeout=300)
    assert play.rc != 0
    failed = play.result("localhost", "Fail where a branch could not be resolved to a commit")
    assert "%s revision main (status 401" % GATED in failed["msg"] and "restricted" in failed["msg"], failed["msg"]


@pytest.mark.parametrize("sha", ["0123456789abcdef" * 2 + "01234567\n  evil: true", "not-a-commit",
                                 "0123456789ABCDEF" * 2 + "01234567", ""])
def test_an_answer_that_is_not_a_commit_hash_is_never_written(world, sha):
    repo = world["repos"][OPEN]
    repo.branches["odd"] = sha
    try:
        inv = inventory(world, model("open", OPEN, "odd"))
        before = group_vars(inv)
        play = run_playbook("pin_models.yml", inv, "-e", "sglang_model_hf_endpoint=%s" % world["url"], timeout=300)
    finally:
        del repo.branches["odd"]
    assert play.rc != 0
    failed = play.result("localhost", "Fail where the Hub's answer is not a commit hash")
    assert failed.get("failed") and "%s odd" % OPEN in failed["msg"], failed
    assert group_vars(inv) == before


def test_only_the_entry_on_the_branch_being_pinned_is_rewritten(world):
    models = (model("pinned", OPEN, OLD_PIN) + model("on-main", OPEN, "main") + model("on-dev", OPEN, '"dev"  # work')
              + model("main-again", OPEN, "main"))
    inv = inventory(world, models)
    play = run_playbook("pin_models.yml", inv, "-e", "sglang_model_hf_endpoint=%s" % world["url"], timeout=300)
    assert play.rc == 0, play
    after = yaml.safe_load(group_vars(inv))["sglang_model_models"]
    assert [(m["name"], m["revision"]) for m in after] == [
        ("pinned", OLD_PIN), ("on-main", world["repos"][OPEN].commit), ("on-dev", "d" * 40),
        ("main-again", world["repos"][OPEN].commit)]
    text = group_vars(inv)
    assert "%s  # main, pinned by playbooks/pin_models.yml" % world["repos"][OPEN].commit in text
    assert "%s  # dev, pinned by playbooks/pin_models.yml" % ("d" * 40) in text
