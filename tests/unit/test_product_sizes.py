"""Rooms of a size a person can hold (issue 34): no product class over 250 lines and no function over 60, in
library/, module_utils/, action_plugins/, plugin_utils/ and the roles' files/. The rooms not yet split are named in TOO_BIG, a list
that may only shrink: a new offender fails, and so does a listed one that has come within the bounds (take it off)."""
from __future__ import annotations

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLASS_LINES, FUNCTION_LINES = 250, 60

# Still over the bounds; each is to be split by job, then taken off this list.
TOO_BIG = set()


def _product_files():
    for top in ("library", "module_utils", "action_plugins", "plugin_utils"):
        for name in sorted(os.listdir(os.path.join(REPO, top))):
            if name.endswith(".py"):
                yield "%s/%s" % (top, name)
    for role in sorted(os.listdir(os.path.join(REPO, "roles"))):
        files = os.path.join(REPO, "roles", role, "files")
        if os.path.isdir(files):
            for name in sorted(os.listdir(files)):
                if name.endswith(".py"):
                    yield "roles/%s/files/%s" % (role, name)


def oversized(source, path):
    """{'path:Name': lines} of the classes over CLASS_LINES and the functions over FUNCTION_LINES of ``source``."""
    found = {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                limit = CLASS_LINES if isinstance(child, ast.ClassDef) else FUNCTION_LINES
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    found["%s:%s" % (path, name)] = lines
                visit(child, name + ".")
            else:
                visit(child, prefix)
    visit(ast.parse(source), "")
    return found


def test_the_measure_counts_a_class_and_a_function_by_their_lines():
    body = "\n".join("    x%d = 1" % i for i in range(FUNCTION_LINES))
    assert oversized("def f():\n%s\n" % body, "m.py") == {"m.py:f": FUNCTION_LINES + 1}
    assert oversized("def f():\n%s\n" % body.rsplit("\n", 1)[0], "m.py") == {}
    methods = "\n".join("    def m%d(self):\n        return %d\n" % (i, i) for i in range(CLASS_LINES // 3 + 1))
    assert list(oversized("class C(object):\n%s" % methods, "m.py")) == ["m.py:C"]
    assert oversized("class C(object):\n    def f(self):\n%s\n" % body.replace("    ", "        "), "m.py") == {
        "m.py:C.f": FUNCTION_LINES + 1}


def test_no_product_class_or_function_is_over_its_bound_but_the_listed_ones():
    found = {}
    for path in _product_files():
        with open(os.path.join(REPO, path), encoding="utf-8") as fh:
            found.update(oversized(fh.read(), path))
    new = sorted(set(found) - set(TOO_BIG))
    assert not new, "over %d lines a class, %d a function: split by job: %s" % (
        CLASS_LINES, FUNCTION_LINES, ["%s (%d)" % (k, found[k]) for k in new])
    done = sorted(set(TOO_BIG) - set(found))
    assert not done, "within the bounds now: take off TOO_BIG: %s" % done
