# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The environment variables an installed SGLang reads, found in its sources by ``ast`` (never imported; standard
library only). Used by ``sglang_args_check`` to check the server's environment like its flags.

A variable is read by an SGLang when:

- ``sglang/srt/environ.py`` declares it: a class attribute set to a call (``SGLANG_X = EnvBool(False)``, the ``Envs``
  fields that ``envs.SGLANG_X.get()`` reads), or a string naming it in a call, a dict key or a list there (the
  deprecated names SGLang still reads to warn or forward);
- a file of the package reads it by name: ``os.environ["X"]`` (a load, not a store or a ``del``),
  ``os.environ.get("X")`` (``pop``, ``setdefault``), ``"X" in os.environ``, ``os.getenv("X")``, or any call whose
  function name holds ``env`` (``get_bool_env_var("X")``, ``get_int_env_var("X")``, ...) but the setters
  (``setenv``, ``putenv``, ``delenv``, ``unsetenv``: ``monkeypatch.setenv("X", ...)`` reads nothing);
- test files of the package (a ``test`` or ``tests`` directory, ``test_*.py``, ``*_test.py``) are not read: what a
  test sets or reads is not what the server reads;
- it is ``SGL_X`` and ``SGLANG_X`` is read, where ``environ.py`` rewrites the legacy ``SGL_`` prefix to ``SGLANG_``.

Only the requested names are looked for: a file is parsed only when its bytes hold one of them (SGLang 0.5.23 has
some 4700 Python files; reading them takes a fraction of a second, parsing them all would take seconds).
"""

from __future__ import annotations

import ast
import difflib
import glob
import os
import re
import zipfile

ENVIRON = "srt/environ.py"
NAME_RE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$")
# Variables of these prefixes belong to SGLang: one it does not read is an error. Others are passed on (NCCL, CUDA,
# torch, ...): one SGLang itself does not read is only a warning.
OWN_PREFIXES = ("SGLANG_", "SGL_")
# The legacy prefix rewrite of environ.py (0.5.x: _convert_SGL_to_SGLANG / _handle_deprecated_envs).
_SGL_REWRITE = re.compile(rb"""replace\(\s*["']SGL_["']\s*,\s*["']SGLANG_["']""")
_READ_ATTRS = ("get", "pop", "setdefault", "__contains__", "__getitem__")
# Calls whose name holds "env" but that set or remove a variable: not reads.
_SETTERS = ("setenv", "putenv", "delenv", "unsetenv")
_TEST_DIRS = ("test", "tests")


def is_own(name):
    return name.startswith(OWN_PREFIXES)


def _is_environ(node):
    return (isinstance(node, ast.Attribute) and node.attr in ("environ", "environb")) or (
        isinstance(node, ast.Name) and node.id in ("environ", "environb"))


def _string(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def call_name(node):
    """The name a call calls: ``f`` of ``f(...)`` and of ``a.b.f(...)``; None for another callee."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _is_env_reader(fname):
    lower = fname.lower()
    return "env" in lower and lower.lstrip("_") not in _SETTERS


def is_test_file(rel):
    """Whether a package file (a path with ``/``) is one of its tests: under a ``test``/``tests`` directory, or
    named ``test_*.py`` / ``*_test.py``."""
    parts = rel.replace(os.sep, "/").split("/")
    base = parts[-1]
    return any(p in _TEST_DIRS for p in parts[:-1]) or base.startswith("test_") or base.endswith("_test.py")


def reads_in_source(source):
    """Names one source file reads from the environment by a constant name (see the module's docstring)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            fname = call_name(node) or ""
            if (fname in _READ_ATTRS and isinstance(func, ast.Attribute) and _is_environ(func.value)) or (
                    _is_env_reader(fname)):
                name = _string(node.args[0])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            name = _string(node.slice)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and _is_environ(node.comparators[0]):
            name = _string(node.left)
        if name and NAME_RE.match(name):
            found.add(name)
    return found


def declared_in_environ(source):
    """Names ``environ.py`` declares: class attributes set to a call (the Envs fields), and the strings naming a
    variable in its calls, dict keys, lists and tuples."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else (
                    [stmt.target] if isinstance(stmt, ast.AnnAssign) else [])
                if isinstance(getattr(stmt, "value", None), ast.Call):
                    found.update(t.id for t in targets if isinstance(t, ast.Name) and NAME_RE.match(t.id))
        elif isinstance(node, ast.Call):
            found.update(s for s in map(_string, node.args) if s and NAME_RE.match(s))
        elif isinstance(node, ast.Dict):
            found.update(s for s in map(_string, [k for k in node.keys if k is not None]) if s and NAME_RE.match(s))
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            found.update(s for s in map(_string, node.elts) if s and NAME_RE.match(s))
    return found | reads_in_source(source)


def package_sources(sglang_root):
    """(path relative to the package's parent, path) of every ``.py`` file of an installed ``sglang`` package dir."""
    base = os.path.dirname(os.path.realpath(sglang_root))
    for d, dirs, files in os.walk(sglang_root):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(d, f)
                yield os.path.relpath(os.path.realpath(path), base), path


def _read_file(path):
    with open(path, "rb") as f:
        return f.read()


class Reads:
    """Which of ``names`` one SGLang reads, and where (``where``: name -> file, relative to the package's parent, or
    None), with the names ``environ.py`` declares (``declared``, for suggestions) and the files that decided
    (``files``: environ.py and each file that reads a name; absolute paths for an installed package)."""

    def __init__(self, names, members, read):
        self.names = sorted(set(names))
        self.where = dict((n, None) for n in self.names)
        self.declared = set()
        self.files = []
        self.sgl_rewrite = False
        self._scan(members, read)

    def _scan(self, members, read):
        wanted = [(n, n.encode("ascii", "replace")) for n in self.names]
        others = []
        for rel, handle in members:
            if is_test_file(rel):
                continue
            if rel == "sglang/" + ENVIRON:
                data = read(handle)
                self.files.append(handle)
                self.sgl_rewrite = bool(_SGL_REWRITE.search(data))
                try:
                    self.declared = declared_in_environ(data)
                except (SyntaxError, ValueError):
                    self.declared = set()
                for n in self.names:
                    if n in self.declared:
                        self.where[n] = rel
            else:
                others.append((rel, handle))
        for rel, handle in others:
            missing = [(n, b) for n, b in wanted if self.where[n] is None]
            if not missing:
                break
            data = read(handle)
            hits = [n for n, b in missing if b in data]
            if not hits:
                continue
            try:
                reads = reads_in_source(data)
            except (SyntaxError, ValueError):
                continue
            found = [n for n in hits if n in reads]
            for n in found:
                self.where[n] = rel
            if found:
                self.files.append(handle)

    def reads(self, name):
        """Whether this SGLang reads ``name`` (an ``SGL_`` name also through its ``SGLANG_`` twin)."""
        if self.where.get(name):
            return True
        if name.startswith("SGL_") and self.sgl_rewrite:
            return bool(self.where.get("SGLANG_" + name[4:]))
        return False

    def suggestions(self, name):
        return difflib.get_close_matches(name, sorted(self.declared), n=3, cutoff=0.8)


def _with_twins(names):
    out = set(names)
    out.update("SGLANG_" + n[4:] for n in names if n.startswith("SGL_"))
    return out


def installed_reads(sglang_root, names):
    """:class:`Reads` of an installed ``sglang`` package dir."""
    return Reads(_with_twins(names), package_sources(sglang_root), _read_file)


def wheel_version(path):
    """``0.5.9`` of ``sglang-0.5.9-py3-none-any.whl``."""
    parts = os.path.basename(path).split("-")
    return parts[1] if len(parts) >= 5 else None


def wheel_reads(path, names):
    """:class:`Reads` of an SGLang wheel (read with ``zipfile``, never installed)."""
    with zipfile.ZipFile(path) as wheel:
        members = sorted((m, m) for m in wheel.namelist() if m.startswith("sglang/") and m.endswith(".py"))
        return Reads(_with_twins(names), members, wheel.read)


def compare_sources(paths, package_version):
    """(version, kind, path) for each SGLang to compare with: an ``sglang`` package dir (its version from the
    dist-info beside it, through ``package_version``), a wheel, or a directory of ``sglang-*.whl`` wheels."""
    out = []
    for path in paths:
        if os.path.isdir(os.path.join(path, "srt")):
            out.append((package_version(path), "dir", path))
        elif os.path.isdir(path):
            for wheel in sorted(glob.glob(os.path.join(glob.escape(path), "sglang-*.whl"))):
                out.append((wheel_version(wheel), "wheel", wheel))
        elif path.endswith(".whl") and os.path.isfile(path):
            out.append((wheel_version(path), "wheel", path))
    return [s for s in out if s[0]]


# PEP 440's order of the tags after the release: X.devN < X.aN < X.bN < X.rcN < X < X.postN.
_TAG_RANK = {"dev": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2, "c": 3, "rc": 3, "pre": 3, "preview": 3,
             "post": 5, "rev": 5, "r": 5}
_FINAL = (4, 0, "")


def version_key(version):
    """A sort key of a version string, in PEP 440's order (0.5.9 < 0.5.24rc1 < 0.5.24 < 0.5.24+cu130 <
    0.5.24.post1); any string is keyed, none raises (an unknown tag sorts as a final release, by its words)."""
    public, _sep, local = str(version).lower().partition("+")
    m = re.match(r"v?(\d+(?:\.\d+)*)", public)
    release = tuple(int(p) for p in m.group(1).split(".")) if m else ()
    rest = public[m.end():] if m else public
    tags = [(_TAG_RANK.get(word, 4), int(num) if num else 0, word)
            for word, num in re.findall(r"([a-z]+)[._-]?(\d*)", rest)]
    local_parts = tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"[._-]", local) if p)
    return (release, tuple(tags) + (_FINAL,), local_parts)


def history(names, sources):
    """name -> versions (sorted) of the SGLangs of ``sources`` (compare_sources) that read it."""
    read_by = dict((n, []) for n in names)
    for version, kind, path in sources:
        try:
            reads = installed_reads(path, names) if kind == "dir" else wheel_reads(path, names)
        except (OSError, zipfile.BadZipFile):
            continue
        for n in names:
            if reads.reads(n) and version not in read_by[n]:
                read_by[n].append(version)
    return dict((n, sorted(v, key=version_key)) for n, v in read_by.items())
