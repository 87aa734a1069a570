"""playbooks/vars/deployment.yml against the inventory, in a real ansible-playbook run: what an operator sets in the
inventory is kept. The weights' revisions the speculation check names (sglang_server_model_revision,
sglang_server_draft_model_revision) come from sglang_model_models by default, in the server role's defaults: a play
var there would beat the inventory (Ansible's precedence) and silently drop the operator's value.

The play is the deployment playbooks' shape (vars_files: vars/deployment.yml, the role sglang_server), the role's
tasks skipped (`when: false`): only the variables are looked at. Three hosts, all this machine (connection local):
one whose inventory sets the target's revision, one that leaves both to sglang_model_models, one without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
MODELS = [{"repo": "org/target", "path": "/srv/models/target", "revision": "1111111111111111111111111111111111111111"},
          {"repo": "org/draft", "path": "/srv/models/draft", "revision": "2222222222222222222222222222222222222222"}]


def run_play(tmp_path):
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
              "sglang_server_model_path": MODELS[0]["path"], "sglang_server_draft_model_path": MODELS[1]["path"]}
    inventory = {"all": {"hosts": {
        "operator": dict(common, sglang_model_models=MODELS, sglang_server_model_revision="operator-pinned"),
        "derived": dict(common, sglang_model_models=MODELS),
        "nomodels": dict(common)}}}
    play = [{"name": "The deployment's variables, the server role's defaults under them",
             "hosts": "all", "gather_facts": False,
             "vars_files": [os.path.join(REPO, "playbooks", "vars", "deployment.yml")],
             "roles": [{"role": "sglang_server", "when": False}],
             "tasks": [{"name": "Say the revisions",
                        "ansible.builtin.debug": {"msg": "{{ {'target': sglang_server_model_revision, "
                                                         "'draft': sglang_server_draft_model_revision} }}"}}]}]
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml")], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    said = [t for t in tasks if t["task"]["name"] == "Say the revisions"]
    assert len(said) == 1, [t["task"]["name"] for t in tasks]
    return {host: result["msg"] for host, result in said[0]["hosts"].items()}


def test_an_inventory_revision_beats_the_one_taken_from_the_models(tmp_path):
    said = run_play(tmp_path)
    assert said["operator"] == {"target": "operator-pinned", "draft": MODELS[1]["revision"]}
    assert said["derived"] == {"target": MODELS[0]["revision"], "draft": MODELS[1]["revision"]}
    assert said["nomodels"] == {"target": "", "draft": ""}
