"""Unit tests for library/sglang_args_check.py, against the real server options of SGLang releases.

The `ast` method is tested on the sources of real wheels (`.cache/sglang-wheels`, see sglang_src.py).
Only the pure parts run here (no process): every test that lets the module run an interpreter (the
`auto` fallback, the `sglang_parser` method on a small stand-in `sglang` package, the real parser with
SGLANG_FULL_PYTHON) is in tests/integration/test_sglang_args_check_processes.py, which uses the fixtures
defined here.
"""

from __future__ import annotations

import grp
import hashlib
import importlib.util
import json
import os
import pwd
import shutil
import stat
import sys
import textwrap
import zipfile

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_src  # noqa: E402 - test helper next to this file, importable once sys.path has this directory

MODULE_FILE = os.path.join(sglang_src.REPO, "library", "sglang_args_check.py")
_spec = importlib.util.spec_from_file_location("sglang_args_check", MODULE_FILE)
sac = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sac)
# The checker itself: module_utils/sglang_server_args.py (also sglang_info's args_check look).
from ansible.module_utils import sglang_server_args as sa  # noqa: E402 - conftest puts the project's module_utils there

# What roles/sglang_server renders for the Kimi-K2.5 EAGLE-3 deployment.
SERVER_ARGS = {
    "model-path": "/data/models/Kimi-K2.5-INT4",
    "speculative-draft-model-path": "/data/models/Kimi-K2.5-EAGLE3",
    "tp-size": 8,
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
    "mem-fraction-static": 0.85,
    "cuda-graph-max-bs-decode": 64,
    "attention-backend": "trtllm_mla",
    "context-length": 131072,
    "trust-remote-code": True,
    "host": "0.0.0.0",
    "port": 30000,
}


from module_harness import ExitJson, FailJson, module_result  # noqa: E402 - test helper next to this file, importable once sys.path has this directory
from module_harness import exit_json as _exit_json  # noqa: E402 - test helper next to this file, importable once sys.path has this directory
from module_harness import fail_json as _fail_json  # noqa: E402 - test helper next to this file, importable once sys.path has this directory


def _extract_server_sources(version, dest):
    """The files that declare SGLang's server options, out of the real wheel."""
    with zipfile.ZipFile(sglang_src.wheel_path(version)) as wheel:
        for member in wheel.namelist():
            if member == "sglang/srt/server_args.py" or (
                member.startswith("sglang/srt/arg_groups/fields/") and member.endswith(".py")
            ):
                wheel.extract(member, dest)
    return os.path.join(dest, "sglang")


@pytest.fixture(scope="session")
def sglang_root(tmp_path_factory):
    """Installed-like sglang package dir of SGLang 0.5.23 (sources only)."""
    return _extract_server_sources("0.5.23", str(tmp_path_factory.mktemp("sglang-0.5.23")))


@pytest.fixture
def run(monkeypatch, tmp_path):
    """Drive main() with the given module args; return the result dict of exit_json or fail_json."""
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    remote_tmp = tmp_path / "remote_tmp"
    remote_tmp.mkdir()

    def _run(check_mode=False, **args):
        args = dict(args, _ansible_check_mode=check_mode, _ansible_remote_tmp=str(remote_tmp))
        return module_result(sac.main, args)

    return _run


# A python in which `import sglang` fails: this test runner's own (no SGLang installed here).
NO_SGLANG_PYTHON = sys.executable

FAKE_SERVER_ARGS = '''
import argparse, json

class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", required=True)
        parser.add_argument("--tp-size", type=int, default=1)
        parser.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3"])
        parser.add_argument("--speculative-eagle-topk", type=int)
        parser.add_argument("--trust-remote-code", action="store_true")
        parser.add_argument("--api-key")
        parser.add_argument("--config")

def prepare_server_args(argv):
    # SGLang reads the YAML file; this stand-in reads the same file as JSON (the module writes JSON, which is YAML).
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    with open(argv[argv.index("--config") + 1]) as f:
        config = json.load(f)
    args = []
    for key, value in config.items():
        if value is True:
            args.append("--" + key)
        elif value is not False:
            args += ["--" + key, str(value)]
    return parser.parse_args(args)
'''


@pytest.fixture
def fake_sglang_python(tmp_path):
    """A `python` in which a small stand-in sglang (argparse-based ServerArgs) imports fully."""
    site = tmp_path / "site"
    pkg = site / "sglang" / "srt"
    pkg.mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "server_args.py").write_text(FAKE_SERVER_ARGS)
    wrapper = tmp_path / "python"
    wrapper.write_text('#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' % (site, sys.executable))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


# --------------------------------------------------------------------------------------------------
# The ast method on real SGLang sources
# --------------------------------------------------------------------------------------------------

def test_ast_finds_every_option_the_deployment_renders(sglang_root):
    options = sa.option_strings_from_tree(sglang_root)
    missing = ["--" + k for k in SERVER_ARGS if "--" + k not in options]
    assert missing == []
    assert "--api-key" in options and "--config" in options
    # 0.5.23 declares most options as A[...] fields in arg_groups/fields/, not add_argument calls.
    assert len(options) > 500


def test_ast_knows_that_cuda_graph_max_bs_is_gone_in_0_5_23(sglang_root):
    options = sa.option_strings_from_tree(sglang_root)
    assert "--cuda-graph-max-bs" not in options
    assert {"--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"} <= options


def test_ast_follows_aliases_negations_and_skips_no_cli_fields(sglang_root):
    options = sa.option_strings_from_tree(sglang_root)
    assert "--speculative-draft-model" in options  # Arg(aliases=[...])
    assert "--no-dllm-fdfo" in options  # action=argparse.BooleanOptionalAction
    assert "--speculative-boundary-reduction" not in options  # Arg(no_cli=True)
    assert "--disable-cuda-graph" in options  # a manual parser.add_argument in server_args.py


def test_ast_reads_an_older_release_that_only_uses_add_argument(tmp_path):
    root = _extract_server_sources("0.5.9", str(tmp_path))
    assert not os.path.isdir(os.path.join(root, "srt", "arg_groups"))
    options = sa.option_strings_from_tree(root)
    assert {"--speculative-eagle-topk", "--cuda-graph-max-bs", "--model-path"} <= options


def test_field_annotation_rules_mirror_add_cli_args_from_dataclass():
    source = textwrap.dedent('''
        class Ns(msgspec.Struct):
            _NS_PATH = "x"
            plain: A[int, "help"] = 1
            joined: A[int, "help " f"{x}"] = 1
            renamed: A[str, Arg(help="h", cli_name="--other-name", aliases=["--alias"])] = ""
            hidden: A[str, Arg(no_cli=True)] = ""
            derived_only: A[int, Derived(fn="f")] = 0
            no_meta: int = 0

        class Helper:
            not_an_option: A[int, "help"] = 1
    ''')
    assert sa.option_strings_from_source(source) == {"--plain", "--joined", "--other-name", "--alias"}


# --------------------------------------------------------------------------------------------------
# The module, falling back to ast (SGLang does not import)
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["api-key", "api_key", "admin-api-key", "ssl-keyfile-password"])
def test_module_rejects_secrets_in_extra_args_without_echoing_them(run, sglang_root, key):
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_root, args={"model-path": "/m"},
                 extra_args={key: "sk-very-secret"})
    assert result["failed"]
    assert result["secret_keys"] == [key]
    assert "sglang_server_api_key" in result["msg"]
    assert "sk-very-secret" not in repr(result)


def test_module_rejects_an_option_set_in_args_and_extra_args(run, sglang_root):
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_root, args={"tp-size": 8}, extra_args={"tp_size": 4})
    assert result["failed"]
    assert "tp_size" in result["msg"]


@pytest.mark.parametrize("key", ["--model-path", "config", "model path"])
def test_module_rejects_malformed_names(run, sglang_root, key):
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_root, args={key: "x"})
    assert result["failed"]
    assert "malformed" in result["msg"]


def test_module_fails_when_the_python_is_missing(run, tmp_path):
    result = run(python=str(tmp_path / "venv" / "bin" / "python"), args={"model-path": "/m"})
    assert result["failed"]
    assert "does not exist" in result["msg"]


# ---------------------------------------------------------------- SGLang 0.5.17 (the release run on the H200)

# What tests/gpu/real_sglang.yml wrote into the --config file of the server that ran on the H200
# (tests/data/h200-sglang): the settings of inventory/h200.
H200_ARGS = {
    "model-path": "/tmp/m/target",
    "speculative-draft-model-path": "/tmp/m/draft",
    "tp-size": 1,
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
    "mem-fraction-static": 0.2,
    "attention-backend": "triton",
    "sampling-backend": "pytorch",
    "grammar-backend": "none",
    "host": "127.0.0.1",
    "port": 30000,
}
H200_RESULTS = os.path.join(sglang_src.REPO, "tests", "data", "h200-sglang", "results")


@pytest.fixture(scope="session")
def sglang_0_5_17_root(tmp_path_factory):
    """Installed-like sglang package dir of SGLang 0.5.17: its option sources and its --config reader."""
    dest = str(tmp_path_factory.mktemp("sglang-0.5.17"))
    with zipfile.ZipFile(sglang_src.wheel_path("0.5.17")) as wheel:
        for member in ("sglang/srt/server_args.py", "sglang/srt/server_args_config_parser.py"):
            wheel.extract(member, dest)
    return os.path.join(dest, "sglang")


def test_ast_reads_as_many_options_from_0_5_17_as_its_real_parser_gave_on_the_h200(sglang_0_5_17_root):
    with open(os.path.join(H200_RESULTS, "argscheck.json")) as f:
        real = json.load(f)
    assert (real["method"], real["sglang_version"]) == ("sglang_parser", "0.5.17")
    assert len(sa.option_strings_from_tree(sglang_0_5_17_root)) == real["option_count"] == 493


def test_config_refused_dests_follow_0_5_17s_config_reader(sglang_0_5_17_root):
    refused = sa.config_refused_dests(sglang_0_5_17_root)
    assert refused["disable_cuda_graph"] == "DeprecatedStoreTrueAction"
    # A plain option refused because a deprecated alias shares its dest (the second device call's crash).
    assert refused["cuda_graph_backend_prefill"] == "DeprecatedStoreConstAction"
    for dest in ("model_path", "mem_fraction_static", "attention_backend", "speculative_algorithm", "api_key"):
        assert dest not in refused


def test_config_rule_is_not_applied_without_sglangs_config_reader(sglang_root):
    """0.5.23's sources as extracted above hold no server_args_config_parser.py: nothing is refused."""
    assert sa.config_refused_dests(sglang_root) is None


# --------------------------------------------------------------------------------------------------
# The server role's one look: where SGLang is, the model dirs, the config file (allow_missing, model_dirs,
# config_file). Fake virtualenvs (no interpreter runs: method ast, and a venv's python is never asked).
# --------------------------------------------------------------------------------------------------

_info_spec = importlib.util.spec_from_file_location("sglang_info", os.path.join(sglang_src.REPO, "library", "sglang_info.py"))
sglang_info = importlib.util.module_from_spec(_info_spec)
_info_spec.loader.exec_module(sglang_info)


def _venv(tmp_path, sglang_root=None):
    """A virtualenv laid out as `python -m venv` does; with sglang_root, SGLang 0.5.23's option sources and
    dist-info in its site-packages, and an eagle_worker_v2.py."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.2\n")
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    if sglang_root:
        dist = site / "sglang-0.5.23.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n\n")
        shutil.copytree(sglang_root, str(site / "sglang"))
        (site / "sglang" / "srt" / "speculative").mkdir(parents=True, exist_ok=True)
        (site / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py").write_text("class EAGLEWorkerV2:\n    pass\n")
    return str(venv / "bin" / "python"), site


def _me():
    return pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name


def _config(tmp_path, content=b"port: 30000\napi-key: \"k\"\n", mode=0o600):
    path = tmp_path / "sglang.yaml"
    path.write_bytes(content)
    path.chmod(mode)
    owner, group = _me()
    return path, {"path": str(path), "sha256": hashlib.sha256(content).hexdigest(), "owner": owner, "group": group,
                  "mode": "0600"}


def test_allow_missing_reports_a_python_that_does_not_exist_and_checks_no_option(run, tmp_path):
    _, spec = _config(tmp_path)
    result = run(python=str(tmp_path / "none" / "bin" / "python"), args={"model-path": "/m"}, allow_missing=True,
                 config_refused="argv", model_dirs=[str(tmp_path / "no-model")], config_file=spec)
    assert not result.get("failed"), result["msg"]
    assert (result["installed"], result["eagle_worker_v2"], result["checked_args"]) == (False, None, [])
    assert "method" not in result and "sglang_version" not in result
    assert (result["config_refused_args"], result["config_argv"]) == ([], [])
    assert result["model_dirs"][0]["state"] == "missing"
    assert result["config_file_in_place"] is True
    assert "no option checked" in result["msg"]


def test_allow_missing_reports_a_venv_without_sglang(run, tmp_path):
    python, _ = _venv(tmp_path)
    result = run(python=python, args={"model-path": "/m"}, allow_missing=True, method="ast")
    assert not result.get("failed"), result["msg"]
    assert result["installed"] is False and result["checked_args"] == []


def test_without_allow_missing_a_venv_without_sglang_still_fails(run, tmp_path):
    python, _ = _venv(tmp_path)
    result = run(python=python, args={"model-path": "/m"}, method="ast")
    assert result["failed"]
    assert "no installed SGLang found" in result["msg"] and "install SGLang first" in result["msg"]


def test_allow_missing_still_refuses_a_secret_in_the_arguments(run, tmp_path):
    result = run(python=str(tmp_path / "none" / "bin" / "python"), args={"model-path": "/m"},
                 extra_args={"api-key": "sk-very-secret"}, allow_missing=True)
    assert result["failed"] and result["secret_keys"] == ["api-key"]
    assert "sk-very-secret" not in repr(result)


def test_installed_sglang_is_found_and_checked_in_the_same_call(run, tmp_path, sglang_root):
    python, site = _venv(tmp_path, sglang_root)
    result = run(python=python, args=SERVER_ARGS, secret_args=["api-key"], method="ast", allow_missing=True,
                 config_refused="argv")
    assert not result.get("failed"), result["msg"]
    assert (result["installed"], result["sglang_version"], result["method"]) == (True, "0.5.23", "ast")
    assert result["eagle_worker_v2"] == str(site / "sglang" / "srt" / "speculative" / "eagle_worker_v2.py")
    assert result["sglang_root"] == str(site / "sglang")
    assert result["checked_args"] == ["--" + k for k in SERVER_ARGS] + ["--api-key"]
    # As sglang_info finds it (the server role used to ask sglang_info for these).
    info = sglang_info.SGLangInfo(dict(venv=None, python=python, import_check=False, timeout=1, model_dirs=[],
                                       requirements=[], user=None, paths=[], site_dirs=None), runner=None).run()
    assert (info["installed"], info["version"], info["eagle_worker_v2"]) == (True, "0.5.23", result["eagle_worker_v2"])


def test_model_dir_states_are_those_of_sglang_info(run, tmp_path):
    ok = tmp_path / "ok"
    ok.mkdir()
    (ok / "config.json").write_text("{}")
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    dirs = [str(ok), str(empty), str(a_file), str(tmp_path / "missing")]
    result = run(python=str(tmp_path / "none" / "bin" / "python"), args={}, allow_missing=True, model_dirs=dirs)
    assert [d["state"] for d in result["model_dirs"]] == ["ok", "no_config_json", "not_a_directory", "missing"]
    assert result["model_dirs"] == [sglang_info.model_dir_state(d) for d in dirs]
    assert result["model_dirs"][1]["config_json"] == str(empty / "config.json")


def test_two_names_of_one_model_dir_have_one_real_path(run, tmp_path):
    """A link to the target and a path through `..` name the target's directory: the module says so (real_path), for
    the server role's refusal of an EAGLE3 draft that is the target (roles/sglang_server/tasks/preflight.yml)."""
    target = tmp_path / "models" / "target"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (tmp_path / "models" / "draft").mkdir()
    (tmp_path / "alias").symlink_to(target)
    dirs = [str(target), str(tmp_path / "alias"), str(tmp_path / "models" / "draft" / ".." / "target"),
            str(tmp_path / "models" / "draft")]
    result = run(python=str(tmp_path / "none" / "bin" / "python"), args={}, allow_missing=True, model_dirs=dirs)
    real = [d["real_path"] for d in result["model_dirs"]]
    assert real[:3] == [os.path.realpath(str(target))] * 3 and real[3] == os.path.realpath(str(tmp_path / "models" /
                                                                                              "draft"))
    assert [d["path"] for d in result["model_dirs"]] == dirs  # the paths as given stay as given


def test_config_file_in_place_only_with_the_same_content_owner_group_mode(tmp_path):
    path, spec = _config(tmp_path)
    assert sa.config_file_in_place(spec) is True
    assert sa.config_file_in_place(dict(spec, sha256=spec["sha256"].upper())) is True
    assert sa.config_file_in_place(dict(spec, sha256="0" * 64)) is False
    assert sa.config_file_in_place(dict(spec, mode="0640")) is False
    assert sa.config_file_in_place(dict(spec, owner="no-such-user-eagle")) is False
    assert sa.config_file_in_place(dict(spec, group="no-such-group-eagle")) is False
    assert sa.config_file_in_place(dict(spec, path=str(tmp_path / "missing.yaml"))) is False
    other_user = next(p.pw_name for p in pwd.getpwall() if p.pw_uid != os.getuid())
    other_group = next(g.gr_name for g in grp.getgrall() if g.gr_gid != os.getgid())
    assert sa.config_file_in_place(dict(spec, owner=other_user)) is False
    assert sa.config_file_in_place(dict(spec, group=other_group)) is False
    path.chmod(0o644)
    assert sa.config_file_in_place(spec) is False


def test_config_file_that_is_a_link_or_a_fifo_is_never_in_place(tmp_path):
    path, spec = _config(tmp_path)
    link = tmp_path / "link.yaml"
    link.symlink_to(path)
    assert sa.config_file_in_place(dict(spec, path=str(link))) is False
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(str(fifo), 0o600)
    # Opened without blocking (no writer), then refused: not a regular file.
    assert sa.config_file_in_place(dict(spec, path=str(fifo))) is False


def test_config_file_hash_is_a_no_log_value_and_never_returned(monkeypatch, tmp_path, sglang_root):
    python, _ = _venv(tmp_path, sglang_root)
    _, spec = _config(tmp_path)
    seen = {}

    def exit_json(self, **kwargs):
        seen["no_log_values"] = set(self.no_log_values)
        raise ExitJson(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    with patch_module_args(dict(python=python, args={"port": 30000}, method="ast", config_file=spec,
                                _ansible_remote_tmp=str(tmp_path))):
        with pytest.raises(ExitJson) as exc:
            sac.main()
    result = exc.value.args[0]
    assert result["config_file_in_place"] is True
    assert spec["sha256"] in seen["no_log_values"]
    assert spec["sha256"] not in json.dumps(result)


def test_config_file_is_not_in_place_when_sglang_refuses_an_option_in_it(run, tmp_path, sglang_0_5_17_root):
    """The caller's hash is of the content with every option in the file; one refused option changes the file."""
    _, spec = _config(tmp_path)
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_0_5_17_root, args=H200_ARGS, method="ast",
                 extra_args={"disable-cuda-graph": True}, config_refused="argv", config_file=spec)
    assert not result.get("failed"), result["msg"]
    assert result["config_refused_args"] == ["disable-cuda-graph"]
    assert result["config_file_in_place"] is False
    same = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_0_5_17_root, args=H200_ARGS, method="ast",
               config_refused="argv", config_file=spec)
    assert same["config_file_in_place"] is True


def test_allow_missing_fails_on_an_interpreter_that_cannot_list_its_site_dirs(run, monkeypatch, tmp_path):
    """A python outside a venv is asked for its import path; a broken one is not 'SGLang not installed yet'."""
    python = tmp_path / "python3"
    python.write_text("")
    calls = []

    def run_command(self, cmd, **kwargs):
        calls.append(cmd)
        return 1, "", "boom: no encodings module"

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    result = run(python=str(python), args={"model-path": "/m"}, allow_missing=True, method="ast")
    assert result["failed"]
    assert "could not list its site directories (rc=1): boom: no encodings module" in result["msg"]
    assert calls == [[str(python), "-c", sa.SITE_DIRS_SCRIPT]]
