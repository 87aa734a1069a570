# -*- coding: utf-8 -*-
# Copyright: eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The early-init patch of ``early_init_patch``, computed and checked (standard library only).

:class:`EarlyInitPatcher` turns a file's bytes into the bytes with the managed block (or without it) and refuses, with
:class:`PatchError`, whatever it cannot do safely. :func:`plan` reads a file and says what the patch would do, changing
nothing: the module applies its plan; ``sglang_info``'s ``patch`` look reports it, so that a re-run whose file is
already as wanted needs no call of its own.
"""

from __future__ import annotations

import ast
import hashlib
import io
import keyword
import os
import tokenize

from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.init_order import analyse_risk, find_class, find_method, has_docstring, self_name

# The options that say what the patch is (the module adds path and backup; sglang_info's patch look finds the path).
PATCH_OPTIONS = dict(
    class_name=dict(type="str", default="EAGLEWorkerV2"),
    method=dict(type="str", default="__init__"),
    attributes=dict(type="dict", default={"spec_disable_batch_threshold": "0"}),
    state=dict(type="str", default="present", choices=["present", "absent"]),
)

MARKER_BEGIN = "# BEGIN eagle-deploy early-init patch for {0}.{1} (managed by Ansible)"
MARKER_NOTE = "# Safe defaults, set before anything in this method can raise."
MARKER_END = "# END eagle-deploy early-init patch for {0}.{1} (managed by Ansible)"


class PatchError(Exception):
    """A refusal: the message names the option (or the file) at fault."""

    sha256 = None  # the file's own SHA-256, where it could be read


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def render_literal(name, value):
    """Return the source text of a default value, or raise PatchError."""
    if isinstance(value, str):
        text = value.strip()
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
            raise PatchError(
                "attributes.%s: %r is not a Python literal (%s); give a literal such as \"0\", \"None\", "
                "\"[]\" or \"'text'\" (a Python string needs its own quotes)" % (name, value, to_native(exc).splitlines()[0])
            )
        if "\n" in text or "\r" in text:
            text = repr(parsed)
        return text
    text = repr(value)
    try:
        if ast.literal_eval(text) != value:
            raise ValueError("value does not survive repr()")
    except (ValueError, SyntaxError, TypeError) as exc:
        raise PatchError("attributes.%s: %r cannot be written as a Python literal (%s)" % (name, value, to_native(exc)))
    return text


def check_names(attributes):
    for name in attributes:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise PatchError("attributes: %r is not a valid attribute name (a Python identifier that is not a keyword)" % (name,))


def header_end_line(data, func):
    """Line number (1-based) of the end of the def header: the NEWLINE token after `def NAME(...):`."""
    start = (func.lineno, func.col_offset)
    for tok in tokenize.tokenize(io.BytesIO(data).readline):
        if tok.start < start:
            continue
        if tok.type == tokenize.NEWLINE:
            return tok.start[0]
    return None


class EarlyInitPatcher:
    """Compute, check and apply the managed block for one class method of one file."""

    def __init__(self, path, class_name, method, attributes, state):
        self.path = path
        self.class_name = class_name
        self.method = method
        self.attributes = attributes or {}
        self.state = state
        self.begin = MARKER_BEGIN.format(class_name, method).encode("ascii")
        self.end = MARKER_END.format(class_name, method).encode("ascii")

    def strip_block(self, data):
        """Return (data without the managed block, True if a block was found)."""
        lines = data.splitlines(True)
        begins = [i for i, line in enumerate(lines) if line.strip() == self.begin]
        ends = [i for i, line in enumerate(lines) if line.strip() == self.end]
        if not begins and not ends:
            return data, False
        if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
            raise PatchError(
                "path: %s has a damaged managed block for %s.%s (%d BEGIN and %d END markers); "
                "restore it from a backup or reinstall the package" % (self.path, self.class_name, self.method, len(begins), len(ends))
            )
        return b"".join(lines[:begins[0]] + lines[ends[0] + 1:]), True

    def parse(self, data):
        try:
            return ast.parse(data, filename=self.path)
        except (SyntaxError, ValueError) as exc:
            raise PatchError("path: %s does not parse as Python: %s" % (self.path, to_native(exc)))

    def locate(self, tree):
        cls = find_class(tree, self.class_name)
        if cls is None:
            raise PatchError("class_name: class %s not found in %s" % (self.class_name, self.path))
        func = find_method(cls, self.method)
        if func is None:
            raise PatchError("method: %s.%s not found in %s" % (self.class_name, self.method, self.path))
        return cls, func

    def build_block(self, data, lines, func, newline):
        me = self_name(func)
        if me is None:
            raise PatchError("method: %s.%s takes no positional parameter for the instance" % (self.class_name, self.method))
        head_end = header_end_line(data, func)
        first = func.body[0]
        if head_end is None or first.lineno <= head_end:
            raise PatchError("method: the body of %s.%s starts on its def line; put it on lines of its own first" % (self.class_name, self.method))
        prefix = lines[first.lineno - 1][:first.col_offset]
        if prefix.strip(b" \t"):
            raise PatchError("method: cannot tell the indentation of %s.%s" % (self.class_name, self.method))
        at = head_end
        if has_docstring(func):
            at = first.end_lineno
            if len(func.body) > 1 and func.body[1].lineno <= first.end_lineno:
                raise PatchError("method: a statement shares the docstring's last line in %s.%s" % (self.class_name, self.method))
        encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
        if encoding == "utf-8-sig":
            encoding = "utf-8"
        text = [MARKER_BEGIN.format(self.class_name, self.method), MARKER_NOTE]
        for name, value in self.attributes.items():
            text.append("%s.%s = %s" % (me, name, render_literal(name, value)))
        text.append(MARKER_END.format(self.class_name, self.method))
        try:
            block = [prefix + line.encode(encoding) + newline for line in text]
        except UnicodeEncodeError as exc:
            raise PatchError("attributes: a value cannot be written in the file's encoding %s (%s)" % (encoding, to_native(exc)))
        return at, block

    def compute(self, current):
        """Return a dict with the new content and the facts about it; raise PatchError on any refusal."""
        if self.state == "present":
            if not self.attributes:
                raise PatchError("attributes: give at least one attribute with state=present (state=absent removes the patch)")
            check_names(self.attributes)
        original, _had_block = self.strip_block(current)
        tree = self.parse(original)
        cls, func = self.locate(tree)
        at_risk, raising_line = analyse_risk(cls, func)
        inserted = []
        if self.state == "present":
            lines = original.splitlines(True)
            head = lines[func.lineno - 1]
            newline = b"\r\n" if head.endswith(b"\r\n") else b"\n"
            at, block = self.build_block(original, lines, func, newline)
            new = b"".join(lines[:at] + block + lines[at:])
            inserted = list(self.attributes)
            if raising_line is not None and raising_line > at:
                raising_line += len(block)
            self.verify(new, len(inserted))
        else:
            new = original
        return dict(new=new, original=original, inserted=inserted, at_risk=at_risk, first_raising_line=raising_line)

    def verify(self, new, count):
        """The patched source compiles and the method starts with exactly the inserted assignments."""
        try:
            compile(new, self.path, "exec", dont_inherit=True)
            tree = ast.parse(new, filename=self.path)
        except (SyntaxError, ValueError) as exc:
            raise PatchError("attributes: the patched %s does not compile (%s); the file was left unchanged" % (self.path, to_native(exc)))
        cls, func = self.locate(tree)
        body = func.body[1:] if has_docstring(func) else func.body
        got = []
        for stmt in body[:count]:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute):
                got.append(stmt.targets[0].attr)
        if got != list(self.attributes):
            raise PatchError("method: inserting into %s.%s did not give the expected first statements; the file was left unchanged"
                             % (self.class_name, self.method))


def read_target(path):
    """(real path, bytes) of the file to patch; PatchError when it is no regular file or cannot be read."""
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        raise PatchError("path: %s does not exist or is not a regular file" % real)
    try:
        with open(real, "rb") as handle:
            return real, handle.read()
    except (IOError, OSError) as exc:
        raise PatchError("path: cannot read %s: %s" % (real, to_native(exc)))


def plan(path, class_name, method, attributes, state):
    """What the patch would do to the file at path, changing nothing: the module's result keys (changed, inserted,
    sha256, original_sha256, at_risk, first_raising_line, path) and, under "new" and "current", the file's bytes
    after and now. Raises PatchError on any refusal (the file's own sha256 in its ``sha256``)."""
    real, current = read_target(path)
    try:
        out = EarlyInitPatcher(real, class_name, method, attributes, state).compute(current)
    except PatchError as exc:
        exc.sha256 = sha256_hex(current)
        raise
    return dict(path=real, changed=out["new"] != current, inserted=out["inserted"], sha256=sha256_hex(out["new"]),
                original_sha256=sha256_hex(out["original"]), at_risk=out["at_risk"],
                first_raising_line=out["first_raising_line"], new=out["new"], current=current)
