"""sglang_args_check's kept verdict (cache_dir, module_utils/sglang_argcheck_cache.py), without a process: the probe that
imports SGLang is the injected runner (`SGLangArgsChecker(module, runner=...)`), which answers as PROBE_SCRIPT does,
with what it read; the `ast` method reads the real 0.5.23 / 0.5.17 sources in a fake venv. The real probe (its
audit hook, sys.modules, the traceback of a failed import) and the real wheel edited under a kept pass are in
tests/integration/test_sglang_args_cache_processes.py.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from ansible.module_utils import basic, sglang_argcheck_cache
from ansible.module_utils.testing import patch_module_args

from module_harness import FailJson
from module_harness import exit_json as _exit_json
from module_harness import fail_json as _fail_json
from test_sglang_args_check import (SERVER_ARGS, _config, _venv, sa, sac,  # noqa: F401 - fixtures too
                                    sglang_0_5_17_root, sglang_root)

CACHE = "sglang.argcheck.json"


class Layout(object):
    """A host as the module sees it: a venv with SGLang's sources, a standard library the probe imports, a shared
    object it maps, a model config it reads, the trusted run dir."""

    def __init__(self, tmp_path, root):
        self.python, site = _venv(tmp_path, root)
        self.site = str(site)
        self.pkg = os.path.join(self.site, "sglang")
        with open(os.path.join(self.pkg, "__init__.py"), "w") as f:
            f.write("__version__ = '0.5.23'\n")
        self.lib = str(tmp_path / "lib")
        os.makedirs(os.path.join(self.lib, "__pycache__"))
        self.argparse = os.path.join(self.lib, "argparse.py")
        os.makedirs(str(tmp_path / "so"))
        self.libso = str(tmp_path / "so" / "libfake.so")  # in a directory the probe did not list
        for path in (self.argparse, self.libso):
            with open(path, "w") as f:
                f.write("# stands in for %s\n" % os.path.basename(path))
        self.model = str(tmp_path / "model")
        os.makedirs(self.model)
        self.model_config = os.path.join(self.model, "config.json")
        with open(self.model_config, "w") as f:
            f.write('{"architectures": ["DeepseekV3ForCausalLM"]}\n')
        self.run_dir = str(tmp_path / "run")
        os.mkdir(self.run_dir, 0o755)
        self.cache = os.path.join(self.run_dir, CACHE)
        self.server_args = os.path.join(self.pkg, "srt", "server_args.py")
        self.tmp_path = tmp_path


class FakeProbe(object):
    """The runner: answers PROBE_SCRIPT's request as the real probe would, with the files it read."""

    def __init__(self, layout, options):
        self.layout = layout
        self.options = sorted(options)
        self.calls = 0
        self.record = True

    def __call__(self, cmd, environ_update=None, **kwargs):
        assert cmd[-5:-2] == [self.layout.python, "-c", sa.PROBE_SCRIPT], cmd
        self.calls += 1
        req_path, out_path = cmd[-2], cmd[-1]
        with open(req_path) as f:
            req = json.load(f)
        with open(req["config_path"]) as f:
            config = json.load(f)
        out = {"options": self.options}
        if not isinstance(config.get("tp-size", 1), int):
            out["parser_error"] = "argument --tp-size: invalid int value: %r" % config["tp-size"]
        else:
            out["parsed"] = True
        lay = self.layout
        if self.record:
            out["record"] = {
                "code": [os.path.join(lay.pkg, "__init__.py"), lay.server_args, lay.argparse, req_path],
                "opened": [lay.model_config, req_path, req["config_path"], "/proc/self/status",
                           os.path.join(lay.lib, "__pycache__", "argparse.cpython-311.pyc")],
                "mapped": [lay.libso, "/dev/zero"],
                "listed": [lay.site, lay.lib, "/proc/self"],
                "package_dir": lay.pkg,
            }
        with open(out_path, "w") as f:
            json.dump(out, f)
        return 0, "", ""


@pytest.fixture
def lay(tmp_path, sglang_root):  # noqa: F811 - the fixture of test_sglang_args_check, used by name
    return Layout(tmp_path, sglang_root)


@pytest.fixture
def probe(lay):
    return FakeProbe(lay, sa.option_strings_from_tree(lay.pkg))


@pytest.fixture
def check(monkeypatch, tmp_path, lay, probe):
    """One run of the module with the fake probe; the result (a failure's too) with its warnings."""
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    remote_tmp = tmp_path / "remote_tmp"
    remote_tmp.mkdir()
    _, config_spec = _config(tmp_path)

    def _check(check_mode=False, **args):
        args = dict(dict(python=lay.python, args=dict(SERVER_ARGS), secret_args=["api-key"], config_refused="argv",
                         cache_dir=lay.run_dir, model_dirs=[lay.model], config_file=config_spec), **args)
        args = dict((k, v) for k, v in args.items() if v is not None)
        with patch_module_args(dict(args, _ansible_check_mode=check_mode, _ansible_remote_tmp=str(remote_tmp))):
            module = sac.new_module()
        warnings = []
        module.warn = warnings.append
        try:
            result = sa.SGLangArgsChecker(module, runner=probe).run()
        except FailJson as exc:
            result = exc.args[0]
        result["warnings"] = warnings
        return result

    _check.config_spec = config_spec
    return _check


def entry(lay):
    with open(lay.cache) as f:
        return json.load(f)


def test_a_pass_is_kept_root_only_and_the_next_run_uses_it_without_the_probe(check, lay, probe):
    first = check()
    assert not first.get("failed"), first["msg"]
    assert (first["cached"], first["cache_miss"], probe.calls) == (False, "no cache", 1)
    assert (first["method"], first["values_checked"]) == ("sglang_parser", True)
    st = os.stat(lay.cache)
    assert (st.st_mode & 0o777, st.st_uid) == (0o600, os.geteuid())
    assert not os.path.exists(lay.cache + ".tmp")

    again = check()
    assert probe.calls == 1, "a hit must not run the probe (it imports SGLang)"
    assert again["cached"] is True and "cache_miss" not in again
    for k in ("method", "option_count", "values_checked", "checked_args", "config_refused_args", "config_argv",
              "sglang_version", "sglang_root", "installed", "eagle_worker_v2", "config_file_in_place"):
        assert again[k] == first[k], k
    assert again["msg"] == first["msg"] + "; verdict kept from an earlier check of the same inputs"
    assert again["warnings"] == [] and again["changed"] is False


def test_the_entry_holds_what_the_check_read_and_never_the_probes_own_files(check, lay):
    assert not check().get("failed")
    e = entry(lay)
    hashed, dirs = e["files"]["sha256"], e["files"]["dirs"]
    by_id = dict((os.path.join(d, n), v) for d, names in e["files"]["stat"].items() for n, v in names.items())
    # sglang files by content: the probe's imported modules and the sources the ast/config rule read
    for path in (os.path.join(lay.pkg, "__init__.py"), lay.server_args, lay.model_config):
        assert hashed[path] == sglang_argcheck_cache.content(path), path
    assert hashed[os.path.join(lay.pkg, "srt", "server_args_config_parser.py")] == "absent"
    assert any(p.startswith(os.path.join(lay.pkg, "srt", "arg_groups", "fields")) for p in hashed)
    # everything else the probe imported or mapped by identity, the directories it searched likewise
    assert set(by_id) == {lay.argparse, lay.libso}
    assert {lay.site, lay.lib, os.path.join(lay.pkg, "srt", "arg_groups", "fields")} <= set(dirs)
    every = set(hashed) | set(by_id) | set(dirs)
    assert not [p for p in every if p.startswith(("/proc", "/dev")) or p.endswith(".pyc")
                or "sglang_args_" in os.path.basename(p) or os.path.basename(p) == "server.yaml"]
    # never a secret: the config file's digest only as a digest of it
    assert check.config_spec["sha256"] not in json.dumps(e)


def _touch(path):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))


def _rewrite(path, old, new):
    with open(path) as f:
        text = f.read()
    assert old in text
    with open(path, "w") as f:
        f.write(text.replace(old, new))


def _same_bytes_again(path):
    """The same content written again, as an upgrade that reinstalls a file does (a new inode)."""
    shutil.copyfile(path, path + ".new")
    os.replace(path + ".new", path)


def _new_file(path):
    with open(path, "w"):
        pass


# what changes -> (how: a function of (layout, monkeypatch, the base config_file option) that changes it and returns
# the module options to add, and the cache_miss that names it)
CHANGES = {
    "interpreter": (lambda lay, mp, spec: _touch(lay.python), "interpreter changed"),
    "pyvenv.cfg": (lambda lay, mp, spec: _rewrite(os.path.join(os.path.dirname(os.path.dirname(lay.python)),
                                                               "pyvenv.cfg"),
                                                  "version = 3.11.2",
                                                  "version = 3.11.2\ninclude-system-site-packages = true"),
                   "interpreter changed"),
    "sglang version": (lambda lay, mp, spec: _rewrite(os.path.join(lay.site, "sglang-0.5.23.dist-info", "METADATA"),
                                                      "Version: 0.5.23", "Version: 0.5.24"), "sglang version changed"),
    "args": (lambda lay, mp, spec: {"args": dict(SERVER_ARGS, port=30001)}, "args changed"),
    "extra_args": (lambda lay, mp, spec: {"extra_args": {"enable-metrics": True}}, "extra_args changed"),
    "secret_args": (lambda lay, mp, spec: {"secret_args": []}, "secret_args changed"),
    "method": (lambda lay, mp, spec: {"method": "sglang_parser"}, "method changed"),
    "config_refused": (lambda lay, mp, spec: {"config_refused": "fail"}, "config_refused changed"),
    "config file content": (lambda lay, mp, spec: {"config_file": dict(spec, sha256="1" * 64)},
                            "config file content changed (config_file.sha256)"),
    "sglang_root": (lambda lay, mp, spec: {"sglang_root": lay.pkg}, "sglang_root changed"),
    "timeout": (lambda lay, mp, spec: {"timeout": 120}, "timeout changed"),
    "environment": (lambda lay, mp, spec: mp.setenv("CUDA_VISIBLE_DEVICES", "1"),
                    "environment changed: CUDA_VISIBLE_DEVICES"),
    "checker": (lambda lay, mp, spec: mp.setattr(sa, "checker_digest", lambda: "0" * 64), "the checker changed"),
    "server_args.py": (lambda lay, mp, spec: _rewrite(lay.server_args, '"--sampling-backend",',
                                                      '"--sampling-backend",  # edited'),
                       "sglang/srt/server_args.py changed"),
    "an imported sglang module": (lambda lay, mp, spec: _rewrite(os.path.join(lay.pkg, "__init__.py"), "0.5.23",
                                                                 "0.5.23+local"),
                                  "sglang/__init__.py changed"),
    "an imported module elsewhere, reinstalled": (lambda lay, mp, spec: _same_bytes_again(lay.argparse),
                                                  "lib/argparse.py changed"),  # a new inode and ctime
    "a module added where imports are searched": (lambda lay, mp, spec: _new_file(os.path.join(lay.lib, "zlib.py")),
                                                  "/lib changed"),
    "an imported module elsewhere, its mtime set": (lambda lay, mp, spec: _touch(lay.argparse),
                                                    "lib/argparse.py changed"),
    "a mapped shared object gone": (lambda lay, mp, spec: os.unlink(lay.libso), "so/libfake.so is gone"),
    "a file the probe read": (lambda lay, mp, spec: _rewrite(lay.model_config, "DeepseekV3", "KimiK3"),
                              "model/config.json changed"),
    "a package installed where imports are searched": (
        lambda lay, mp, spec: os.mkdir(os.path.join(lay.site, "torch")), "site-packages changed"),
    "a new arg_groups field file": (
        lambda lay, mp, spec: _new_file(os.path.join(lay.pkg, "srt", "arg_groups", "fields", "new.py")),
        "directory sglang/srt/arg_groups/fields changed"),
}


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_each_input_of_the_verdict_changing_checks_again_and_keeps_the_new_pass(check, lay, probe, monkeypatch, what):
    assert not check().get("failed")
    assert probe.calls == 1
    change, words = CHANGES[what]
    extra = change(lay, monkeypatch, check.config_spec) or {}
    fresh = check(**extra)
    assert not fresh.get("failed"), fresh["msg"]
    assert fresh["cached"] is False and words in fresh["cache_miss"], fresh["cache_miss"]
    assert probe.calls == 2, "a miss runs the check fresh"
    kept = check(**extra)
    assert kept["cached"] is True and probe.calls == 2, kept.get("cache_miss")


def test_bytecode_written_where_imports_are_searched_keeps_the_verdict(check, lay, probe):
    """Another Python importing from the same directories writes ``__pycache__`` there (a directory's mtime moves):
    what an import finds is the same, and the verdict is used."""
    assert not check().get("failed")
    dirs = entry(lay)["files"]["dirs"]
    for d in (lay.site, lay.lib, os.path.join(lay.pkg, "srt", "arg_groups", "fields")):
        assert d in dirs
        cache = os.path.join(d, "__pycache__")
        if os.path.isdir(cache):
            shutil.rmtree(cache)
        os.makedirs(cache)
        _new_file(os.path.join(cache, "mod.cpython-311.pyc"))
        _touch(d)
    again = check()
    assert again["cached"] is True and probe.calls == 1, again.get("cache_miss")


def test_a_searched_directory_made_writable_by_others_checks_again(check, lay, probe):
    assert not check().get("failed")
    os.chmod(lay.lib, 0o777)
    again = check()
    assert again["cached"] is False and "lib changed" in again["cache_miss"] and probe.calls == 2


def test_the_ast_method_keeps_its_pass_without_the_environment_and_reads_no_source_on_a_hit(check, lay, probe,
                                                                                           monkeypatch):
    first = check(method="ast")
    assert not first.get("failed") and first["method"] == "ast" and probe.calls == 0
    assert entry(lay)["key"]["environment"] == {}
    monkeypatch.setenv("SGLANG_SOMETHING", "1")  # no probe process: its environment is not an input

    def never(*args, **kwargs):
        raise AssertionError("a hit reads no SGLang source")

    for name in ("option_strings_from_tree", "config_refused_dests", "option_kinds"):
        monkeypatch.setattr(sa, name, never)
    again = check(method="ast")
    assert again["cached"] is True
    assert (again["option_count"], again["checked_args"]) == (first["option_count"], first["checked_args"])


def test_a_kept_pass_never_lets_through_what_the_edited_parser_refuses(check, lay):
    """server_args.py loses the add_argument of an option the arguments use: the next run refuses it."""
    args = dict(SERVER_ARGS, **{"sampling-backend": "pytorch"})
    assert check(method="ast", args=args)["cached"] is False
    assert check(method="ast", args=args)["cached"] is True
    with open(lay.server_args) as f:
        text = f.read()
    start = text.index('        parser.add_argument(\n            "--sampling-backend",')
    end = text.index("        parser.add_argument(", start + 1)
    with open(lay.server_args, "w") as f:
        f.write(text[:start] + text[end:])
    refused = check(method="ast", args=args)
    assert refused["failed"] and refused["unknown_args"] == ["--sampling-backend"]
    assert (refused["cached"], refused["cache_miss"]) == (False, "sglang/srt/server_args.py changed")
    assert check(method="ast", args=args)["failed"], "a refusal is not kept as a pass"


def test_config_argv_is_kept_with_the_pass(tmp_path, monkeypatch, sglang_0_5_17_root):  # noqa: F811 - fixture by name
    """0.5.17 refuses disable-cuda-graph in its --config file: the kept pass returns the same config_argv."""
    lay = Layout(tmp_path, sglang_0_5_17_root)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    args = dict(python=lay.python, args={"model-path": "/m", "tp-size": 1}, extra_args={"disable-cuda-graph": True},
                method="ast", config_refused="argv", cache_dir=lay.run_dir, _ansible_remote_tmp=str(tmp_path))

    def run():
        with patch_module_args(args):
            return sa.SGLangArgsChecker(sac.new_module(), runner=None).run()

    first = run()
    assert (first["config_refused_args"], first["config_argv"]) == (["disable-cuda-graph"], ["--disable-cuda-graph"])
    assert os.path.join(lay.pkg, "srt", "server_args_config_parser.py") in entry(lay)["files"]["sha256"]
    for name in ("option_strings_from_tree", "config_refused_dests", "option_kinds"):
        monkeypatch.setattr(sa, name, None)  # a hit calls none of them
    again = run()
    assert again["cached"] is True
    assert (again["config_refused_args"], again["config_argv"]) == (["disable-cuda-graph"], ["--disable-cuda-graph"])


def test_a_hit_still_looks_at_the_model_dirs_and_the_config_file_fresh(check, lay, tmp_path):
    model = tmp_path / "draft"
    first = check(model_dirs=[str(model)])
    assert first["model_dirs"][0]["state"] == "missing" and first["config_file_in_place"] is True
    model.mkdir()
    (model / "config.json").write_text("{}")
    os.chmod(check.config_spec["path"], 0o644)
    again = check(model_dirs=[str(model)])
    assert again["cached"] is True
    assert again["model_dirs"][0]["state"] == "ok" and again["config_file_in_place"] is False


# ---------------------------------------------------------------- a cache that could have been written by another
def _not_used(result, probe, calls):
    assert not result.get("failed"), result["msg"]
    assert (result["cached"], result["cache_miss"]) == (False, "cache not trusted")
    assert probe.calls == calls, "the check ran fresh"
    assert [w for w in result["warnings"] if "was not used" in w], result["warnings"]


@pytest.mark.parametrize("how", ["mode 0666", "another owner", "a symlink"])
def test_a_cache_file_someone_else_could_have_written_is_not_used_and_a_fresh_pass_replaces_it(check, lay, probe,
                                                                                              how):
    assert not check().get("failed")
    if how == "mode 0666":
        os.chmod(lay.cache, 0o666)
    elif how == "another owner":
        os.chown(lay.cache, 65534, 65534)
    else:
        os.rename(lay.cache, os.path.join(lay.run_dir, "elsewhere.json"))
        os.symlink("elsewhere.json", lay.cache)
    _not_used(check(), probe, 2)
    st = os.lstat(lay.cache)
    assert (st.st_mode & 0o7777, st.st_uid) == (0o600, os.geteuid()) and not os.path.islink(lay.cache)
    assert check()["cached"] is True and probe.calls == 2


def test_a_cache_dir_others_can_write_is_neither_read_nor_written(check, lay, probe):
    assert not check().get("failed")
    before = os.stat(lay.cache)
    os.chmod(lay.run_dir, 0o777)
    result = check()
    _not_used(result, probe, 2)
    assert len(result["warnings"]) == 1
    after = os.stat(lay.cache)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    os.chmod(lay.run_dir, 0o755)
    assert check()["cached"] is True


def test_a_cache_dir_reached_through_a_symlink_is_not_trusted(check, lay, probe, tmp_path):
    link = tmp_path / "run-link"
    link.symlink_to(lay.run_dir)
    _not_used(check(cache_dir=str(link)), probe, 1)
    assert not os.path.exists(lay.cache)


def _files(e, lay, digest):
    return dict(e["files"], sha256=dict(e["files"]["sha256"], **{lay.server_args: digest}))


@pytest.mark.parametrize("tamper, words", [
    (lambda e, lay: "{not json", "cache unreadable (not JSON)"),
    (lambda e, lay: dict(e, verdict=dict(e["verdict"], passed=False)), "cache unreadable"),
    (lambda e, lay: dict(e, verdict=dict(e["verdict"], option_count="561")), "cache unreadable"),
    (lambda e, lay: dict(e, format=0), "cache unreadable"),
    (lambda e, lay: dict(e, files=_files(e, lay, "0" * 64)), "sglang/srt/server_args.py changed"),
    (lambda e, lay: dict(e, key=dict(e["key"], args="0" * 64)), "args changed"),
], ids=["not JSON", "not a pass", "a wrong type", "another format", "a file's hash", "the key"])
def test_a_tampered_entry_is_not_used(check, lay, probe, tamper, words):
    assert not check().get("failed")
    bad = tamper(entry(lay), lay)
    with open(lay.cache, "w") as f:
        f.write(bad if isinstance(bad, str) else json.dumps(bad))
    result = check()
    assert result["cached"] is False and words in result["cache_miss"], result["cache_miss"]
    assert probe.calls == 2 and not result.get("failed")
    assert check()["cached"] is True, "the fresh pass replaced it"


# ---------------------------------------------------------------- a refusal is never kept
def test_a_refusal_is_never_kept(check, lay, probe):
    bad = dict(SERVER_ARGS, **{"tp-size": "eight"})
    refused = check(args=bad)
    assert refused["failed"] and "invalid int value" in refused["parser_error"]
    assert not os.path.exists(lay.cache)
    assert check(args=bad)["failed"] and probe.calls == 2


def test_a_refusal_leaves_the_kept_pass_of_other_arguments_alone_and_is_checked_every_time(check, lay, probe):
    assert not check().get("failed")
    with open(lay.cache, "rb") as f:
        kept = f.read()
    bad = dict(SERVER_ARGS, **{"tp-size": "eight"})
    for calls in (2, 3):
        refused = check(args=bad)
        assert refused["failed"] and refused["cache_miss"] == "args changed" and probe.calls == calls
    with open(lay.cache, "rb") as f:
        assert f.read() == kept
    unknown = check(method="ast", args={"zz-frobnicate": 1})
    assert unknown["failed"] and unknown["unknown_args"] == ["--zz-frobnicate"]
    assert check()["cached"] is True


# ---------------------------------------------------------------- when nothing is kept
def test_check_mode_uses_a_kept_pass_but_never_writes_one(check, lay, probe):
    result = check(check_mode=True)
    assert not result.get("failed") and result["cache_miss"] == "no cache"
    assert not os.path.exists(lay.cache)
    assert check()["cached"] is False
    hit = check(check_mode=True)
    assert hit["cached"] is True and probe.calls == 2


def test_a_run_dir_that_does_not_exist_yet_means_no_cache(check, lay, tmp_path):
    run_dir = tmp_path / "var" / "lib" / "eagle-deploy" / "run"
    result = check(cache_dir=str(run_dir))
    assert not result.get("failed"), result["msg"]
    assert result["cache_miss"] == "no cache dir (%s does not exist)" % run_dir
    assert result["warnings"] == []
    assert not os.path.exists(str(tmp_path / "var"))


def test_without_cache_dir_nothing_is_kept(check, lay, probe):
    for _ in range(2):
        result = check(cache_dir=None)
        assert (result["cached"], result["cache_miss"]) == (False, "no cache_dir")
    assert probe.calls == 2 and os.listdir(lay.run_dir) == []


def test_no_sglang_installed_is_no_cache(check, tmp_path):
    result = check(python=str(tmp_path / "none" / "bin" / "python"), allow_missing=True)
    assert (result["installed"], result["cached"], result["cache_miss"]) == (False, False, "no SGLang installed")


def test_a_probe_that_does_not_say_what_it_read_is_not_kept(check, lay, probe):
    probe.record = False
    result = check()
    assert not result.get("failed")
    assert result["warnings"] == ["the argument check's verdict was not kept: the probe did not say what it read"]
    assert not os.path.exists(lay.cache)


def test_an_entry_too_big_to_be_read_back_is_not_kept(check, lay, monkeypatch):
    monkeypatch.setattr(sglang_argcheck_cache, "MAX_BYTES", 100)
    result = check()
    assert not result.get("failed")
    assert "not kept: the entry is" in result["warnings"][0]
    assert not os.path.exists(lay.cache)


def test_a_name_that_is_not_a_file_name_is_refused(check):
    result = check(name="../x")
    assert result["failed"] and "it names the kept verdict's file" in result["msg"]


def test_two_deployments_keep_their_own_verdicts(check, lay, probe):
    assert check(name="a")["cached"] is False
    assert check(name="b", args=dict(SERVER_ARGS, port=30001))["cached"] is False
    assert check(name="a")["cached"] is True and check(name="b", args=dict(SERVER_ARGS, port=30001))["cached"] is True
    assert sorted(os.listdir(lay.run_dir)) == ["a.argcheck.json", "b.argcheck.json"]


# ---------------------------------------------------------------- the pieces
def test_identity_and_content(tmp_path, monkeypatch):
    path = tmp_path / "f"
    assert sglang_argcheck_cache.identity(str(path)) == "absent" == sglang_argcheck_cache.content(str(path))
    assert sglang_argcheck_cache.identity(str(tmp_path / "f" / "under-a-file")) == "absent"
    path.write_bytes(b"abc")
    ident = sglang_argcheck_cache.identity(str(path))
    assert sglang_argcheck_cache.content(str(path)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    _touch(str(path))
    assert sglang_argcheck_cache.identity(str(path)) != ident
    monkeypatch.setattr(sglang_argcheck_cache, "HASH_LIMIT", 2)
    assert sglang_argcheck_cache.content(str(path)) == "id:" + sglang_argcheck_cache.identity(str(path))
    assert sglang_argcheck_cache.content(str(tmp_path)) == "id:" + sglang_argcheck_cache.identity(str(tmp_path))


def test_the_environment_part_holds_digests_of_the_variables_that_steer_the_probe_only():
    env = {"CUDA_VISIBLE_DEVICES": "0", "SGLANG_X": "a-value", "PYTHONPATH": "/x", "SSH_CONNECTION": "1 2 3 4",
           "PATH": "/usr/bin", "LANG": "C", "HF_TOKEN": "hf_secret", "SGLANG_API_KEY": "sk-secret"}
    part = sglang_argcheck_cache.environment(env)
    assert sorted(part) == ["CUDA_VISIBLE_DEVICES", "PATH", "PYTHONPATH", "SGLANG_X"]
    assert "a-value" not in json.dumps(part)
    assert part["SGLANG_X"] != sglang_argcheck_cache.environment(dict(env, SGLANG_X="b-value"))["SGLANG_X"]


def test_what_the_kernel_makes_up_is_never_recorded():
    for path in ("/proc", "/proc/", "/proc/self/maps", "/sys/devices", "/dev", "/dev/zero", "relative/path",
                 "/tmp/x.so (deleted)"):
        assert sglang_argcheck_cache.volatile(path), path
    for path in ("/usr/lib/python3.11/argparse.py", "/processes", "/devices/x", "/"):
        assert not sglang_argcheck_cache.volatile(path), path


def test_content_of_a_fifo_or_a_device_is_its_identity_and_never_blocks(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    assert sglang_argcheck_cache.content(str(fifo)) == "id:" + sglang_argcheck_cache.identity(str(fifo))
    assert sglang_argcheck_cache.content("/dev/zero") == "id:" + sglang_argcheck_cache.identity("/dev/zero")


def test_the_checker_digest_covers_the_module_and_its_module_utils():
    digest = sa.checker_digest()
    assert digest and len(digest) == 64
    assert sa.checker_digest() == digest
