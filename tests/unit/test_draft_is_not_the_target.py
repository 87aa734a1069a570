"""An EAGLE3 draft that is the target under another name is refused before anything is stopped or started
(roles/sglang_server/tasks/preflight.yml, "Fail when the EAGLE3 draft is the target under another name"): the
assert's own conditions, read from the task file and rendered with jinja2 and Ansible's filters and tests, on the
model_dirs that sglang_args_check's model_dir_state returns for real directories, links and `..` paths in tmp_path."""
from __future__ import annotations

import os

import jinja2
import yaml
from ansible.module_utils.sglang_server_args import model_dir_state
from ansible.plugins.filter.core import FilterModule
from ansible.plugins.test.core import TestModule as AnsibleTests

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFLIGHT = os.path.join(REPO, "roles", "sglang_server", "tasks", "preflight.yml")
NAME = "Fail when the EAGLE3 draft is the target under another name"


def task():
    with open(PREFLIGHT, encoding="utf-8") as fh:
        (found,) = [t for t in yaml.safe_load(fh) if t.get("name") == NAME]
    return found


def environment():
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update({k: v for k, v in FilterModule().filters().items() if k != "default"})
    env.tests.update(AnsibleTests().tests())
    return env


def passes(target, draft, algorithm="EAGLE3", check_model_dirs=True):
    """Whether the task lets these paths through (skipped counts as through), as the role would call it: model_dirs
    is [target, draft] as the module returns them (vars/main.yml), [] where sglang_server_check_model_dirs is off."""
    t = task()
    env = environment()
    dirs = [model_dir_state(d) for d in (target, draft) if d] if check_model_dirs else []
    variables = {"sglang_server_speculative_algorithm": algorithm, "_sglang_server_args_check": {"model_dirs": dirs},
                 "sglang_server_model_path": target, "sglang_server_draft_model_path": draft,
                 "inventory_hostname": "gpu1"}
    assert t["vars"]["__sglang_server_dirs"] == "{{ _sglang_server_args_check.model_dirs | default([]) }}"
    variables["__sglang_server_dirs"] = dirs
    if env.from_string("{{ %s }}" % t["when"]).render(variables) != "True":
        return True
    message = env.from_string(t["ansible.builtin.assert"]["fail_msg"]).render(variables)
    assert "SGLang #36528" in message and (not dirs or os.path.realpath(target) in message)
    return all(env.from_string("{{ %s }}" % c).render(variables) == "True" for c in t["ansible.builtin.assert"]["that"])


def models(tmp_path):
    target = tmp_path / "models" / "target"
    draft = tmp_path / "models" / "draft"
    for d in (target, draft):
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
    (tmp_path / "link").symlink_to(target)
    return str(target), str(draft)


def test_a_link_to_the_target_is_refused(tmp_path):
    target, _ = models(tmp_path)
    assert passes(target, str(tmp_path / "link")) is False
    assert passes(str(tmp_path / "link"), target) is False


def test_a_dotdot_path_to_the_target_is_refused(tmp_path):
    target, draft = models(tmp_path)
    assert passes(target, os.path.join(draft, "..", "target")) is False
    assert passes(target, target + "/") is False


def test_a_draft_of_its_own_passes_and_other_algorithms_are_not_asked(tmp_path):
    target, draft = models(tmp_path)
    assert passes(target, draft) is True
    assert passes(target, str(tmp_path / "link"), algorithm="") is True  # no speculation: nothing to refuse here
    assert passes(target, str(tmp_path / "link"), check_model_dirs=False) is True  # not looked at: not refused
    # a result without real_path (a look kept by an older release) is not refused on a guess
    env = environment()
    older = [{"path": target, "state": "ok"}, {"path": str(tmp_path / "link"), "state": "ok"}]
    assert all(env.from_string("{{ %s }}" % c).render(__sglang_server_dirs=older) == "True"
               for c in task()["ansible.builtin.assert"]["that"])
