"""docs/architecture.md says what the code is: every product Python file has its line there, each module_utils file
sits in exactly one room, and the arrows between the rooms are the imports, no more and no fewer, with no cycle."""
from __future__ import annotations

import ast
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO, "docs", "architecture.md")


def _doc():
    with open(DOC, encoding="utf-8") as fh:
        return fh.read()


def _rooms(text):
    """{module name: room} from the '### room: ...' sections of module_utils."""
    rooms, room = {}, None
    for line in text.splitlines():
        head = re.match(r"^### (\w+):", line)
        if head:
            room = head.group(1)
        elif line.startswith("## "):
            room = None
        row = re.match(r"^\| `module_utils/(\w+)\.py` \|", line)
        if row and room:
            assert row.group(1) not in rooms, "%s is in two rooms" % row.group(1)
            rooms[row.group(1)] = room
    return rooms


def _arrows(text):
    block = text.split("## The arrows", 1)[1].split("```")[1]
    return {tuple(m) for m in re.findall(r"^(\w+) -> (\w+)$", block, re.M)}


def _imports(path):
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:  # the program files' relative imports (sglang_program)
            out |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "ansible.module_utils":
                out |= {a.name for a in node.names}
            elif node.module.startswith("ansible.module_utils."):
                out.add(node.module.split(".")[2])
            else:
                out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
    return out


def _edges(rooms):
    edges = set()
    for name, room in rooms.items():
        for imported in _imports(os.path.join(REPO, "module_utils", name + ".py")):
            if imported in rooms and rooms[imported] != room:
                edges.add((room, rooms[imported]))
    return edges


def _product_files():
    files = []
    for top in ("library", "module_utils", "action_plugins", "plugin_utils"):
        files += ["%s/%s" % (top, f) for f in os.listdir(os.path.join(REPO, top)) if f.endswith(".py")]
    roles = os.path.join(REPO, "roles")
    for role in os.listdir(roles):
        d = os.path.join(roles, role, "files")
        if os.path.isdir(d):
            files += ["roles/%s/files/%s" % (role, f) for f in os.listdir(d) if f.endswith(".py")]
    return sorted(files)


def test_every_product_file_has_its_line_and_every_line_a_file():
    text = _doc()
    listed = set(re.findall(r"^\| `([\w/]+\.py)` \| \S", text, re.M))
    files = set(_product_files())
    assert len(files) > 40
    assert not files - listed, "not in docs/architecture.md: %s" % sorted(files - listed)
    assert not listed - files, "in docs/architecture.md but gone: %s" % sorted(listed - files)


def test_every_module_utils_file_is_in_one_room():
    rooms = _rooms(_doc())
    names = {f[:-3] for f in os.listdir(os.path.join(REPO, "module_utils")) if f.endswith(".py")}
    assert set(rooms) == names, sorted(set(rooms) ^ names)


def test_the_arrows_are_the_imports_and_point_one_way():
    text = _doc()
    rooms = _rooms(text)
    edges = _edges(rooms)
    assert edges == _arrows(text), ("in the code, not the page: %s; on the page, not in the code: %s"
                                    % (sorted(edges - _arrows(text)), sorted(_arrows(text) - edges)))
    assert not _cycle(set(rooms.values()), edges), "a cycle among the rooms %s" % sorted(_cycle(set(rooms.values()),
                                                                                              edges))


def _cycle(rooms, edges):
    """The rooms left on a cycle (none: a topological order exists)."""
    left = set(rooms)
    while left:
        free = {r for r in left if not any(a == r and b in left for a, b in edges)}
        if not free:
            return left
        left -= free
    return set()


def test_the_checks_can_fail():
    """A back edge is a cycle; the page's arrows and rooms are read as written."""
    assert _cycle({"x", "y", "z"}, {("x", "y"), ("y", "z")}) == set()
    assert _cycle({"x", "y", "z"}, {("x", "y"), ("y", "z"), ("z", "y")}) == {"x", "y", "z"}  # x waits on the cycle
    assert _arrows("## The arrows\n\n```\nx -> y\ny -> x\n```\n") == {("x", "y"), ("y", "x")}
    assert _rooms("### run: r\n| `module_utils/foo.py` | f |\n") == {"foo": "run"}
