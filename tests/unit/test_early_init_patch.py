"""Unit tests for library/early_init_patch.py, run against the real eagle_worker_v2.py of SGLang releases."""

from __future__ import annotations

import ast
import re
import difflib
import hashlib
import importlib.util
import os
import stat
import sys

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_src  # noqa: E402 - test helper next to this file, importable once sys.path has this directory

MODULE_FILE = os.path.join(sglang_src.REPO, "library", "early_init_patch.py")
_spec = importlib.util.spec_from_file_location("early_init_patch", MODULE_FILE)
eip = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eip)
from ansible.module_utils import early_init_plan  # noqa: E402 - the patch itself (conftest puts module_utils there)

DEFAULT = {"spec_disable_batch_threshold": "0"}


from module_harness import ExitJson, FailJson  # noqa: E402 - test helper next to this file, importable once sys.path has this directory
from module_harness import exit_json as _exit_json  # noqa: E402 - test helper next to this file, importable once sys.path has this directory
from module_harness import fail_json as _fail_json  # noqa: E402 - test helper next to this file, importable once sys.path has this directory


@pytest.fixture
def run(monkeypatch, tmp_path):
    """Drive main() with the given module args; return the result dict of exit_json or fail_json."""
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    remote_tmp = tmp_path / "remote_tmp"
    remote_tmp.mkdir()

    def _run(check_mode=False, diff=False, **args):
        args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff, _ansible_remote_tmp=str(remote_tmp))
        with patch_module_args(args):
            try:
                eip.main()
            except (ExitJson, FailJson) as exc:
                return exc.args[0]
        pytest.fail("main() returned without exit_json or fail_json")

    return _run


@pytest.fixture(params=sglang_src.RELEASES)
def release(request, tmp_path):
    """(version, original bytes, path of a writable copy) of a real SGLang eagle_worker_v2.py."""
    original = sglang_src.eagle_worker_v2_source(request.param)
    folder = tmp_path / "sglang" / "srt" / "speculative"
    folder.mkdir(parents=True)
    path = folder / "eagle_worker_v2.py"
    path.write_bytes(original)
    return request.param, original, path


def method_of(source, class_name="EAGLEWorkerV2", method="__init__"):
    tree = ast.parse(source)
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method)


def has_doc(func):
    first = func.body[0]
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def statements(func):
    return func.body[1:] if has_doc(func) else func.body


def assert_patched(original, patched, attributes, class_name="EAGLEWorkerV2", method="__init__"):
    """The method starts with exactly the assignments, the original statements follow unchanged, nothing else moved."""
    before = method_of(original, class_name, method)
    after = method_of(patched, class_name, method)
    me = after.args.args[0].arg
    assert has_doc(before) == has_doc(after)
    if has_doc(before):
        assert ast.dump(after.body[0]) == ast.dump(before.body[0])
    body = statements(after)
    head, rest = body[:len(attributes)], body[len(attributes):]
    assert len(head) == len(attributes)
    for stmt, (name, value) in zip(head, attributes.items()):
        assert isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
        target = stmt.targets[0]
        assert isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
        assert (target.value.id, target.attr) == (me, name)
        expected = ast.literal_eval(value) if isinstance(value, str) else value
        assert ast.literal_eval(stmt.value) == expected
    assert [ast.dump(s) for s in rest] == [ast.dump(s) for s in statements(before)]
    compile(patched, "patched.py", "exec", dont_inherit=True)
    # Line level: only added lines, all of them inside the method, framed by the markers.
    old_lines, new_lines = original.splitlines(True), patched.splitlines(True)
    count = len(new_lines) - len(old_lines)
    assert count == len(attributes) + 3
    at = next(i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b)
    assert new_lines[:at] == old_lines[:at] and new_lines[at + count:] == old_lines[at:]
    added = new_lines[at:at + count]
    # The block follows the def header (or the docstring) directly, ahead of any comment before the first statement.
    if has_doc(before):
        assert at == before.body[0].end_lineno
    else:
        assert new_lines[at - 1].split(b"#")[0].rstrip().endswith(b":")
    assert added[0].strip().startswith(b"# BEGIN eagle-deploy early-init patch for %s.%s" % (class_name.encode(), method.encode()))
    assert added[-1].strip().startswith(b"# END eagle-deploy early-init patch")
    first_added = patched.splitlines().index(added[0].rstrip(b"\r\n")) + 1
    assert after.lineno < first_added < statements(after)[0].lineno


def sha(data):
    return hashlib.sha256(data).hexdigest()


# --- real SGLang releases -------------------------------------------------------------------------

def test_real_release_gets_assignments_first_and_keeps_the_rest(run, release):
    version, original, path = release
    result = run(path=str(path))
    assert result["changed"] is True, result
    patched = path.read_bytes()
    assert_patched(original, patched, DEFAULT)
    assert result["inserted"] == ["spec_disable_batch_threshold"]
    assert result["sha256"] == sha(patched)
    assert result["original_sha256"] == sha(original)


def test_real_release_second_run_is_unchanged(run, release):
    _version, _original, path = release
    run(path=str(path))
    once = path.read_bytes()
    result = run(path=str(path))
    assert result["changed"] is False
    assert path.read_bytes() == once
    assert result["sha256"] == sha(once)


def test_real_release_absent_restores_original_bytes(run, release):
    _version, original, path = release
    run(path=str(path))
    assert path.read_bytes() != original
    result = run(path=str(path), state="absent")
    assert result["changed"] is True
    assert path.read_bytes() == original
    assert result["sha256"] == result["original_sha256"] == sha(original)
    assert run(path=str(path), state="absent")["changed"] is False


def test_real_release_crlf_keeps_crlf_and_restores(run, release):
    _version, original, path = release
    crlf = original.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    path.write_bytes(crlf)
    run(path=str(path))
    patched = path.read_bytes()
    assert patched.count(b"\n") == patched.count(b"\r\n")
    assert_patched(crlf, patched, DEFAULT)
    run(path=str(path), state="absent")
    assert path.read_bytes() == crlf


# What the source of each release says (read from the wheels): the first statement of
# EAGLEWorkerV2.__init__ with a call, attributes assigned after it and read by other methods,
# and attributes assigned before it.
FIRST_CALL = {
    "0.5.4": "self.speculative_algorithm = SpeculativeAlgorithm.from_string(",
    "0.5.5": "self.speculative_algorithm = SpeculativeAlgorithm.from_string(",
    "0.5.9": "self.speculative_algorithm = SpeculativeAlgorithm.from_string(",
    "0.5.15": "self.speculative_algorithm = SpeculativeAlgorithm.from_string(",
    "0.5.20": "super().__init__()",
    "0.5.23": "super().__init__()",
}
LATE_AND_READ = {
    "0.5.4": {"_draft_worker", "plan_stream"},
    "0.5.5": {"_draft_worker", "plan_stream"},
    "0.5.9": {"_draft_worker", "plan_stream"},
    "0.5.15": {"_draft_worker", "plan_stream", "speculative_algorithm", "adaptive_controller"},
    "0.5.20": {"_draft_worker", "plan_stream", "topk", "device"},
    "0.5.23": {"_draft_worker", "plan_stream", "topk", "device", "enable_dp_spec_prefill_coordination"},
}
EARLY = {
    "0.5.4": {"topk", "device", "server_args"},
    "0.5.5": {"topk", "device", "server_args"},
    "0.5.9": {"topk", "device", "server_args"},
    "0.5.15": {"topk", "device", "server_args"},
    "0.5.20": set(),
    "0.5.23": set(),
}


def test_real_release_at_risk_and_first_raising_line(run, release):
    version, original, path = release
    result = run(path=str(path))
    patched_lines = path.read_bytes().decode().splitlines()
    assert patched_lines[result["first_raising_line"] - 1].strip() == FIRST_CALL[version]
    assert result["at_risk"] == sorted(result["at_risk"])
    assert LATE_AND_READ[version] <= set(result["at_risk"])
    assert not EARLY[version] & set(result["at_risk"])
    # None of these releases mentions spec_disable_batch_threshold at all, so it cannot be at risk there.
    assert b"spec_disable_batch_threshold" not in original
    assert "spec_disable_batch_threshold" not in result["at_risk"]


def test_real_release_check_mode_writes_nothing(run, release):
    _version, original, path = release
    pycache = path.parent / "__pycache__"
    pycache.mkdir()
    pyc = pycache / "eagle_worker_v2.cpython-311.pyc"
    pyc.write_bytes(b"stale")
    result = run(path=str(path), check_mode=True)
    assert result["changed"] is True
    assert path.read_bytes() == original
    assert pyc.exists()
    assert result["pycache_removed"] == [str(pyc)]
    would_be = result["sha256"]
    assert run(path=str(path))["sha256"] == would_be == sha(path.read_bytes())


def test_real_release_diff_is_the_change(run, release):
    _version, original, path = release
    result = run(path=str(path), diff=True)
    diff = result["diff"]
    assert set(diff) == {"before", "after", "before_header", "after_header"}
    assert diff["before"] == original.decode()
    assert diff["after"] == path.read_bytes().decode()
    unified = list(difflib.unified_diff(diff["before"].splitlines(), diff["after"].splitlines(), lineterm=""))
    assert [line[1:] for line in unified if line.startswith("+") and not line.startswith("+++")] == [
        "        # BEGIN eagle-deploy early-init patch for EAGLEWorkerV2.__init__ (managed by Ansible)",
        "        # Safe defaults, set before anything in this method can raise.",
        "        self.spec_disable_batch_threshold = 0",
        "        # END eagle-deploy early-init patch for EAGLEWorkerV2.__init__ (managed by Ansible)",
    ]
    assert not [line for line in unified if line.startswith("-") and not line.startswith("---")]


def test_real_release_changed_attributes_replace_the_block(run, release):
    _version, original, path = release
    run(path=str(path))
    new_attrs = {"spec_disable_batch_threshold": "8", "adaptive_controller": "None"}
    result = run(path=str(path), attributes=new_attrs)
    assert result["changed"] is True
    patched = path.read_bytes()
    assert patched.count(b"# BEGIN eagle-deploy early-init patch") == 1
    assert_patched(original, patched, new_attrs)
    run(path=str(path), state="absent")
    assert path.read_bytes() == original


def test_real_release_other_class_can_be_patched_too(run, release):
    _version, original, path = release
    run(path=str(path))
    result = run(path=str(path), class_name="EagleDraftWorker", attributes={"draft_ready": False})
    assert result["changed"] is True
    patched = path.read_bytes()
    compile(patched, "p.py", "exec", dont_inherit=True)
    for class_name, first in (("EagleDraftWorker", "self.draft_ready = False"),
                              ("EAGLEWorkerV2", "self.spec_disable_batch_threshold = 0")):
        got = statements(method_of(patched, class_name))
        assert ast.dump(got[0]) == ast.dump(ast.parse(first).body[0])
        assert [ast.dump(s) for s in got[1:]] == [ast.dump(s) for s in statements(method_of(original, class_name))]
    run(path=str(path), class_name="EagleDraftWorker", state="absent")
    run(path=str(path), state="absent")
    assert path.read_bytes() == original


# --- synthetic files ------------------------------------------------------------------------------

LATE_SOURCE = b'''class Base:
    def __init__(self):
        pass


class EAGLEWorkerV2(Base):
    def __init__(self, server_args):
        """Build the worker."""
        # Parse arguments
        self.server_args = server_args
        super().__init__()
        self.server_args = server_args.copy()
        self.spec_disable_batch_threshold = server_args.threshold
        self.local_only = 1

    def forward(self, batch):
        if len(batch) > self.spec_disable_batch_threshold:
            return None
        return self.server_args
'''


def test_late_assignment_is_at_risk_and_kept(run, tmp_path):
    path = tmp_path / "eagle_worker_v2.py"
    path.write_bytes(LATE_SOURCE)
    result = run(path=str(path))
    patched = path.read_bytes()
    assert_patched(LATE_SOURCE, patched, DEFAULT)
    # The real assignment later in __init__ stays.
    assert b"        self.spec_disable_batch_threshold = server_args.threshold\n" in patched
    # server_args is reassigned late too, but it already has a value from before the first call.
    assert result["at_risk"] == ["spec_disable_batch_threshold"]
    assert patched.decode().splitlines()[result["first_raising_line"] - 1].strip() == "super().__init__()"
    # The block goes after the docstring, before the comment that precedes the first statement.
    lines = patched.decode().splitlines()
    assert lines[7].strip() == '"""Build the worker."""'
    assert lines[8].strip().startswith("# BEGIN eagle-deploy")
    assert lines[12].strip() == "# Parse arguments"


TAB_SOURCE = (
    b"class EAGLEWorkerV2:\n"
    b"\tdef __init__(self, a):  # trailing comment\n"
    b"\t\tself.a = a\n"
    b"\t\tself.b = compute(a)\n"
    b"\n"
    b"\tdef use(self):\n"
    b"\t\treturn self.b\n"
)


def test_tab_indented_file_keeps_tabs(run, tmp_path):
    path = tmp_path / "eagle_worker_v2.py"
    path.write_bytes(TAB_SOURCE)
    attrs = {"spec_disable_batch_threshold": "0", "b": "None"}
    result = run(path=str(path), attributes=attrs)
    patched = path.read_bytes()
    assert_patched(TAB_SOURCE, patched, attrs)
    block = patched.splitlines()[2:8]
    assert all(line.startswith(b"\t\t") and not line.startswith(b"\t\t ") and b"    " not in line for line in block)
    assert block[2] == b"\t\tself.spec_disable_batch_threshold = 0"
    assert result["at_risk"] == ["b"]
    run(path=str(path), state="absent")
    assert path.read_bytes() == TAB_SOURCE


def test_yaml_scalars_lists_and_dicts_are_written_with_repr(run, tmp_path):
    path = tmp_path / "eagle_worker_v2.py"
    path.write_bytes(LATE_SOURCE)
    attrs = {"n": 3, "flag": True, "nothing": None, "items": [1, "a"], "table": {"k": 1.5}, "text": "'plain'"}
    run(path=str(path), attributes=attrs)
    patched = path.read_bytes()
    assert_patched(LATE_SOURCE, patched, attrs)
    assert b"        self.items = [1, 'a']\n" in patched
    assert b"        self.text = 'plain'\n" in patched


def test_only_a_docstring_gets_block_after_it(run, tmp_path):
    source = b'class EAGLEWorkerV2:\n    def __init__(self):\n        """Only a docstring."""\n'
    path = tmp_path / "eagle_worker_v2.py"
    path.write_bytes(source)
    run(path=str(path))
    patched = path.read_bytes()
    func = method_of(patched)
    assert has_doc(func)
    assert ast.dump(func.body[1]) == ast.dump(ast.parse("self.spec_disable_batch_threshold = 0").body[0])
    run(path=str(path), state="absent")
    assert path.read_bytes() == source


def test_backup_keeps_original(run, tmp_path):
    path = tmp_path / "eagle_worker_v2.py"
    path.write_bytes(LATE_SOURCE)
    result = run(path=str(path), backup=True)
    assert result["backup_file"] and result["backup_file"] != str(path)
    with open(result["backup_file"], "rb") as handle:
        assert handle.read() == LATE_SOURCE
    assert run(path=str(path), backup=True)["backup_file"] == ""


def test_mode_kept_and_matching_bytecode_removed(run, tmp_path):
    path = tmp_path / "eagle_worker_v2.py"
    path.write_bytes(LATE_SOURCE)
    os.chmod(str(path), 0o640)
    pycache = tmp_path / "__pycache__"
    pycache.mkdir()
    stale = [pycache / "eagle_worker_v2.cpython-311.pyc", pycache / "eagle_worker_v2.cpython-312.opt-1.pyc"]
    other = pycache / "eagle_worker.cpython-311.pyc"
    for pyc in stale + [other]:
        pyc.write_bytes(b"stale")
    result = run(path=str(path))
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o640
    assert sorted(result["pycache_removed"]) == sorted(str(p) for p in stale)
    assert not any(p.exists() for p in stale)
    assert other.exists()


def test_symlink_is_followed(run, tmp_path):
    real = tmp_path / "real.py"
    real.write_bytes(LATE_SOURCE)
    link = tmp_path / "eagle_worker_v2.py"
    link.symlink_to(real)
    result = run(path=str(link))
    assert result["path"] == str(real)
    assert link.is_symlink()
    assert_patched(LATE_SOURCE, real.read_bytes(), DEFAULT)


# --- refusals: the file stays byte-for-byte as it was -----------------------------------------------

REFUSALS = [
    ("class_name", dict(class_name="NoSuchWorker")),
    ("method", dict(method="no_such_method")),
    ("attributes", dict(attributes={"1abc": "0"})),
    ("attributes", dict(attributes={"class": "0"})),
    ("attributes", dict(attributes={"spec-disable": "0"})),
    ("attributes", dict(attributes={"spec_disable_batch_threshold": "int('3')"})),
    ("attributes", dict(attributes={"spec_disable_batch_threshold": "threshold"})),
    ("attributes", dict(attributes={})),
]


@pytest.mark.parametrize("option,args", REFUSALS, ids=[repr(a) for _o, a in REFUSALS])
def test_refusal_names_option_and_leaves_file(run, release, option, args):
    _version, original, path = release
    result = run(path=str(path), **args)
    assert result.get("failed") is True, result
    assert re.match(re.escape(option) + r"[.:]", result["msg"]), result["msg"]
    assert path.read_bytes() == original


def test_refusal_on_patched_file_leaves_patched_bytes(run, tmp_path):
    path = tmp_path / "eagle_worker_v2.py"
    path.write_bytes(LATE_SOURCE)
    run(path=str(path))
    patched = path.read_bytes()
    result = run(path=str(path), attributes={"x": "not a literal"})
    assert result["failed"] and result["msg"].startswith("attributes.x:")
    assert path.read_bytes() == patched


def test_missing_file_is_refused(run, tmp_path):
    result = run(path=str(tmp_path / "eagle_worker_v2.py"))
    assert result["failed"] and result["msg"].startswith("path:")
    assert not (tmp_path / "eagle_worker_v2.py").exists()


def test_unparsable_file_is_refused(run, tmp_path):
    path = tmp_path / "eagle_worker_v2.py"
    source = b"class EAGLEWorkerV2:\n    def __init__(self):\n        self.a = (\n"
    path.write_bytes(source)
    result = run(path=str(path))
    assert result["failed"] and result["msg"].startswith("path:")
    assert path.read_bytes() == source


def test_patched_result_that_does_not_compile_is_refused(run, tmp_path, monkeypatch):
    path = tmp_path / "eagle_worker_v2.py"
    path.write_bytes(LATE_SOURCE)
    monkeypatch.setattr(early_init_plan, "render_literal", lambda name, value: "0)")
    result = run(path=str(path))
    assert result["failed"] and result["msg"].startswith("attributes:") and "does not compile" in result["msg"]
    assert path.read_bytes() == LATE_SOURCE


def test_damaged_block_is_refused(run, tmp_path):
    path = tmp_path / "eagle_worker_v2.py"
    path.write_bytes(LATE_SOURCE)
    run(path=str(path))
    damaged = b"".join(line for line in path.read_bytes().splitlines(True) if b"# END eagle-deploy" not in line)
    path.write_bytes(damaged)
    result = run(path=str(path))
    assert result["failed"] and result["msg"].startswith("path:") and "damaged" in result["msg"]
    assert path.read_bytes() == damaged


def test_body_on_def_line_is_refused(run, tmp_path):
    path = tmp_path / "eagle_worker_v2.py"
    source = b"class EAGLEWorkerV2:\n    def __init__(self): self.a = 1\n"
    path.write_bytes(source)
    result = run(path=str(path))
    assert result["failed"] and result["msg"].startswith("method:")
    assert path.read_bytes() == source
