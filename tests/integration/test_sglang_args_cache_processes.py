"""sglang_args_check's kept verdict on real files and real processes.

The real SGLang 0.5.23 wheel's files (`.cache/sglang-wheels`, tests/unit/sglang_src.py; never downloaded here)
installed into a venv of this machine's Python without their dependencies (no torch: SGLang does not import, the
check reads its sources), the module run as Ansible runs it (tests/integration/ansible_run.py): a pass is kept, the
next run uses it, and once `server_args.py` loses the `add_argument` of an option the arguments use, the next run
refuses (a miss: the file's hash changed), never passing from the kept verdict. And the real probe (its record of
what it imported) on a stand-in `sglang` package that imports, in-process as the unit tests drive the module.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import zipfile

import pytest

import ansible_run
import sglang_src
from ansible.module_utils import basic
from test_sglang_args_check import fake_sglang_python, run, sa, sac  # noqa: F401 - fixtures too

WHEEL = "0.5.23"
# The deployment's arguments; sampling-backend is one of 0.5.23's few add_argument options in server_args.py.
ARGS = {"model-path": "/data/models/Kimi-K2.5-INT4", "tp-size": 8, "speculative-algorithm": "EAGLE3",
        "speculative-eagle-topk": 1, "sampling-backend": "pytorch", "host": "127.0.0.1", "port": 30000}


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory):
    """Every file of the real wheel, as pip would unpack it (sglang/ and its dist-info)."""
    dest = str(tmp_path_factory.mktemp("sglang-%s-wheel" % WHEEL))
    with zipfile.ZipFile(sglang_src.wheel_path(WHEEL)) as wheel:
        wheel.extractall(dest)
    return dest


class Host(object):
    def __init__(self, tmp_path, wheel_files):
        venv = str(tmp_path / "venv")
        subprocess.run([ansible_run.TARGET_PYTHON, "-m", "venv", "--without-pip", venv], check=True, timeout=120,
                       capture_output=True)
        self.python = os.path.join(venv, "bin", "python")
        self.site = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))[0]
        for name in os.listdir(wheel_files):
            # hard links: the module's fixture stays as it came out of the wheel
            shutil.copytree(os.path.join(wheel_files, name), os.path.join(self.site, name), copy_function=os.link)
        self.server_args = os.path.join(self.site, "sglang", "srt", "server_args.py")
        os.unlink(self.server_args)  # a file of its own, edited in place below
        shutil.copy2(os.path.join(wheel_files, "sglang", "srt", "server_args.py"), self.server_args)
        self.run_dir = str(tmp_path / "run")
        os.mkdir(self.run_dir, 0o755)
        self.cache = os.path.join(self.run_dir, "sglang.argcheck.json")

    def check(self, check=False, **args):
        return ansible_run.run_module("sglang_args_check", dict(dict(
            python=self.python, args=ARGS, secret_args=["api-key"], config_refused="argv", cache_dir=self.run_dir),
            **args), check=check)

    def entry(self):
        with open(self.cache) as f:
            return json.load(f)


@pytest.fixture
def host(tmp_path, wheel_files):
    return Host(tmp_path, wheel_files)


def drop_option(path, option):
    """Edit the file in place: its `parser.add_argument("<option>", ...)` call is gone; its mtime is put back, so
    only its content tells."""
    st = os.stat(path)
    with open(path, "r+", encoding="utf-8") as f:
        text = f.read()
        start = text.index('        parser.add_argument(\n            "%s",' % option)
        end = text.index("        parser.add_argument(", start + 1)
        f.seek(0)
        f.write(text[:start] + text[end:])
        f.truncate()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return text


def passed(result, cached, miss=None):
    assert not result.get("failed"), result.get("msg")
    assert result["cached"] is cached, result.get("cache_miss")
    if miss is not None:
        assert result["cache_miss"] == miss


def refused_from_the_edited_file(result):
    assert result.get("failed"), "a kept pass let through what the edited parser refuses"
    assert result["unknown_args"] == ["--sampling-backend"], result["msg"]
    assert result["cached"] is False


def test_a_kept_pass_never_lets_through_an_option_server_args_py_lost(host):
    """The issue's test: the real wheel, its parser edited under a kept pass (method ast)."""
    passed(host.check(check=True, method="ast"), False, "no cache")
    assert not os.path.exists(host.cache), "check mode never writes the cache"
    first = host.check(method="ast")
    passed(first, False, "no cache")
    assert (first["method"], first["sglang_version"], first["option_count"]) == ("ast", WHEEL, 561)
    st = os.stat(host.cache)
    assert (st.st_mode & 0o7777, st.st_uid) == (0o600, 0)
    assert host.server_args in host.entry()["files"]["sha256"]
    again = host.check(method="ast")
    passed(again, True)
    assert again["option_count"] == 561 and again["checked_args"] == first["checked_args"]

    original = drop_option(host.server_args, "--sampling-backend")
    refused = host.check(method="ast")
    refused_from_the_edited_file(refused)
    assert refused["cache_miss"] == "sglang/srt/server_args.py changed"
    assert refused["option_count"] == 560
    refused_from_the_edited_file(host.check(method="ast"))  # a refusal is never kept

    with open(host.server_args, "w", encoding="utf-8") as f:
        f.write(original)
    passed(host.check(method="ast"), True)  # the files the kept pass was computed from, as they were


def test_auto_keeps_its_fallback_until_a_package_appears_or_server_args_py_changes(host):
    """method auto: the real probe imports the real wheel (it fails: no numpy), the check falls back to ast. What the
    probe imported and searched is the key: a package put where it searched checks again."""
    first = host.check(method="auto")
    passed(first, False, "no cache")
    assert first["method"] == "ast" and first["import_error"].startswith("ModuleNotFoundError: ")
    files = host.entry()["files"]
    pkg = os.path.join(host.site, "sglang")
    assert {os.path.join(pkg, "__init__.py"), host.server_args} <= set(files["sha256"])
    assert host.site in files["dirs"]
    assert not [p for p in files["sha256"] if "sglang_args_" in p]  # never the probe's own request and answer
    passed(host.check(method="auto"), True)

    missing = first["import_error"].split("'")[1].split(".")[0]  # numpy
    os.mkdir(os.path.join(host.site, missing))
    with open(os.path.join(host.site, missing, "__init__.py"), "w") as f:
        f.write("raise ImportError('%s stand-in: no build for this machine')\n" % missing)
    again = host.check(method="auto")
    passed(again, False, "directory %s changed" % host.site)
    assert "stand-in" in again["import_error"]
    passed(host.check(method="auto"), True)

    drop_option(host.server_args, "--sampling-backend")
    refused = host.check(method="auto")
    refused_from_the_edited_file(refused)
    assert refused["cache_miss"] == "sglang/srt/server_args.py changed"


@pytest.fixture
def probes(monkeypatch):
    """Counts the module's probe processes (the ones that import SGLang)."""
    seen = []
    real = basic.AnsibleModule.run_command

    def run_command(self, cmd, *args, **kwargs):
        if sa.PROBE_SCRIPT in cmd:
            seen.append(cmd)
        return real(self, cmd, *args, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return seen


def test_the_probe_records_what_it_imported_and_a_kept_pass_stops_when_an_imported_sglang_file_changes(
        run, fake_sglang_python, probes, tmp_path):  # noqa: F811 - fixtures of test_sglang_args_check, by name
    import argparse
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o755)
    site = str(tmp_path / "site")
    args = dict(python=fake_sglang_python, args={"model-path": "/m", "tp-size": 8}, method="sglang_parser",
                cache_dir=str(run_dir))
    first = run(**args)
    passed(first, False, "no cache")
    assert (first["method"], first["values_checked"], len(probes)) == ("sglang_parser", True, 1)
    with open(run_dir / "sglang.argcheck.json") as f:
        files = json.load(f)["files"]
    server_args = os.path.join(site, "sglang", "srt", "server_args.py")
    # the stand-in's modules, imported by the probe, by content
    for path in (os.path.join(site, "sglang", "__init__.py"), os.path.join(site, "sglang", "srt", "__init__.py"),
                 server_args):
        assert files["sha256"][path] != "absent", path
    # the standard library it imported (argparse), by identity; the directories it searched
    by_id = set(os.path.join(d, n) for d, names in files["stat"].items() for n in names)
    assert os.path.abspath(argparse.__file__) in by_id
    assert {site, os.path.join(site, "sglang")} <= set(files["dirs"])
    assert not [p for p in list(files["sha256"]) + list(by_id) if p.startswith("/proc") or "<" in p]

    passed(run(**args), True)
    assert len(probes) == 1, "a hit starts no probe"

    with open(server_args) as f:
        text = f.read()
    with open(server_args, "w") as f:
        f.write(text.replace('        parser.add_argument("--tp-size", type=int, default=1)\n', ""))
    refused = run(**args)
    assert refused["failed"] and refused["unknown_args"] == ["--tp-size"], refused["msg"]
    assert (refused["cached"], refused["cache_miss"]) == (False, "sglang/srt/server_args.py changed")
    assert len(probes) == 2
