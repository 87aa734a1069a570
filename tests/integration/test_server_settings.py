"""Settings that are wrong on their face are refused by the sglang_server role before anything is installed,
stopped or launched (roles/sglang_server/tasks/validate.yml), run through the real playbook and inventories."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def validate(inventory, *extra):
    """The serve playbook limited to the role's settings check (tag 'always' keeps the cheap fact tasks too),
    against this machine whatever the inventory's host is."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    cmd = [os.path.join(BIN, "ansible-playbook"), "playbooks/serve_eagle3.yml", "-i", inventory,
           "--tags", "sglang_server_validate", "-e", "ansible_connection=local", "-e", "ansible_become=false",
           "-e", "ansible_python_interpreter=%s" % sys.executable] + list(extra)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    out = json.loads(proc.stdout)
    results = [(t["task"]["name"], r) for play in out["plays"] for t in play["tasks"] for r in t["hosts"].values()]
    check = [r for name, r in results if name.endswith("Check the server settings")]
    assert check, "the settings check did not run: %s\n%s" % ([n for n, _ in results], proc.stderr[-2000:])
    # Nothing but facts and the check ran: no task changed anything.
    assert not [n for n, r in results if r.get("changed")], results
    return proc.returncode, check[0]


def test_blackwell_inventory_without_vault_key_is_refused():
    # inventory/blackwell binds 0.0.0.0 and takes the key from vault_sglang_api_key, which is not set here.
    rc, check = validate("inventory/blackwell")
    assert rc != 0 and check.get("failed")
    assert "sglang_server_host=0.0.0.0" in check["msg"]
    assert "vault_sglang_api_key" in check["msg"] and "sglang_server_allow_no_api_key" in check["msg"]


def test_blackwell_inventory_with_a_key_passes():
    rc, check = validate("inventory/blackwell", "-e", "vault_sglang_api_key=s3cret-key-0123456")
    assert rc == 0 and not check.get("failed"), check
    assert "s3cret-key-0123456" not in json.dumps(check)


@pytest.mark.parametrize("key", ["abc", "s3cret-key", "fifteen-chars-x"])
def test_a_key_shorter_than_16_characters_is_refused_and_never_shown(key):
    rc, check = validate("inventory/blackwell", "-e", "vault_sglang_api_key=%s" % key)
    assert rc != 0 and check.get("failed"), check
    assert "sglang_server_api_key is %d characters long, shorter than 16" % len(key) in check["msg"]
    assert "openssl rand -hex 24" in check["msg"]
    assert key not in json.dumps(check)


def test_a_secret_environment_value_too_short_to_mask_is_refused_by_name():
    extra = json.dumps({"sglang_server_secret_environment": {"HF_TOKEN": "hf_0123456789abcdef", "FLAG": "1",
                                                             "PIN": "x9z"}})
    rc, check = validate("inventory/local", "-e", extra)
    assert rc != 0 and check.get("failed"), check
    assert "sglang_server_secret_environment: FLAG, PIN are 1-3 characters long" in check["msg"]
    assert "sglang_server_environment" in check["msg"] and "HF_TOKEN" not in check["msg"]
    assert "x9z" not in json.dumps(check)


def test_explicit_opt_out_for_a_proxy_fronted_server_passes():
    rc, check = validate("inventory/blackwell", "-e", "sglang_server_allow_no_api_key=true")
    assert rc == 0 and not check.get("failed"), check


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "localhost", "::1"])
def test_loopback_without_a_key_passes(host):
    rc, check = validate("inventory/blackwell", "-e", "sglang_server_host=%s" % host)
    assert rc == 0 and not check.get("failed"), check


@pytest.mark.parametrize("host", ["::", "10.1.2.3", "gpu-node-01.example.internal", "127.0.0.1.example.com"])
def test_non_loopback_without_a_key_is_refused(host):
    rc, check = validate("inventory/blackwell", "-e", "sglang_server_host=%s" % host)
    assert rc != 0 and "no API key" in check["msg"], check


@pytest.mark.parametrize("port", ["99999", "0", "-1", "70000"])
def test_port_out_of_range_is_refused(port):
    rc, check = validate("inventory/local", "-e", "sglang_server_port=%s" % port)
    assert rc != 0 and "is not a TCP port (1-65535)" in check["msg"], check


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", ""])
def test_name_that_is_not_a_plain_file_name_is_refused(name):
    rc, check = validate("inventory/local", "-e", "sglang_server_name=%s" % name)
    assert rc != 0 and "is not a plain name" in check["msg"], check


def test_name_with_a_trailing_newline_is_refused():
    rc, check = validate("inventory/local", "-e", json.dumps({"sglang_server_name": "sglang\n"}))
    assert rc != 0 and "is not a plain name" in check["msg"], check
