"""bin/build-collection's two rewrites (the project's module_utils imports, ``ansible.legacy.<our module>``) and the
tree it assembles: what goes where, and that nothing of the project's own layout is left in the collection's
Python. Pure file work in a tmp dir; the artifact build and install are tests/integration/test_collection.py."""
from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_loader = importlib.machinery.SourceFileLoader("build_collection", os.path.join(REPO, "bin", "build-collection"))
_spec = importlib.util.spec_from_loader("build_collection", _loader)
bc = importlib.util.module_from_spec(_spec)
_loader.exec_module(bc)

OURS = {"sglang_proc", "sglang_contract", "sglang_verdict"}
MU = "ansible_collections.eagle.deploy.plugins.module_utils"


def test_a_from_import_of_one_of_our_module_utils_is_pointed_at_the_collection():
    src = "from ansible.module_utils.sglang_proc import safe_name, read_state\n"
    assert bc.rewrite_imports(src, OURS) == "from %s.sglang_proc import safe_name, read_state\n" % MU


def test_our_module_utils_imported_from_the_package_are_pointed_at_the_collection():
    src = "from ansible.module_utils import sglang_proc, sglang_contract as c\n"
    assert bc.rewrite_imports(src, OURS) == "from %s import sglang_proc, sglang_contract as c\n" % MU


def test_a_parenthesised_import_over_several_lines_keeps_its_names_and_layout():
    src = ("from ansible.module_utils import (\n"
           "    sglang_contract, sglang_proc,\n"
           ")\n")
    assert bc.rewrite_imports(src, OURS) == src.replace("ansible.module_utils", MU, 1)


def test_ansible_core_module_utils_stay_as_they_are():
    src = ("from ansible.module_utils.basic import AnsibleModule\n"
           "from ansible.module_utils import basic\n"
           "from ansible.module_utils.common.text.converters import to_text\n")
    assert bc.rewrite_imports(src, OURS) == src


def test_imports_inside_try_and_functions_and_the_host_program_fallback_are_handled():
    src = ("try:\n"
           "    from ansible.module_utils import sglang_proc\n"
           "except ImportError:  # the host watcher program\n"
           "    import sglang_proc\n"
           "def f():\n"
           "    from ansible.module_utils.sglang_verdict import Waker\n"
           "    return Waker\n")
    out = bc.rewrite_imports(src, OURS)
    assert "    from %s import sglang_proc\n" % MU in out
    assert "    import sglang_proc\n" in out  # the plain import of the installed program is not ours to touch
    assert "    from %s.sglang_verdict import Waker\n" % MU in out


def test_strings_and_comments_that_name_an_import_are_left_alone():
    src = ('"""Used as ``from ansible.module_utils.sglang_proc import x``."""\n'
           "# from ansible.module_utils import sglang_proc\n"
           "X = 'from ansible.module_utils.sglang_verdict import y'\n")
    assert bc.rewrite_imports(src, OURS) == src


def test_one_import_naming_ours_and_ansible_core_s_is_refused():
    with pytest.raises(bc.AssemblyError, match="split it"):
        bc.rewrite_imports("from ansible.module_utils import basic, sglang_proc\n", OURS, "x.py")


def test_a_plain_import_of_our_module_utils_is_refused():
    with pytest.raises(bc.AssemblyError, match="not rewritten"):
        bc.rewrite_imports("import ansible.module_utils.sglang_proc\n", OURS, "x.py")


def test_ansible_legacy_names_of_our_modules_become_the_collection_s():
    text = ("- ansible.legacy.wait_for_model:\n"
            "  M(ansible.legacy.gpu_facts) O(ansible.legacy.wait_for_model#module:timeout)\n"
            "- ansible.legacy.command:\n"
            "- ansible.legacy.wait_for_model_x:\n")
    assert bc.rewrite_legacy(text, ["gpu_facts", "wait_for_model"]) == (
        "- eagle.deploy.wait_for_model:\n"
        "  M(eagle.deploy.gpu_facts) O(eagle.deploy.wait_for_model#module:timeout)\n"
        "- ansible.legacy.command:\n"
        "- ansible.legacy.wait_for_model_x:\n")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return bc.assemble(str(tmp_path_factory.mktemp("collection")))


def _py(directory):
    return sorted(f for f in os.listdir(os.path.join(REPO, directory)) if f.endswith(".py"))


def test_the_tree_holds_the_project_s_plugins_roles_playbooks_and_metadata(tree):
    assert tree.endswith(os.path.join("ansible_collections", "eagle", "deploy"))
    assert sorted(os.listdir(os.path.join(tree, "plugins", "modules"))) == _py("library")
    assert sorted(os.listdir(os.path.join(tree, "plugins", "module_utils"))) == _py("module_utils")
    assert sorted(os.listdir(os.path.join(tree, "plugins", "action"))) == _py("action_plugins")
    assert sorted(os.listdir(os.path.join(tree, "plugins", "plugin_utils"))) == _py("plugin_utils")
    assert sorted(os.listdir(os.path.join(tree, "roles"))) == sorted(os.listdir(os.path.join(REPO, "roles")))
    for f in ("galaxy.yml", "meta/runtime.yml", "README.md", "playbooks/serve_eagle3.yml", "tests/sanity/ignore-2.19.txt"):
        assert os.path.isfile(os.path.join(tree, f)), f


def test_no_python_file_of_the_collection_imports_the_project_s_module_utils_by_the_playbook_path(tree):
    ours = set(f[:-3] for f in _py("module_utils"))
    for sub in ("modules", "module_utils", "action", "plugin_utils"):
        for f in os.listdir(os.path.join(tree, "plugins", sub)):
            path = os.path.join(tree, "plugins", sub, f)
            with open(path, encoding="utf-8") as fh:
                for node in ast.walk(ast.parse(fh.read(), path)):
                    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ansible.module_utils"):
                        names = set(node.module.split(".")[2:3]) | set(a.name for a in node.names)
                        assert not names & ours, "%s:%d still imports %s" % (path, node.lineno, node.module)


def test_no_file_of_the_collection_names_our_modules_as_ansible_legacy(tree):
    rx = re.compile(r"\bansible\.legacy\.(%s)\b" % "|".join(f[:-3] for f in _py("library")))
    for dirpath, _dirs, files in os.walk(tree):
        for f in files:
            with open(os.path.join(dirpath, f), "rb") as fh:
                assert not rx.search(fh.read().decode("utf-8", "replace")), os.path.join(dirpath, f)
