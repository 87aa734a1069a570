"""Make the incident's EAGLEWorkerV2 out of a real SGLang eagle_worker_v2.py (TEST-ONLY, runs on the device).

    python3 tests/gpu/incident_variant.py /opt/sglang/venv-0.5.17/lib/python3.12/site-packages/sglang/srt/speculative/eagle_worker_v2.py

No product role runs this: tests/gpu/playbook_h200.sh applies it to the installed file on the lent H200 before the
incident runs. It edits the file in place (atomically, stale bytecode removed) so that

  * EAGLEWorkerV2.__init__ ends with an optional step that fails and is tolerated (it reads a speculative-policy
    file that does not exist; the error is logged as a warning and swallowed), and only after that step assigns
    ``self.spec_disable_batch_threshold``, which therefore stays unset;
  * forward_batch_generation reads ``self.spec_disable_batch_threshold`` on its decode branch (draft + verify), not
    on the prefill branch (a prefill is what /health_generate runs, max_new_tokens 1).

So the server loads, reports healthy, and the first request that decodes dies with ``AttributeError:
'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'`` in the scheduler, unless the attribute is
assigned before the failing step: what the role sglang_patch inserts at the top of ``__init__`` (value 0: the
threshold is off). The early-init patch's block (between its BEGIN/END markers) is left as it is, so the role can
add or remove it on the variant. A file that already holds the variant is left untouched. Prints one JSON line.
"""

import ast
import glob
import json
import os
import sys
import tempfile

MARK = "eagle-deploy TEST-ONLY incident variant"
ATTR = "spec_disable_batch_threshold"

INIT_TAIL = '''\
# BEGIN {mark} (tests/gpu/incident_variant.py)
# An optional step that fails here and is tolerated; the attribute after it is then never assigned.
try:
    import json as _json
    import os as _os

    _policy_path = _os.environ.get("SGLANG_SPEC_POLICY_FILE", "/etc/sglang/spec_policy.json")
    with open(_policy_path) as _policy_file:
        _policy = _json.load(_policy_file)
    self.{attr} = int(_policy.get("disable_batch_threshold", 0))
except Exception as _policy_error:
    logger.warning("EAGLEWorkerV2: speculative policy not loaded (%s); going on without it", type(_policy_error).__name__)
# END {mark}
'''

DECODE_READ = '''\
# {mark}: the decode path reads the attribute
if 0 < self.{attr} <= batch.seq_lens.shape[0]:
    logger.info("EAGLEWorkerV2: batch size at the speculative threshold %d", self.{attr})
'''


def indent(block, prefix):
    return "".join(prefix + line if line.strip() else line for line in block.splitlines(True))


def find(tree):
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EAGLEWorkerV2")
    funcs = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    init, fwd = funcs["__init__"], funcs["forward_batch_generation"]
    # The decode branch: the `else:` of the first `if` whose test names forward_mode.is_extend().
    branch = next(n for n in fwd.body if isinstance(n, ast.If) and "is_extend" in ast.unparse(n.test))
    if not branch.orelse:
        raise SystemExit("forward_batch_generation has no decode branch (else:) here; update incident_variant.py")
    return init, branch.orelse[0]


def make_variant(text):
    if MARK in text:
        return text, False
    lines = text.splitlines(True)
    init, first_decode_stmt = find(ast.parse(text))
    last = init.body[-1]
    init_indent = " " * init.body[0].col_offset
    decode_indent = " " * first_decode_stmt.col_offset
    # Insert bottom-up so that the earlier line numbers stay valid.
    edits = sorted([(last.end_lineno, indent(INIT_TAIL.format(mark=MARK, attr=ATTR), init_indent)),
                    (first_decode_stmt.lineno - 1, indent(DECODE_READ.format(mark=MARK, attr=ATTR), decode_indent))],
                   reverse=True)
    for at, block in edits:
        lines[at:at] = [block]
    new = "".join(lines)
    compile(new, "eagle_worker_v2.py", "exec")
    return new, True


def main():
    path = sys.argv[1]
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    new, changed = make_variant(text)
    if changed:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".incident-")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(new)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
        stem = os.path.splitext(os.path.basename(path))[0]
        for pyc in glob.glob(os.path.join(os.path.dirname(path), "__pycache__", stem + ".*.pyc")):
            os.unlink(pyc)
    print(json.dumps({"path": path, "changed": changed, "attribute": ATTR}))


if __name__ == "__main__":
    main()
