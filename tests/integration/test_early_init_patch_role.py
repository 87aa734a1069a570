"""The sglang_patch role, run by ansible-playbook against localhost on a venv laid out like a real one holding
SGLang 0.5.23's eagle_worker_v2.py: it patches, is idempotent, removes the patch and names a missing file.
(library/early_init_patch.py itself is unit-tested in tests/unit/test_early_init_patch.py.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import sglang_src
from test_early_init_patch import DEFAULT, assert_patched, sha  # the unit tests' checks of a patched file


# --- the sglang_patch role, run by ansible-playbook against localhost --------------------------------

ROLE_PLAY = """
- name: Apply sglang_patch
  hosts: localhost
  gather_facts: false
  roles:
    - role: sglang_patch
  post_tasks:
    - name: Show the fingerprint fact
      ansible.builtin.debug:
        msg: "SHA={{ sglang_patch_file_sha256 }}"
"""


def _playbook(tmp_path, *extra):
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("localhost ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    play = tmp_path / "play.yml"
    play.write_text(ROLE_PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(sglang_src.REPO, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-local"), ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible-remote"))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(play),
           "-e", json.dumps(dict(extra[0]))] + list(extra[1:])
    proc = subprocess.run(cmd, cwd=sglang_src.REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_role_patches_is_idempotent_and_removes(tmp_path):
    original = sglang_src.eagle_worker_v2_source("0.5.23")
    fake_venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fake_venv)], check=True, timeout=120)
    site = next((fake_venv / "lib").glob("python3*/site-packages"))
    package = site / "sglang"
    (package / "srt" / "speculative").mkdir(parents=True)
    # The role must find the package WITHOUT importing it.
    (package / "__init__.py").write_text("raise RuntimeError('sglang imported')\n")
    target = package / "srt" / "speculative" / "eagle_worker_v2.py"
    target.write_bytes(original)
    (site / "sglang-0.5.23.dist-info").mkdir()
    (site / "sglang-0.5.23.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    args = {"sglang_patch_venv": str(fake_venv)}

    rc, out = _playbook(tmp_path, args)
    assert rc == 0, out
    assert re.search(r"localhost\s*:\s*ok=\d+\s+changed=1\s", out), out
    patched = target.read_bytes()
    assert_patched(original, patched, DEFAULT)
    assert "SHA=%s" % sha(patched) in out
    assert list(target.parent.glob("eagle_worker_v2.py.*~")), "sglang_patch_backup defaults to true"

    rc, out = _playbook(tmp_path, args)
    assert rc == 0 and re.search(r"localhost\s*:\s*ok=\d+\s+changed=0\s", out), out

    rc, out = _playbook(tmp_path, dict(args, sglang_patch_enabled=False))
    assert rc == 0, out
    assert target.read_bytes() == original
    assert "SHA=%s" % sha(original) in out

    target.unlink()
    rc, out = _playbook(tmp_path, args)
    assert rc != 0
    assert "sglang/srt/speculative/eagle_worker_v2.py not found in the venv %s" % fake_venv in out
    assert "SGLang 0.5.23" in out
