"""sglang_args_check's environment check (issue 40), on the real wheels (`.cache/sglang-wheels`, see sglang_src.py):
the variables an SGLang reads are found in its sources (module_utils/sglang_envs.py), never imported. SGLang 0.5.9
reads SGLANG_ENABLE_SPEC_V2 (`sglang/srt/environ.py`); 0.5.23 reads it nowhere, so there it fails, and the message
says which of the cached wheels read it."""

from __future__ import annotations

import os
import shutil
import sys
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_src  # noqa: E402 - test helper next to this file, importable once sys.path has this directory
from test_sglang_args_check import SERVER_ARGS, run  # noqa: E402,F401 - the module's driver, a fixture

from ansible.module_utils import basic, sglang_envs  # noqa: E402 - conftest puts the project's module_utils there


@pytest.fixture
def warnings(monkeypatch):
    """The module's warnings (module.warn), as a list."""
    said = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg: said.append(msg))
    return said


def _site(tmp_path_factory, version):
    """A site-packages with every Python file of sglang `version` (out of the real wheel) and its dist-info."""
    site = tmp_path_factory.mktemp("site-%s" % version)
    with zipfile.ZipFile(sglang_src.wheel_path(version)) as wheel:
        for member in wheel.namelist():
            if member.startswith("sglang/") and member.endswith(".py"):
                wheel.extract(member, str(site))
    dist = site / ("sglang-%s.dist-info" % version)
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: %s\n\n" % version)
    (dist / "RECORD").write_text("sglang/__init__.py,,\n")
    return site


@pytest.fixture(scope="session")
def site_0_5_23(tmp_path_factory):
    return _site(tmp_path_factory, "0.5.23")


@pytest.fixture(scope="session")
def site_0_5_9(tmp_path_factory):
    return _site(tmp_path_factory, "0.5.9")


def _venv(tmp_path, site):
    """A venv laid out as `python -m venv` does whose site-packages is a copy of `site`."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.2\n")
    lib = venv / "lib" / "python3.11"
    lib.mkdir(parents=True)
    os.symlink(str(site), str(lib / "site-packages"))
    return str(venv / "bin" / "python")


def test_0_5_23_reads_none_of_spec_v2_and_0_5_9_declares_it_in_environ_py(site_0_5_23, site_0_5_9):
    names = ["SGLANG_ENABLE_SPEC_V2", "SGLANG_HEALTH_CHECK_TIMEOUT"]
    new = sglang_envs.installed_reads(str(site_0_5_23 / "sglang"), names)
    old = sglang_envs.installed_reads(str(site_0_5_9 / "sglang"), names)
    assert not new.reads("SGLANG_ENABLE_SPEC_V2")
    assert old.where["SGLANG_ENABLE_SPEC_V2"] == "sglang/srt/environ.py"
    assert new.reads("SGLANG_HEALTH_CHECK_TIMEOUT") and old.reads("SGLANG_HEALTH_CHECK_TIMEOUT")


def test_reads_follow_environ_calls_subscripts_membership_and_env_helpers():
    source = (b"import os\n"
              b"a = os.environ['A_ONE']\nb = os.environ.get('B_TWO')\nc = os.getenv('C_THREE', '1')\n"
              b"d = 'D_FOUR' in os.environ\ne = get_bool_env_var('E_FIVE')\nf = get_int_env_var('F_SIX', 3)\n"
              b"g = os.environ.setdefault('G_SEVEN', 'x')\nh = {'H_EIGHT': 1}.get('H_EIGHT')\n"
              b"i = print('I_NINE')\n")
    assert sglang_envs.reads_in_source(source) == {"A_ONE", "B_TWO", "C_THREE", "D_FOUR", "E_FIVE", "F_SIX",
                                                   "G_SEVEN"}


def test_a_legacy_sgl_name_is_read_through_its_sglang_twin(site_0_5_23):
    reads = sglang_envs.installed_reads(str(site_0_5_23 / "sglang"), ["SGL_HEALTH_CHECK_TIMEOUT", "SGL_NO_SUCH_THING"])
    assert reads.sgl_rewrite
    assert reads.reads("SGL_HEALTH_CHECK_TIMEOUT") and not reads.reads("SGL_NO_SUCH_THING")


def test_module_fails_on_spec_v2_with_0_5_23_and_names_the_wheels_that_read_it(run, tmp_path, site_0_5_23):
    python = _venv(tmp_path, site_0_5_23)
    result = run(python=python, args=SERVER_ARGS, method="ast",
                 environment_names=["SGLANG_ENABLE_SPEC_V2", "SGLANG_HEALTH_CHECK_TIMEOUT"],
                 environment_compare=[sglang_src.wheel_path("0.5.9"), sglang_src.wheel_path("0.5.4")])
    assert result["failed"]
    assert result["unknown_environment"] == ["SGLANG_ENABLE_SPEC_V2"]
    assert result["environment_read_by"] == {"SGLANG_ENABLE_SPEC_V2": ["0.5.9"]}
    assert "SGLANG_ENABLE_SPEC_V2 (read by 0.5.9, not by 0.5.23)" in result["msg"]
    assert "unknown to SGLang 0.5.23" in result["msg"]


def test_module_compares_with_a_wheelhouse_directory(run, tmp_path, site_0_5_23):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("0.5.4", "0.5.9", "0.5.23"):
        os.symlink(sglang_src.wheel_path(version), str(wheels / os.path.basename(sglang_src.wheel_path(version))))
    python = _venv(tmp_path, site_0_5_23)
    result = run(python=python, args=SERVER_ARGS, method="ast", environment_names=["SGLANG_ENABLE_SPEC_V2"],
                 environment_compare=[str(wheels)])
    assert result["failed"] and result["environment_read_by"] == {"SGLANG_ENABLE_SPEC_V2": ["0.5.9"]}


def test_module_passes_spec_v2_with_0_5_9(run, tmp_path, site_0_5_9):
    python = _venv(tmp_path, site_0_5_9)
    result = run(python=python, args={"model-path": "/m", "tp-size": 8}, method="ast",
                 environment_names=["SGLANG_ENABLE_SPEC_V2"])
    assert not result.get("failed"), result["msg"]
    assert result["environment_checked"] == ["SGLANG_ENABLE_SPEC_V2"] and result["environment_unread"] == []


def test_other_families_only_warn(run, warnings, tmp_path, site_0_5_23):
    python = _venv(tmp_path, site_0_5_23)
    result = run(python=python, args=SERVER_ARGS, method="ast",
                 environment_names=["NCCL_CUMEM_ENABLE", "NCCL_NO_SUCH_KNOB", "TORCH_NO_SUCH_KNOB"])
    assert not result.get("failed"), result["msg"]
    assert result["environment_unread"] == ["NCCL_NO_SUCH_KNOB", "TORCH_NO_SUCH_KNOB"]
    assert any("NCCL_NO_SUCH_KNOB" in w and "0.5.23" in w for w in warnings)
    assert not any("NCCL_CUMEM_ENABLE" in w for w in warnings)


def test_a_close_spelling_is_suggested(run, tmp_path, site_0_5_23):
    python = _venv(tmp_path, site_0_5_23)
    result = run(python=python, args=SERVER_ARGS, method="ast", environment_names=["SGLANG_ENABLE_JIT_DEEPGEM"])
    assert result["failed"] and "did you mean SGLANG_ENABLE_JIT_DEEPGEMM" in result["msg"]


def test_the_kept_verdict_is_keyed_on_the_environment_names(run, warnings, tmp_path, site_0_5_23):
    python = _venv(tmp_path, site_0_5_23)
    cache = tmp_path / "run"
    cache.mkdir(mode=0o700)
    first = run(python=python, args=SERVER_ARGS, method="ast", cache_dir=str(cache),
                environment_names=["SGLANG_HEALTH_CHECK_TIMEOUT", "NCCL_NO_SUCH_KNOB"])
    assert not first.get("failed"), first["msg"]
    again = run(python=python, args=SERVER_ARGS, method="ast", cache_dir=str(cache),
                environment_names=["NCCL_NO_SUCH_KNOB", "SGLANG_HEALTH_CHECK_TIMEOUT"])
    assert again["cached"] is True
    assert again["environment_unread"] == ["NCCL_NO_SUCH_KNOB"]
    assert len([w for w in warnings if "NCCL_NO_SUCH_KNOB" in w]) == 2  # the kept verdict warns again
    other = run(python=python, args=SERVER_ARGS, method="ast", cache_dir=str(cache),
                environment_names=["SGLANG_ENABLE_SPEC_V2"])
    assert other["failed"] and other["cache_miss"] == "environment names changed"


def test_the_kept_verdict_is_not_used_when_a_file_that_read_a_name_changed(run, tmp_path, site_0_5_23):
    site = tmp_path / "site"
    shutil.copytree(str(site_0_5_23), str(site), symlinks=True)
    python = _venv(tmp_path, site)
    cache = tmp_path / "run"
    cache.mkdir(mode=0o700)
    names = ["SGLANG_HEALTH_CHECK_TIMEOUT"]
    first = run(python=python, args=SERVER_ARGS, method="ast", cache_dir=str(cache), environment_names=names)
    assert not first.get("failed"), first["msg"]
    reader = sglang_envs.installed_reads(str(site / "sglang"), names).where["SGLANG_HEALTH_CHECK_TIMEOUT"]
    with open(str(site / reader), "a") as f:
        f.write("\n# changed\n")
    again = run(python=python, args=SERVER_ARGS, method="ast", cache_dir=str(cache), environment_names=names)
    assert again["cached"] is False and again["cache_miss"] == "%s changed" % reader


def _other_sglang(tmp_path, reads):
    """An sglang package dir of version 0.5.99 (dist-info beside it) whose environ.py reads ``reads``."""
    site = tmp_path / "other-site"
    srt = site / "sglang" / "srt"
    srt.mkdir(parents=True)
    (srt / "environ.py").write_text("import os\n" + "".join("os.environ.get(%r)\n" % n for n in reads))
    dist = site / "sglang-0.5.99.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.99\n\n")
    return str(site / "sglang")


def test_the_kept_verdict_warns_as_a_fresh_check_and_is_not_keyed_on_environment_compare(run, warnings, tmp_path,
                                                                                          site_0_5_23):
    python = _venv(tmp_path, site_0_5_23)
    cache = tmp_path / "run"
    cache.mkdir(mode=0o700)
    other = _other_sglang(tmp_path, ["NCCL_NO_SUCH_KNOB", "SGLANG_ONLY_IN_0_5_99"])
    names = ["SGLANG_HEALTH_CHECK_TIMEOUT", "NCCL_NO_SUCH_KNOB"]
    first = run(python=python, args=SERVER_ARGS, method="ast", cache_dir=str(cache), environment_names=names,
                environment_compare=[other])
    assert not first.get("failed"), first["msg"]
    assert first["cached"] is False
    again = run(python=python, args=SERVER_ARGS, method="ast", cache_dir=str(cache), environment_names=names,
                environment_compare=[other])
    assert again["cached"] is True
    # environment_compare only words a failure (never kept): another list uses the same kept verdict.
    other_compare = run(python=python, args=SERVER_ARGS, method="ast", cache_dir=str(cache), environment_names=names,
                        environment_compare=[])
    assert other_compare["cached"] is True, other_compare.get("cache_miss")
    said = [w for w in warnings if "NCCL_NO_SUCH_KNOB" in w]
    assert len(said) == 3 and said[0] == said[1] == said[2], said
    assert "read by" not in said[0]
    # A failure still names the versions that read the variable.
    failed = run(python=python, args=SERVER_ARGS, method="ast", cache_dir=str(cache),
                 environment_names=["SGLANG_ONLY_IN_0_5_99"], environment_compare=[other])
    assert failed["failed"] and "SGLANG_ONLY_IN_0_5_99 (read by 0.5.99, not by 0.5.23)" in failed["msg"]
