"""Every module's DOCUMENTATION, EXAMPLES and RETURN are valid YAML of the shape ansible-doc renders, read from the
source without importing the module (as ansible-doc reads them): a colon in a description line breaks ansible-doc
and ansible-test's validate-modules, and this finds it in the unit run."""
from __future__ import annotations

import ast
import pathlib

import pytest
import yaml

LIBRARY = pathlib.Path(__file__).resolve().parents[2] / "library"
MODULES = sorted(p for p in LIBRARY.glob("*.py") if not p.name.startswith("_"))


def doc_blocks(path):
    blocks = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("DOCUMENTATION", "EXAMPLES", "RETURN") and isinstance(node.value, ast.Constant):
                blocks[name] = node.value.value
    return blocks


def test_the_library_has_modules():
    assert len(MODULES) >= 9, MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_doc_blocks_are_yaml_of_the_rendered_shape(path):
    blocks = doc_blocks(path)
    assert set(blocks) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, "%s: has %s" % (path.name, sorted(blocks))
    doc = yaml.safe_load(blocks["DOCUMENTATION"])
    assert doc["module"] == path.stem
    assert isinstance(doc["short_description"], str) and doc["short_description"]
    for name, option in (doc.get("options") or {}).items():
        description = option.get("description")
        assert description, "%s: option %s has no description" % (path.name, name)
        lines = description if isinstance(description, list) else [description]
        assert all(isinstance(line, str) for line in lines), "%s: option %s: %r" % (path.name, name, lines)
    examples = yaml.safe_load(blocks["EXAMPLES"])
    assert isinstance(examples, list) and examples
    returned = yaml.safe_load(blocks["RETURN"])
    assert returned is None or isinstance(returned, dict)
    for name, value in (returned or {}).items():
        assert isinstance(value, dict) and value.get("description"), "%s: return value %s" % (path.name, name)
