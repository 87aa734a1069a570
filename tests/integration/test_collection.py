"""The collection eagle.deploy as a user gets it: ``bin/build-collection --build`` makes the artifact,
``ansible-galaxy collection install`` puts it into a collections path of its own (nothing of this tree's ansible.cfg,
library/ or module_utils/ in sight), and then ``ansible-doc`` renders every module under its collection name and
a playbook calls the modules by that name against localhost: ``sglang_info`` (read-only) and ``wait_for_model``
``state=stopped`` through its action plugin (``progress`` is the plugin's own argument: the module alone refuses it)
with nothing to stop."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_run import REPO, TARGET_PYTHON

BIN = os.path.dirname(sys.executable)
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(REPO, "library", "*.py")))
ROLES = sorted(os.listdir(os.path.join(REPO, "roles")))


def _run(cmd, env, cwd, timeout=300):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False)
    assert proc.returncode == 0, "%s: rc=%s\n%s\n%s" % (" ".join(cmd), proc.returncode, proc.stdout[-3000:],
                                                       proc.stderr[-3000:])
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(env, cwd) of an Ansible that knows only the installed collection."""
    tmp = tmp_path_factory.mktemp("collection")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    artifact = _run([sys.executable, os.path.join(REPO, "bin", "build-collection"), "--build", str(tmp / "dist")],
                    env, str(tmp)).strip()
    with open(os.path.join(REPO, "collection", "galaxy.yml"), encoding="utf-8") as f:
        version = yaml.safe_load(f)["version"]
    assert os.path.basename(artifact) == "eagle-deploy-%s.tar.gz" % version and os.path.isfile(artifact)
    cfg = tmp / "ansible.cfg"
    cfg.write_text("[defaults]\ncollections_path = %s\n" % (tmp / "collections"))
    env.update(ANSIBLE_CONFIG=str(cfg), ANSIBLE_NOCOLOR="1", PATH=BIN + os.pathsep + env.get("PATH", ""))
    _run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "-p", str(tmp / "collections"),
          artifact], env, str(tmp))
    return env, tmp


def _doc(installed, module):
    env, tmp = installed
    return _run([os.path.join(BIN, "ansible-doc"), "eagle.deploy.%s" % module], env, str(tmp))


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders_the_module_under_its_collection_name(installed, module):
    where = os.path.join(str(installed[1]), "collections", "ansible_collections", "eagle", "deploy", "plugins", "modules")
    out = _doc(installed, module)
    assert out.startswith("> MODULE eagle.deploy.%s (%s)" % (module, os.path.join(where, module + ".py")))
    assert "ansible.legacy." not in out  # references (M(), seealso) name the collection's modules


@pytest.mark.parametrize("module", MODULES)
def test_the_module_s_examples_call_it_by_its_collection_name(installed, module):
    examples = _doc(installed, module).split("EXAMPLES:", 1)[1]
    assert "eagle.deploy.%s:" % module in examples


def test_ansible_doc_lists_every_module_and_role_of_the_collection(installed):
    env, tmp = installed
    listed = json.loads(_run([os.path.join(BIN, "ansible-doc"), "-l", "-j", "eagle.deploy"], env, str(tmp)))
    assert sorted(listed) == ["eagle.deploy.%s" % m for m in MODULES]
    roles = json.loads(_run([os.path.join(BIN, "ansible-doc"), "-t", "role", "-l", "-j", "eagle.deploy"], env,
                            str(tmp)))
    assert sorted(roles) == ["eagle.deploy.%s" % r for r in ROLES]


def test_a_playbook_calls_the_collection_s_modules_on_localhost(installed):
    env, tmp = installed
    model = tmp / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (tmp / "logs").mkdir()
    (tmp / "run").mkdir()
    play = [{"name": "Use the collection", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Read SGLang", "eagle.deploy.sglang_info": {"python": sys.executable, "model_dirs": [str(model)]}},
        {"name": "Stop", "eagle.deploy.wait_for_model": {"name": "collection-test", "state": "stopped",
                                                         "log_dir": str(tmp / "logs"), "run_dir": str(tmp / "run"),
                                                         "progress": False}},
    ]}]
    (tmp / "play.yml").write_text(json.dumps(play))
    out = _run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                "-e", "ansible_python_interpreter=%s" % TARGET_PYTHON, str(tmp / "play.yml")],
               dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"), str(tmp))
    tasks = json.loads(out)["plays"][0]["tasks"]
    info = tasks[0]["hosts"]["localhost"]
    assert not info.get("failed") and info["changed"] is False, info
    assert info["installed"] is False and info["venv"] == os.path.dirname(BIN)
    assert info["model_dirs"] == [{"path": str(model), "state": "ok", "config_json": str(model / "config.json"),
                                   "real_path": os.path.realpath(str(model))}]
    stop = tasks[1]["hosts"]["localhost"]
    assert not stop.get("failed") and stop["changed"] is False, stop
    assert stop["launcher"] == "detached"  # nothing recorded: no unit of ours to stop


@pytest.mark.parametrize("playbook", ["serve_eagle3", "stop"])
def test_the_collection_s_playbooks_find_its_roles_and_modules(installed, playbook):
    env, tmp = installed
    out = _run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "--syntax-check",
                "eagle.deploy.%s" % playbook], env, str(tmp))
    assert "playbook: %s" % os.path.join(str(tmp), "collections", "ansible_collections", "eagle", "deploy",
                                         "playbooks", playbook + ".yml") in out
