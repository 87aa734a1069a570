"""sglang_args_check with config_refused=argv, on the real sources of SGLang 0.5.17 (the release run on the H200).

0.5.17's --config reader refuses every option whose argparse action is neither store nor store_true, and plain
options that share a dest with such an alias; the real H200 run had to pass --disable-cuda-graph on the command
line (tests/data/h200-sglang/README.md). The module returns those options, rendered for argv, so that the role
puts them after `--config <file>`; 0.5.23 has no such rule and gets an empty list. No process is started here.
"""

from __future__ import annotations

import os
import sys
import zipfile

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_src  # noqa: E402 - test helper next to this file, importable once sys.path has this directory
from module_harness import ExitJson, FailJson, exit_json, fail_json  # noqa: E402 - test helper next to this file, importable once sys.path has this directory

from test_sglang_args_check import sa, sac  # noqa: E402 - the module under test, loaded once by that test file

# inventory/h200's settings as the role renders them (tests/data/h200-sglang: what ran on the H200).
H200_ARGS = {
    "model-path": "/data/models/your-model",
    "speculative-draft-model-path": "/data/models/your-model-EAGLE3",
    "tp-size": 1,
    "speculative-algorithm": "EAGLE3",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
    "attention-backend": "triton",
    "host": "127.0.0.1",
    "port": 30000,
}
MEMBERS = ("sglang/srt/server_args.py", "sglang/srt/server_args_config_parser.py")


def _extract(tmp_path_factory, version):
    dest = str(tmp_path_factory.mktemp("sglang-%s" % version))
    with zipfile.ZipFile(sglang_src.wheel_path(version)) as wheel:
        names = set(wheel.namelist())
        for member in names:
            if member in MEMBERS or (member.startswith("sglang/srt/arg_groups/fields/") and member.endswith(".py")):
                wheel.extract(member, dest)
    return os.path.join(dest, "sglang")


@pytest.fixture(scope="module")
def root_0_5_17(tmp_path_factory):
    return _extract(tmp_path_factory, "0.5.17")


@pytest.fixture(scope="module")
def root_0_5_23(tmp_path_factory):
    return _extract(tmp_path_factory, "0.5.23")


@pytest.fixture
def run(monkeypatch, tmp_path):
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)

    def _run(**args):
        args = dict(args, python=sys.executable, method="ast", _ansible_remote_tmp=str(tmp_path))
        with patch_module_args(args):
            try:
                sac.main()
            except (ExitJson, FailJson) as exc:
                return exc.args[0]
        raise AssertionError("the module neither exited nor failed")
    return _run


def test_refused_options_come_back_as_argv_on_0_5_17(run, root_0_5_17):
    result = run(sglang_root=root_0_5_17, args=dict(H200_ARGS, **{"cuda-graph-max-bs-decode": 64}),
                 extra_args={"disable-cuda-graph": True, "cuda-graph-backend-prefill": "disabled",
                             "sampling-backend": "pytorch"},
                 config_refused="argv")
    assert not result.get("failed"), result["msg"]
    assert result["config_refused_args"] == ["cuda-graph-max-bs-decode", "disable-cuda-graph", "cuda-graph-backend-prefill"]
    # --disable-cuda-graph is a flag (DeprecatedStoreTrueAction); the two others take their value.
    assert result["config_argv"] == ["--cuda-graph-max-bs-decode", "64", "--disable-cuda-graph",
                                     "--cuda-graph-backend-prefill", "disabled"]
    assert "given on the command line: cuda-graph-max-bs-decode, disable-cuda-graph" in result["msg"]


def test_a_false_flag_is_left_out_of_argv(run, root_0_5_17):
    result = run(sglang_root=root_0_5_17, args=H200_ARGS, extra_args={"disable-cuda-graph": False},
                 config_refused="argv")
    assert result["config_refused_args"] == ["disable-cuda-graph"] and result["config_argv"] == []


def test_nothing_is_refused_with_the_h200_arguments(run, root_0_5_17):
    result = run(sglang_root=root_0_5_17, args=H200_ARGS, config_refused="argv")
    assert not result.get("failed"), result["msg"]
    assert result["config_refused_args"] == [] and result["config_argv"] == []


def test_0_5_23_has_no_such_rule(run, root_0_5_23):
    result = run(sglang_root=root_0_5_23, args=dict(H200_ARGS, **{"cuda-graph-max-bs-decode": 64}),
                 config_refused="argv")
    assert not result.get("failed"), result["msg"]
    assert result["config_refused_args"] == [] and result["config_argv"] == []


def test_default_still_fails_on_a_refused_option(run, root_0_5_17):
    result = run(sglang_root=root_0_5_17, args=H200_ARGS, extra_args={"disable-cuda-graph": True})
    assert result["failed"] and result["config_refused_args"] == ["disable-cuda-graph"]


@pytest.mark.parametrize("value, kind, argv", [
    (True, "flag", ["--x"]),
    (False, "flag", []),
    (False, "bool_optional", ["--no-x"]),
    (True, "value", ["--x", "true"]),
    ([1, 2], "value", ["--x", "1", "2"]),
    ([], "value", []),
    ({"a": 1}, "value", ["--x", '{"a": 1}']),
    (0.85, "value", ["--x", "0.85"]),
    (None, "value", []),
])
def test_to_argv_renders_like_sglangs_config_reader(value, kind, argv):
    assert sa.to_argv("x", value, kind) == argv


def test_option_kinds_of_0_5_17(root_0_5_17):
    kinds = sa.option_kinds(root_0_5_17)
    assert kinds["--disable-cuda-graph"] == "flag"
    assert kinds["--enable-breakable-cuda-graph"] == "flag"
    assert kinds["--cuda-graph-max-bs"] == "value"
