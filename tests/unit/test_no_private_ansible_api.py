"""No private ansible-core API anywhere in the product (house rule; issue 34): no import of, attribute path into, or
string naming ``ansible._internal`` or ``ansible.module_utils._internal``, in any Python or YAML file the project
ships (library/, module_utils/, action_plugins/, plugin_utils/, roles/, playbooks/, bin/, collection/). Read as text and as Python's
AST, so that neither ``from ansible import _internal`` nor ``importlib.import_module("ansible._internal...")``
slips by."""
from __future__ import annotations

import ast
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRODUCT = ("library", "module_utils", "action_plugins", "plugin_utils", "roles", "playbooks", "bin", "collection")
PRIVATE = re.compile(r"ansible(?:\.module_utils)?\._internal\b")


def _files():
    for top in PRODUCT:
        for root, _dirs, names in os.walk(os.path.join(REPO, top)):
            for name in names:
                if name.endswith((".py", ".yml", ".yaml", ".j2")):
                    yield os.path.join(root, name)


def _private_in_ast(text):
    """The private names a Python file imports or reaches (``from ansible import _internal``, ``ansible._internal``)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module + "." + a.name for a in node.names]
            found += [n for n in names + [node.module] if PRIVATE.search(n)]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if PRIVATE.search(a.name)]
        elif isinstance(node, ast.Attribute) and node.attr == "_internal":
            base = node.value
            parts = []
            while isinstance(base, ast.Attribute):
                parts.insert(0, base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id == "ansible":
                found.append(".".join(["ansible"] + parts + ["_internal"]))
    return found


def test_the_checks_find_what_they_look_for():
    assert _private_in_ast("from ansible import _internal") == ["ansible._internal"]
    assert _private_in_ast("from ansible._internal._ansiballz import x") != []
    assert _private_in_ast("import ansible.module_utils._internal.foo") != []
    assert _private_in_ast("import ansible\nansible.module_utils._internal") != []
    assert PRIVATE.search('importlib.import_module("ansible._internal._templating")')
    assert not _private_in_ast("from ansible.module_utils.basic import AnsibleModule")


def test_the_product_uses_no_private_ansible_core_api():
    files = list(_files())
    assert len(files) > 50, files  # the walk found the product
    bad = []
    for path in files:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        rel = os.path.relpath(path, REPO)
        bad += ["%s: %s" % (rel, m.group(0)) for m in PRIVATE.finditer(text)]
        if path.endswith(".py"):
            bad += ["%s: %s" % (rel, name) for name in _private_in_ast(text)]
    assert not bad, bad
