# -*- coding: utf-8 -*-
# Copyright: eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which attributes a method assigns before the first statement that can raise (standard library only).

Read on the syntax tree of a class method, e.g. SGLang's ``EAGLEWorkerV2.__init__``: the method's own statements
are taken in order, and the first one that contains a call (outside nested functions, lambdas and classes, whose
code runs later) is where the method can first fail. Attributes of the instance (``self.x = ...``) stored by the
statements before it are set even when the method fails there; those stored from it on may never be.

Used by ``library/early_init_patch.py``: the attributes ``at_risk`` are those that other methods read but that
``__init__`` may never store, SGLang's ``spec_disable_batch_threshold`` among them, which the patch assigns early.
``method_init_order`` gives the same facts for a whole source text, for any caller that reads an installed file.
"""

from __future__ import annotations

import ast


def find_class(tree, class_name):
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return node
    return None


def find_method(cls, method):
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == method:
            return node
    return None


def self_name(func):
    positional = list(getattr(func.args, "posonlyargs", [])) + list(func.args.args)
    return positional[0].arg if positional else None


def has_docstring(func):
    first = func.body[0]
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def _walk_own(node):
    """ast.walk over the code that runs when the statement runs: a nested function, lambda or class is not entered
    (its body runs later), though a def's decorators and defaults and a class's bases and keywords run now."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        todo = node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
    elif isinstance(node, ast.ClassDef):
        todo = node.decorator_list + node.bases + [k.value for k in node.keywords]
    else:
        todo = [node]
    while todo:
        cur = todo.pop()
        yield cur
        todo.extend(child for child in ast.iter_child_nodes(cur) if not isinstance(child, nested))


def self_attrs(node, name, ctx):
    """Names of ``<name>.<attr>`` in node (its own code only) with the given context (ast.Store or ast.Load)."""
    return set(
        n.attr for n in _walk_own(node)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ctx) and isinstance(n.value, ast.Name) and n.value.id == name
    )


def split_at_first_call(func):
    """Return (early, late, first): the instance attributes stored before the first statement that can raise,
    those stored from it on, and that statement (None when no statement contains a call)."""
    me = self_name(func)
    body = func.body[1:] if has_docstring(func) else list(func.body)
    index = next((i for i, stmt in enumerate(body) if any(isinstance(n, ast.Call) for n in _walk_own(stmt))), None)
    if index is None or me is None:
        early = set()
        if me is not None:
            for stmt in body:
                early |= self_attrs(stmt, me, ast.Store)
        return early, set(), None
    early, late = set(), set()
    for stmt in body[:index]:
        early |= self_attrs(stmt, me, ast.Store)
    for stmt in body[index:]:
        late |= self_attrs(stmt, me, ast.Store)
    return early, late, body[index]


def analyse_risk(cls, func):
    """Return (at_risk, first_raising_line): attributes assigned only from the first raising statement on that
    other methods of the class read, sorted, and that statement's line (None when nothing can raise)."""
    early, late, first = split_at_first_call(func)
    if first is None:
        return [], None
    read = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not func:
            other = self_name(node)
            if other:
                for stmt in node.body:
                    read |= self_attrs(stmt, other, ast.Load)
    return sorted((late - early) & read), first.lineno


def method_init_order(source, class_name, method="__init__", filename="<source>"):
    """The facts above for one method of a source text (str or bytes); raises SyntaxError/ValueError.

    Returns a dict: class_found, method_found, assigned_early (sorted names), first_raising_line,
    first_raising_source (the statement's first line), at_risk."""
    result = {"class_found": False, "method_found": False, "assigned_early": [], "first_raising_line": None,
              "first_raising_source": None, "at_risk": []}
    tree = ast.parse(source, filename=filename)
    cls = find_class(tree, class_name)
    if cls is None:
        return result
    result["class_found"] = True
    func = find_method(cls, method)
    if func is None:
        return result
    result["method_found"] = True
    early, _late, first = split_at_first_call(func)
    result["assigned_early"] = sorted(early)
    result["at_risk"] = analyse_risk(cls, func)[0]
    if first is not None:
        text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
        result["first_raising_line"] = first.lineno
        result["first_raising_source"] = text.splitlines()[first.lineno - 1].strip()
    return result
