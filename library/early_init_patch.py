#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: early_init_patch
short_description: Give a Python class safe attribute defaults at the very start of a method
description:
  - Inserts C(self.<name> = <literal>) assignments as the very first statements of a method
    (by default C(EAGLEWorkerV2.__init__) in SGLang's C(sglang/srt/speculative/eagle_worker_v2.py)),
    after the docstring if there is one and before anything that can raise, such as the call to the parent class's C(__init__).
  - The reason is that when C(EAGLEWorkerV2.__init__) fails partway, SGLang swallows the exception and the first decode
    request dies with C(AttributeError) on an attribute that was never set. With the defaults set first,
    a half-built object still has them.
  - Works on the syntax tree (C(ast) and C(tokenize)), not on line numbers or a fixed diff, so it fits every
    SGLang release that has the file (0.5.4 and later), whose C(__init__) differ.
  - The inserted lines are framed by a comment line C(# BEGIN eagle-deploy early-init patch for CLASS.METHOD)
    ending in C(managed by Ansible) in brackets, and a matching C(# END ...) line. The block is found by these markers, replaced when O(attributes) change,
    and removed with O(state=absent), which gives back the original bytes exactly.
  - The file's own indentation (spaces or tabs, taken from the method body) and line endings (LF or CRLF)
    are kept. Assignments of the same attributes later in the method are left alone; they still set the real values.
  - Before writing, the patched source must compile. The file is replaced atomically (mode and owner kept)
    and the matching C(__pycache__/<stem>.*.pyc) files are removed so stale bytecode cannot shadow it.
  - Nothing is written when any check fails; the file stays byte-for-byte as it was.
  - Run it with the Python that will import the file (for SGLang, the virtualenv's python, through
    C(ansible_python_interpreter)), so that the parser and the compile check match that Python's syntax.
version_added: "1.0.0"
author:
  - eagle-deploy contributors (!UNKNOWN)
options:
  path:
    description:
      - The Python source file to patch.
      - Symbolic links are followed; the file they point to is patched.
    type: path
    required: true
  class_name:
    description:
      - Name of the class whose method is patched. The first class with this name (at any nesting level,
        in source order) is used.
    type: str
    default: EAGLEWorkerV2
  method:
    description:
      - Name of the method, defined directly in the class body, that gets the defaults.
      - The method must take the instance as its first positional parameter (usually C(self)); that name is used.
    type: str
    default: __init__
  attributes:
    description:
      - Attributes to set, as a mapping of attribute name to default value.
      - A value given as a string must be a Python literal that C(ast.literal_eval) accepts, written as it
        will appear in the source, for example C("0"), C("None"), C("[]"), C("'text'") (a Python string needs
        its own quotes inside the YAML string).
      - A value given as a plain YAML number, boolean, null, list or mapping is written as Python's C(repr) gives it.
      - Names must be Python identifiers and not keywords.
      - The assignments are written in the order given here.
      - Ignored when O(state=absent).
    type: dict
    default:
      spec_disable_batch_threshold: "0"
  state:
    description:
      - V(present) inserts the block, or replaces it when its content differs.
      - V(absent) removes the block, restoring the file's original bytes.
    type: str
    choices: [present, absent]
    default: present
  backup:
    description:
      - Keep a copy of the file, named with a timestamp, next to it before changing it.
    type: bool
    default: false
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports what would change and the would-be O(path) checksum; writes and removes nothing.
  diff_mode:
    support: full
  platform:
    platforms: posix
notes:
  - Only the module's Python standard library is needed on the target.
  - O(path) is read and written as bytes; the encoding declared by the file (default UTF-8) is used for the
    inserted lines.
  - Two managed blocks for the same O(class_name) and O(method), or a C(BEGIN) marker without its C(END)
    marker, are refused; restore the file from a backup or reinstall the package.
seealso:
  - module: ansible.builtin.blockinfile
"""

EXAMPLES = r"""
- name: Give EAGLEWorkerV2 safe defaults before anything in __init__ can raise
  ansible.legacy.early_init_patch:
    path: /opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py
    backup: true
  vars:
    ansible_python_interpreter: /opt/sglang/venv/bin/python
  register: patch_result

- name: Set several attributes, with Python literals as values
  ansible.legacy.early_init_patch:
    path: /opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py
    attributes:
      spec_disable_batch_threshold: "0"
      adaptive_controller: "None"
      extra_names: "[]"
      label: "'eagle'"

- name: Patch another class of the same file
  ansible.legacy.early_init_patch:
    path: /opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py
    class_name: EagleDraftWorker
    attributes:
      draft_ready: false

- name: Remove the patch, restoring the original file
  ansible.legacy.early_init_patch:
    path: /opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py
    state: absent
"""

RETURN = r"""
path:
  description: The file that was examined (after following symbolic links).
  returned: always
  type: str
  sample: /opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py
inserted:
  description: Names the managed block sets, in order. Empty when O(state=absent).
  returned: success
  type: list
  elements: str
  sample: [spec_disable_batch_threshold]
sha256:
  description: SHA-256 of the file after the task (in check mode, of the content it would have).
  returned: success
  type: str
  sample: 3f9d1c0a8b7e4d2f6a5c9e1b0d8f7a6c5b4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c
original_sha256:
  description: SHA-256 of the file without the managed block, that is of the file as the package installed it.
  returned: success
  type: str
  sample: 9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b
backup_file:
  description: Name of the backup copy; empty when none was made.
  returned: success
  type: str
  sample: /opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/speculative/eagle_worker_v2.py.12345.2026-12-02@13:30:00~
at_risk:
  description:
    - Attributes that the unpatched method assigns only in or after its first statement that can raise
      (the first statement containing a call, such as the parent's C(__init__)), and that other methods of the
      class read as C(self.<name>). Such an attribute is missing from a half-built object.
    - Attributes already assigned before that statement are not listed. Sorted.
    - Compare with RV(inserted) to see which of them the block does not cover.
  returned: success
  type: list
  elements: str
  sample: [_draft_worker, plan_stream, speculative_algorithm]
first_raising_line:
  description:
    - Line number, in the file after the task, of the method's first statement containing a call.
    - V(null) when the method has no such statement.
  returned: success
  type: int
  sample: 503
pycache_removed:
  description:
    - Stale bytecode files (C(__pycache__/<stem>.*.pyc)) removed after the file was written.
    - In check mode, the files that would be removed.
  returned: success
  type: list
  elements: str
  sample: [/opt/sglang/venv/lib/python3.11/site-packages/sglang/srt/speculative/__pycache__/eagle_worker_v2.cpython-311.pyc]
"""

import glob
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.module_utils.early_init_plan import PATCH_OPTIONS, PatchError, plan


def stale_bytecode(path):
    folder, base = os.path.split(path)
    stem = os.path.splitext(base)[0]
    return sorted(glob.glob(os.path.join(glob.escape(folder), "__pycache__", glob.escape(stem) + ".*.pyc")))


def main():
    module = AnsibleModule(
        argument_spec=dict(path=dict(type="path", required=True), backup=dict(type="bool", default=False), **PATCH_OPTIONS),
        supports_check_mode=True,
    )
    params = module.params
    result = dict(changed=False, path=os.path.realpath(params["path"]))
    try:
        found = plan(params["path"], params["class_name"], params["method"], params["attributes"], params["state"])
    except PatchError as exc:
        module.fail_json(msg=to_native(exc), **dict(result, **({"sha256": exc.sha256} if exc.sha256 else {})))
    current, new, path = found.pop("current"), found.pop("new"), found["path"]
    changed = found["changed"]
    result.update(found, backup_file="", pycache_removed=[])
    if module._diff:
        result["diff"] = dict(
            before=to_text(current, errors="surrogate_or_strict"),
            after=to_text(new, errors="surrogate_or_strict"),
            before_header=path,
            after_header=path,
        )
    if not changed:
        result["msg"] = "already in the wanted state"
        module.exit_json(**result)

    if module.check_mode:
        result["pycache_removed"] = stale_bytecode(path)
        result["msg"] = "would %s the early-init block (check mode)" % ("write" if params["state"] == "present" else "remove")
        module.exit_json(**result)

    if params["backup"]:
        result["backup_file"] = module.backup_local(path)
    fd, tmp = tempfile.mkstemp(dir=module.tmpdir)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(new)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot write a temporary copy of %s: %s" % (path, to_native(exc)), **result)
    module.atomic_move(tmp, path, unsafe_writes=False)

    removed = []
    for pyc in stale_bytecode(path):
        try:
            os.unlink(pyc)
            removed.append(pyc)
        except OSError as exc:
            module.warn("could not remove stale bytecode %s: %s" % (pyc, to_native(exc)))
    result["pycache_removed"] = removed
    result["msg"] = "%s the early-init block; removed %d stale bytecode file(s)" % (
        "wrote" if params["state"] == "present" else "removed", len(removed))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
