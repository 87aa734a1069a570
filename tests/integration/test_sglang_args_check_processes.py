"""sglang_args_check running real interpreters: the `auto` method trying SGLang's parser first (and falling
back to `ast` where SGLang does not import), the `sglang_parser` method on a small stand-in `sglang`
package. The real parser against `ast` runs where real SGLang imports: molecule/sglang-cpu (case E). The pure tests and the fixtures are in tests/unit/test_sglang_args_check.py."""

from __future__ import annotations


import pytest

from test_sglang_args_check import (H200_ARGS, NO_SGLANG_PYTHON, SERVER_ARGS,  # noqa: F401 - fixtures too
                                    fake_sglang_python, run, sglang_0_5_17_root, sglang_root)

def test_module_falls_back_to_ast_and_accepts_the_deployment(run, sglang_root):
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_root, args=SERVER_ARGS, secret_args=["api-key"])
    assert not result.get("failed"), result["msg"]
    assert result["method"] == "ast"
    assert "sglang" in result["import_error"]
    assert result["values_checked"] is False
    assert result["checked_args"] == ["--" + k for k in SERVER_ARGS] + ["--api-key"]


def test_module_rejects_an_abbreviation_argparse_would_accept(run, sglang_root):
    args = dict(SERVER_ARGS)
    args["speculative-eagle-top"] = args.pop("speculative-eagle-topk")
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_root, args=args)
    assert result["failed"]
    assert result["abbreviated_args"] == {"--speculative-eagle-top": ["--speculative-eagle-topk"]}
    assert "--speculative-eagle-top" in result["msg"]


def test_module_rejects_the_removed_cuda_graph_max_bs_as_ambiguous(run, sglang_root):
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_root, args={"cuda-graph-max-bs": 64})
    assert result["failed"]
    assert result["abbreviated_args"]["--cuda-graph-max-bs"] == ["--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"]


def test_module_rejects_unknown_flags_with_suggestions(run, sglang_root):
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_root,
                 args={"model-path": "/m"}, extra_args={"speculative-eagle-tokp": 3, "zz-frobnicate": 1, "tp_size": 8})
    assert result["failed"]
    assert result["unknown_args"] == ["--speculative-eagle-tokp", "--zz-frobnicate", "--tp_size"]
    assert result["suggestions"]["--tp_size"][0] == "--tp-size"
    assert result["suggestions"]["--speculative-eagle-tokp"][0] == "--speculative-eagle-topk"
    assert "--zz-frobnicate" not in result["suggestions"]


def test_module_skips_null_values(run, sglang_root):
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_root, args={"model-path": "/m", "no-such-flag": None})
    assert not result.get("failed"), result["msg"]
    assert result["checked_args"] == ["--model-path"]


def test_module_fails_when_no_sglang_is_installed(run, tmp_path):
    result = run(python=NO_SGLANG_PYTHON, args={"model-path": "/m"})
    assert result["failed"]
    assert result["method"] == "ast"
    assert "install SGLang first" in result["msg"]


def test_sglang_parser_method_refuses_to_fall_back(run, sglang_root):
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_root, args={"model-path": "/m"}, method="sglang_parser")
    assert result["failed"]
    assert "does not import" in result["msg"]


def test_check_mode_checks_the_same(run, sglang_root):
    args = {"model-path": "/m", "speculative-eagle-top": 1}
    assert run(check_mode=True, python=NO_SGLANG_PYTHON, sglang_root=sglang_root, args=args)["failed"]
    ok = run(check_mode=True, python=NO_SGLANG_PYTHON, sglang_root=sglang_root, args=SERVER_ARGS)
    assert not ok.get("failed") and ok["changed"] is False


def test_parser_method_checks_values_too(run, fake_sglang_python):
    args = {"model-path": "/m", "tp-size": 8, "speculative-algorithm": "EAGLE3", "trust-remote-code": True}
    result = run(python=fake_sglang_python, args=args, secret_args=["api-key"])
    assert not result.get("failed"), result["msg"]
    assert result["method"] == "sglang_parser"
    assert result["values_checked"] is True
    assert result["option_count"] == 10  # -h, --help and the eight option strings of the stand-in


def test_parser_method_reports_sglang_parser_errors(run, fake_sglang_python):
    result = run(python=fake_sglang_python, args={"model-path": "/m", "tp-size": "eight"})
    assert result["failed"]
    assert result["method"] == "sglang_parser"
    assert "invalid int value: 'eight'" in result["parser_error"]


def test_parser_method_still_rejects_abbreviations(run, fake_sglang_python):
    # The stand-in's argparse (allow_abbrev=True, like SGLang's) would take --speculative-eagle-top.
    result = run(python=fake_sglang_python, args={"model-path": "/m", "speculative-eagle-top": 1})
    assert result["failed"]
    assert list(result["abbreviated_args"]) == ["--speculative-eagle-top"]


def test_ast_method_never_imports_sglang(run, fake_sglang_python):
    result = run(python=fake_sglang_python, args={"model-path": "/m", "tp-size": "eight"}, method="ast")
    # The stand-in has no arg_groups: only its add_argument calls count; values are not checked.
    assert not result.get("failed"), result["msg"]
    assert result["method"] == "ast"
    assert result["values_checked"] is False
    assert "import_error" not in result



def test_module_accepts_the_h200_arguments_on_0_5_17(run, sglang_0_5_17_root):
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_0_5_17_root, args=H200_ARGS)
    assert not result.get("failed"), result["msg"]
    assert result["method"] == "ast"
    assert result["checked_args"] == ["--" + k for k in H200_ARGS]


@pytest.mark.parametrize("key", ["disable-cuda-graph", "cuda-graph-backend-prefill", "cuda-graph-max-bs-decode"])
def test_module_rejects_options_0_5_17_refuses_in_its_config_file(run, sglang_0_5_17_root, key):
    """0.5.17 knows these flags but its --config reader raises 'Unsupported config option' for them."""
    result = run(python=NO_SGLANG_PYTHON, sglang_root=sglang_0_5_17_root, args=H200_ARGS,
                 extra_args={key: "disabled" if key == "cuda-graph-backend-prefill" else True})
    assert result["failed"]
    assert result["config_refused_args"] == [key]
    assert "refuses %s in its --config file" % key in result["msg"]
