"""library/sglang_info.py's probes: model dirs (the server's preflight) and whether an installation is in place
(requirements, service account, paths), which lets the install role skip its converge tasks on a no-op re-run.
Pure file-system checks on tmp dirs; no process is started."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "module_utils"))
import ansible.module_utils  # noqa: E402 - the sys.path set-up above comes first
import sglang_paths  # noqa: E402 - module_utils/sglang_paths.py, importable once sys.path has module_utils/

sys.modules.setdefault("ansible.module_utils.sglang_paths", sglang_paths)
_spec = importlib.util.spec_from_file_location("sglang_info_probes", os.path.join(REPO, "library", "sglang_info.py"))
si = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(si)


def test_model_dir_states_name_what_is_wrong(tmp_path):
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "config.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("")
    states = {name: si.model_dir_state(str(tmp_path / name)) for name in ("ok", "empty", "file", "gone")}
    assert {k: v["state"] for k, v in states.items()} == {
        "ok": "ok", "empty": "no_config_json", "file": "not_a_directory", "gone": "missing"}
    assert states["empty"]["config_json"] == str(tmp_path / "empty" / "config.json")


@pytest.mark.parametrize("req, want", [
    ("sglang==0.5.23", ("sglang", "==0.5.23")),
    ("sglang[all] == 0.5.23", ("sglang", "==0.5.23")),
    ("sglang (==0.5.23)", ("sglang", "==0.5.23")),
    ("sglang===0.5.23", ("sglang", "===0.5.23")),
    ("sglang==0.5.*", ("sglang", "==0.5.*")),
    ("flashinfer-python", ("flashinfer-python", None)),
    ("sgl-kernel @ file:///w/sgl_kernel-0.3.9-cp310-abi3-manylinux2014_x86_64.whl", ("sgl-kernel", "==0.3.9")),
    ("sgl_kernel[x] @ https://h.invalid/p/sgl_kernel-0.3.9-cp310-abi3-linux_x86_64.whl#sha256=00",
     ("sgl_kernel", "==0.3.9")),
    ("torch @ https://h.invalid/torch-2.8.0%2Bcu128-cp311-cp311-linux_x86_64.whl", ("torch", "==2.8.0+cu128")),
    ("/w/flashinfer_python-0.6.1-1-py3-none-any.whl", ("flashinfer_python", "==0.6.1")),
    ("https://h.invalid/flashinfer_python-0.6.1-py3-none-any.whl", ("flashinfer_python", "==0.6.1")),
])
def test_requirement_forms(req, want):
    assert si.requirement_want(req) == want


@pytest.mark.parametrize("req", [
    "torch>=2.4",
    "sglang==0.5.23,!=0.5.22",
    "sglang==0.5.23; python_version >= '3.10'",
    "git+https://example.invalid/x.git",
    "sglang @ git+https://example.invalid/sglang.git@v0.5.23",
    "sglang @ file:///src/sglang",
    "sglang @ https://h.invalid/sglang-0.5.23.tar.gz",
    "other @ file:///w/sgl_kernel-0.3.9-cp310-abi3-linux_x86_64.whl",
    "/w/not-a-wheel.whl",
])
def test_requirements_only_pip_can_decide(req):
    assert si.requirement_want(req) is None


@pytest.mark.parametrize("spec, have, met", [
    ("==1.0", "1.0.0", True),
    ("==1.0.0", "1", True),
    ("==1.0rc1", "1.0.0RC1", True),
    ("==2.8.0+cu128", "2.8.0+cu128", True),
    ("==2.8.0", "2.8.0+cu128", False),
    ("==1.0+cu12.1", "1.0+cu121", False),
    ("==1.0", "1.0.post1", False),
    ("==0.5.*", "0.5.23", True),
    ("==0.5.*", "0.50.1", False),
    ("==0.5.*", "0.5", True),
    ("===0.5.23", "0.5.23", True),
    ("===0.5.23", "0.5.23.0", False),
    ("==2024-nightly", "2024-nightly", True),
])
def test_versions_compare_as_pep_440_says(spec, have, met):
    assert si.version_matches(spec, have) is met


def _dist(site, name, version):
    d = site / ("%s-%s.dist-info" % (name.replace("-", "_"), version))
    d.mkdir(parents=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: %s\n\n" % (name, version))


def test_requirement_drift_compares_the_installed_version(tmp_path):
    site = tmp_path / "site-packages"
    _dist(site, "sglang", "0.5.20")
    _dist(site, "sgl-kernel", "0.3.9")
    dirs = [str(site)]
    assert si.requirement_drift("sglang==0.5.20", dirs) is None
    assert si.requirement_drift("sglang==0.5.23", dirs) == "sglang==0.5.23: sglang 0.5.20 is installed"
    assert si.requirement_drift("sgl-kernel @ file:///w/sgl_kernel-0.3.9-py3-none-any.whl", dirs) is None
    assert si.requirement_drift("sgl-kernel @ file:///w/sgl_kernel-0.4.0-py3-none-any.whl", dirs)
    assert si.requirement_drift("flashinfer-python", dirs) == "flashinfer-python: not installed"
    assert "can be checked without pip" in si.requirement_drift("torch>=2", dirs)


def test_an_egg_info_counts_and_a_dist_info_wins(tmp_path):
    site = tmp_path / "site-packages"
    egg = site / "legacy_pkg-2.0-py3.11.egg-info"
    egg.mkdir(parents=True)
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.2\nName: legacy-pkg\nVersion: 2.0\n\n")
    (site / "single_file-1.1-py3.11.egg-info").write_text("Metadata-Version: 1.1\nName: single-file\nVersion: 1.1\n")
    assert sglang_paths.find_distribution(str(site), "legacy-pkg") == ("2.0", str(egg))
    assert si.requirement_drift("single-file==1.1", [str(site)]) is None
    _dist(site, "legacy-pkg", "3.0")
    assert sglang_paths.find_distribution(str(site), "legacy_pkg")[0] == "3.0"


def test_path_drift_sees_mode_owner_and_link(tmp_path):
    d = tmp_path / "d"
    d.mkdir(mode=0o700)
    os.chmod(d, 0o700)
    me = __import__("pwd").getpwuid(os.getuid()).pw_name
    assert si.path_drift({"path": str(d), "owner": me, "mode": "0700"}) == []
    assert si.path_drift({"path": str(d), "owner": me, "mode": "0755"}) == ["%s: mode 0700, want 0755" % d]
    assert si.path_drift({"path": str(tmp_path / "x")}) == ["%s: does not exist" % (tmp_path / "x")]
    link = tmp_path / "venv"
    link.symlink_to(str(d))
    assert si.path_drift({"path": str(link), "state": "link", "src": str(d)}) == []
    assert si.path_drift({"path": str(link), "state": "link", "src": "/elsewhere"})


def test_user_drift(tmp_path):
    root = __import__("pwd").getpwuid(0)
    assert si.user_drift({"name": root.pw_name, "home": root.pw_dir, "shell": root.pw_shell}) == []
    assert si.user_drift({"name": root.pw_name, "shell": "/nonexistent/sh"})
    assert si.user_drift({"name": "no-such-user-eagle-deploy"}) == ["user no-such-user-eagle-deploy does not exist"]


def test_site_dirs_drift_reads_the_pth_file_of_the_venv(tmp_path):
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    host = str(tmp_path / "torch-site")
    assert si.site_dirs_drift([str(site)], [host]) == ["%s: does not exist" % (site / si.SITE_DIRS_PTH)]
    assert si.site_dirs_drift([str(site)], []) == []
    (site / si.SITE_DIRS_PTH).write_text(host + "\n")
    assert si.site_dirs_drift([str(site)], [host]) == []
    assert si.site_dirs_drift([str(site)], []) == ["%s: lists %s, want []" % (site / si.SITE_DIRS_PTH, [host])]
    assert si.site_dirs_drift([], [host]) == ["the virtualenv has no site-packages for %s" % si.SITE_DIRS_PTH]


def test_requirements_installed_in_site_dirs_count_as_installed(tmp_path):
    site = tmp_path / "venv-site"
    host = tmp_path / "host-site"
    _dist(site, "transformers", "5.12.1")
    _dist(host, "typing-extensions", "4.16.0")
    _dist(host, "transformers", "5.17.0")
    (site / si.SITE_DIRS_PTH).write_text(str(host) + "\n")
    params = {"requirements": ["typing-extensions==4.16.0", "transformers==5.12.1"], "user": None, "paths": [],
              "site_dirs": [str(host)]}
    assert si.SGLangInfo(params, runner=None).drift([str(site)]) == []
    # Without site_dirs the host's packages are not looked at: typing-extensions is missing from the venv.
    params["site_dirs"] = None
    assert si.SGLangInfo(params, runner=None).drift([str(site)]) == ["typing-extensions==4.16.0: not installed"]
