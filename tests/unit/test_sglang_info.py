"""Unit tests for library/sglang_info.py and module_utils/sglang_paths.py: fake virtualenv trees, no processes
(the module's runner is replaced where an interpreter would be asked)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os

import pytest

from ansible.module_utils import basic
from ansible.module_utils import sglang_paths
from ansible.module_utils.testing import patch_module_args

from module_harness import ExitJson, FailJson
from module_harness import exit_json as _exit_json
from module_harness import fail_json as _fail_json

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("sglang_info", os.path.join(REPO, "library", "sglang_info.py"))
sglang_info = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sglang_info)

EAGLE_SOURCE = b"class EAGLEWorkerV2:\n    def __init__(self):\n        super().__init__()\n"


def make_venv(root, version="0.5.23", python="3.11", eagle=True, dist_name="sglang", extra_lib=None):
    """A virtualenv as `python -m venv` lays it out, with SGLang's files (no real interpreter)."""
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    (root / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\nversion = %s.2\n" % python)
    for lib in [python] + ([extra_lib] if extra_lib else []):
        (root / "lib" / ("python" + lib) / "site-packages").mkdir(parents=True)
    site = root / "lib" / ("python" + python) / "site-packages"
    if version:
        dist = site / ("%s-%s.dist-info" % (dist_name, version))
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: x\n\nName: body\n"
                                       % (dist_name, version))
        package = site / "sglang"
        (package / "srt" / "speculative").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('sglang must not be imported')\n")
        if eagle:
            (package / "srt" / "speculative" / "eagle_worker_v2.py").write_bytes(EAGLE_SOURCE)
    return site


def run_module(monkeypatch, runner=None, **args):
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    calls = []

    def fake_run_command(self, cmd, **kwargs):
        calls.append(cmd)
        if runner is None:
            raise AssertionError("no process expected, got %s" % cmd)
        return runner(cmd)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake_run_command)
    with patch_module_args(args):
        with pytest.raises((ExitJson, FailJson)) as exc:
            sglang_info.main()
    result = exc.value.args[0]
    result["_calls"] = calls
    return result


def test_venv_version_package_and_eagle_file_without_a_process(tmp_path, monkeypatch):
    site = make_venv(tmp_path / "venv")
    result = run_module(monkeypatch, venv=str(tmp_path / "venv"))
    eagle = site / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py"
    assert result["changed"] is False
    assert result["installed"] is True and result["version"] == "0.5.23"
    assert result["site_packages"] == str(site)
    assert result["package_dir"] == str(site / "sglang")
    assert result["eagle_worker_v2"] == str(eagle)
    assert result["eagle_worker_v2_sha256"] == hashlib.sha256(EAGLE_SOURCE).hexdigest()
    assert result["python"] == str(tmp_path / "venv" / "bin" / "python")
    assert "importable" not in result and result["_calls"] == []


def test_python_of_a_venv_is_the_same_as_the_venv(tmp_path, monkeypatch):
    make_venv(tmp_path / "venv")
    by_venv = run_module(monkeypatch, venv=str(tmp_path / "venv"))
    by_python = run_module(monkeypatch, python=str(tmp_path / "venv" / "bin" / "python"))
    for key in ("version", "package_dir", "eagle_worker_v2_sha256", "venv", "python"):
        assert by_venv[key] == by_python[key]


def test_missing_venv_is_not_installed_and_not_an_error(tmp_path, monkeypatch):
    result = run_module(monkeypatch, venv=str(tmp_path / "nothing"))
    assert result.get("failed") is not True
    assert result["installed"] is False and result["version"] is None and result["package_dir"] is None


def test_venv_without_sglang(tmp_path, monkeypatch):
    make_venv(tmp_path / "venv", version=None)
    result = run_module(monkeypatch, venv=str(tmp_path / "venv"))
    assert result["installed"] is False and result["eagle_worker_v2"] is None


def test_release_without_eagle_worker_v2(tmp_path, monkeypatch):
    make_venv(tmp_path / "venv", version="0.5.3", eagle=False)
    result = run_module(monkeypatch, venv=str(tmp_path / "venv"))
    assert result["version"] == "0.5.3"
    assert result["eagle_worker_v2"] is None and result["eagle_worker_v2_sha256"] is None


def test_site_packages_of_the_venvs_own_python_version_wins(tmp_path, monkeypatch):
    # A leftover lib/python3.10 (an older interpreter) must not hide the 3.11 install.
    make_venv(tmp_path / "venv", python="3.11", extra_lib="3.10")
    old = tmp_path / "venv" / "lib" / "python3.10" / "site-packages" / "sglang-0.4.0.dist-info"
    old.mkdir()
    (old / "METADATA").write_text("Name: sglang\nVersion: 0.4.0\n")
    assert run_module(monkeypatch, venv=str(tmp_path / "venv"))["version"] == "0.5.23"


def test_other_distributions_with_a_common_prefix_are_not_sglang(tmp_path, monkeypatch):
    make_venv(tmp_path / "venv", version=None)
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    dist = site / "sglang_router-0.2.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Name: sglang-router\nVersion: 0.2.1\n")
    assert run_module(monkeypatch, venv=str(tmp_path / "venv"))["installed"] is False


def test_a_python_outside_a_venv_is_asked_for_its_site_dirs(tmp_path, monkeypatch):
    site = make_venv(tmp_path / "root")
    (tmp_path / "root" / "pyvenv.cfg").unlink()
    python = str(tmp_path / "root" / "bin" / "python")
    result = run_module(monkeypatch, runner=lambda cmd: (0, json.dumps([str(site), "/nonexistent"]) + "\n", ""),
                        python=python)
    assert result["_calls"] == [[python, "-c", sglang_paths.SITE_DIRS_SCRIPT]]
    assert result["venv"] is None and result["version"] == "0.5.23"


def test_import_check_reports_the_last_error_line(tmp_path, monkeypatch):
    make_venv(tmp_path / "venv")
    err = "Traceback (most recent call last):\n  File ...\nModuleNotFoundError: No module named 'torch'\n"
    result = run_module(monkeypatch, runner=lambda cmd: (1, "", err), venv=str(tmp_path / "venv"), import_check=True)
    assert result["importable"] is False
    assert result["import_error"] == "ModuleNotFoundError: No module named 'torch'"
    (cmd,) = result["_calls"]
    assert cmd[-3:] == ["-B", "-c", "import sglang"]


def test_import_check_success(tmp_path, monkeypatch):
    make_venv(tmp_path / "venv")
    result = run_module(monkeypatch, runner=lambda cmd: (0, "", ""), venv=str(tmp_path / "venv"), import_check=True)
    assert result["importable"] is True and "import_error" not in result


def test_venv_and_python_are_mutually_exclusive(tmp_path, monkeypatch):
    result = run_module(monkeypatch, venv=str(tmp_path), python=str(tmp_path / "bin" / "python"))
    assert result["failed"] and "mutually exclusive" in result["msg"]


def test_check_mode_reads_the_same(tmp_path, monkeypatch):
    make_venv(tmp_path / "venv")
    result = run_module(monkeypatch, venv=str(tmp_path / "venv"), _ansible_check_mode=True)
    assert result["version"] == "0.5.23" and result["changed"] is False


def test_canonical_names_and_metadata_headers_only(tmp_path):
    assert sglang_paths.canonical_name("SGLang_Router") == "sglang-router"
    meta = tmp_path / "METADATA"
    meta.write_text("Name: sglang\nVersion: 1.2\n\nVersion: 9.9\n")
    assert sglang_paths.read_metadata(str(meta)) == {"Name": "sglang", "Version": "1.2"}
