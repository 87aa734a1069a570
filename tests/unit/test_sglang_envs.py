"""module_utils/sglang_envs.py on small synthetic packages and sources: what counts as a read of an environment
variable (a load, not a store, a del or a setter), which files are read (never the package's tests), and the order of
versions (pre-releases, post-releases and local versions beside plain ones)."""

from __future__ import annotations

import ast
import os
import zipfile

import pytest

from ansible.module_utils import sglang_envs, sglang_server_args  # conftest puts the project's module_utils there


def test_a_store_or_a_del_of_os_environ_is_not_a_read():
    source = (b"import os\n"
              b"os.environ['STORED_ONE'] = '1'\n"
              b"del os.environ['DELETED_THREE']\n"
              b"a = os.environ['LOADED_FOUR']\n")
    assert sglang_envs.reads_in_source(source) == {"LOADED_FOUR"}


def test_the_env_setters_are_not_reads():
    source = (b"import os\n"
              b"def test_x(monkeypatch):\n"
              b"    monkeypatch.setenv('SET_ONE', '1')\n"
              b"    monkeypatch.delenv('DEL_TWO', raising=False)\n"
              b"    os.putenv('PUT_THREE', '1')\n"
              b"    os.unsetenv('UNSET_FOUR')\n"
              b"    _putenv('PRIVATE_FIVE', '1')\n"
              b"    return get_bool_env_var('READ_SIX'), os.getenv('READ_SEVEN'), get_env_int('READ_EIGHT')\n")
    assert sglang_envs.reads_in_source(source) == {"READ_SIX", "READ_SEVEN", "READ_EIGHT"}


READERS = {
    "sglang/srt/environ.py": "class Envs:\n    pass\n",
    "sglang/srt/real.py": "import os\nx = os.environ.get('SGLANG_REAL_ONE')\n",
    "sglang/test/test_utils.py": "import os\nx = os.environ.get('SGLANG_IN_TEST_DIR')\n",
    "sglang/srt/tests/helpers.py": "import os\nx = os.getenv('SGLANG_IN_TESTS_DIR')\n",
    "sglang/srt/test_thing.py": "import os\nx = os.getenv('SGLANG_IN_TEST_FILE')\n",
    "sglang/srt/thing_test.py": "import os\nx = os.getenv('SGLANG_IN_FILE_TEST')\n",
    "sglang/srt/testing.py": "import os\nx = os.getenv('SGLANG_IN_TESTING')\n",
}
NAMES = ["SGLANG_REAL_ONE", "SGLANG_IN_TEST_DIR", "SGLANG_IN_TESTS_DIR", "SGLANG_IN_TEST_FILE", "SGLANG_IN_FILE_TEST",
         "SGLANG_IN_TESTING"]


def _tree(root):
    for rel, text in READERS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_tests_of_an_installed_package_are_not_read(tmp_path):
    _tree(tmp_path)
    reads = sglang_envs.installed_reads(str(tmp_path / "sglang"), NAMES)
    assert sorted(n for n in NAMES if reads.reads(n)) == ["SGLANG_IN_TESTING", "SGLANG_REAL_ONE"]
    assert reads.where["SGLANG_REAL_ONE"] == "sglang/srt/real.py"
    assert not any("test" in os.path.basename(os.path.dirname(f)) for f in reads.files)


def test_the_tests_of_a_wheel_are_not_read(tmp_path):
    wheel = tmp_path / "sglang-0.5.99-py3-none-any.whl"
    with zipfile.ZipFile(str(wheel), "w") as zf:
        for rel, text in READERS.items():
            zf.writestr(rel, text)
    reads = sglang_envs.wheel_reads(str(wheel), NAMES)
    assert sorted(n for n in NAMES if reads.reads(n)) == ["SGLANG_IN_TESTING", "SGLANG_REAL_ONE"]


@pytest.mark.parametrize("rel, test", [
    ("sglang/test/runners.py", True), ("sglang/srt/tests/x.py", True), ("sglang/srt/test_x.py", True),
    ("sglang/srt/x_test.py", True), ("sglang/srt/testing.py", False), ("sglang/srt/contest/x.py", False),
    ("sglang/srt/latest_x.py", False)])
def test_which_files_are_tests(rel, test):
    assert sglang_envs.is_test_file(rel) is test


def test_versions_sort_as_pep_440_orders_them_and_none_raises():
    versions = ["0.5.24rc1", "0.5.9", "0.5.24", "0.5.24.post1", "0.5.24+cu130", "0.5.24.dev0", "0.5.24a1",
                "0.5.24b2", "0.5.10", "0.5.24rc1.dev0", "0.5.24rc2", "0.5.4", "1.0"]
    assert sorted(versions, key=sglang_envs.version_key) == [
        "0.5.4", "0.5.9", "0.5.10", "0.5.24.dev0", "0.5.24a1", "0.5.24b2", "0.5.24rc1.dev0", "0.5.24rc1",
        "0.5.24rc2", "0.5.24", "0.5.24+cu130", "0.5.24.post1", "1.0"]
    assert sglang_envs.version_key("0.5.24rc1") > sglang_envs.version_key("0.5.9")
    # Any string is keyed, and compares with any other.
    assert sorted(["unknown", "0.5.9", "0.5.24+local.7", "0.5.24+local.x"], key=sglang_envs.version_key) == [
        "unknown", "0.5.9", "0.5.24+local.x", "0.5.24+local.7"]


def test_history_sorts_a_release_candidate_after_an_older_release(tmp_path):
    wheels = []
    for version in ("0.5.24rc1", "0.5.9"):
        wheel = tmp_path / ("sglang-%s-py3-none-any.whl" % version)
        with zipfile.ZipFile(str(wheel), "w") as zf:
            zf.writestr("sglang/srt/environ.py", "class Envs:\n    SGLANG_KNOB_X = EnvBool(False)\n")
        wheels.append((version, "wheel", str(wheel)))
    assert sglang_envs.history(["SGLANG_KNOB_X"], wheels) == {"SGLANG_KNOB_X": ["0.5.9", "0.5.24rc1"]}


def test_one_call_name_serves_both_the_env_scan_and_the_argument_scan():
    assert not hasattr(sglang_envs, "_func_name") and not hasattr(sglang_server_args, "_call_name")
    calls = [n for n in ast.walk(ast.parse("f(1)\na.b.g(2)\n(lambda: 0)()\n")) if isinstance(n, ast.Call)]
    assert [sglang_envs.call_name(c) for c in calls] == ["f", "g", None]
