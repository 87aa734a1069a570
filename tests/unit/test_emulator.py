"""Unit tests for the SGLang emulator package (tests/emulator/sglang_emulator): pure parts, no processes, no sleeps."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import textwrap

import jinja2
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sglang_src  # noqa: E402 - test helper next to this file, importable once sys.path has this directory

sys.path.insert(0, os.path.join(sglang_src.REPO, "tests", "emulator"))
import sglang_emulator  # noqa: E402 - tests/emulator, importable once it is on sys.path
from sglang_emulator import cli, logs, replay, scenarios, scheduler  # noqa: E402 - tests/emulator, once on sys.path
from ansible.module_utils import early_init_plan  # noqa: E402 - conftest puts the project's module_utils there

CORPUS = os.path.join(sglang_src.REPO, "tests", "data", "sglang-logs")
TEMPLATE = os.path.join(sglang_src.REPO, "roles", "sglang_server", "templates", "sglang_server.yaml.j2")


def patched(source_bytes):
    """The real patch's output for the default attribute, as the sglang_patch role applies it."""
    patcher = early_init_plan.EarlyInitPatcher("eagle_worker_v2.py", "EAGLEWorkerV2", "__init__",
                                   {"spec_disable_batch_threshold": "0"}, "present")
    return patcher.compute(source_bytes)["new"]


# --- config file ---------------------------------------------------------------------------------------------------

def test_config_lines_are_key_and_json_value():
    text = textwrap.dedent("""\
        # Ansible managed
        # a comment line
        model-path: "/models/llama-3.1-8b"
        port: 30000
        mem_fraction_static: 0.85
        trust-remote-code: true
        api-key: "s3cr#t: x"
        context-length: null
        served-model-name: "it's \\"quoted\\""
        cuda-graph-bs: [1, 2, 4]

        """)
    assert cli.parse_config(text) == {
        "model-path": "/models/llama-3.1-8b", "port": 30000, "mem_fraction_static": 0.85,
        "trust-remote-code": True, "api-key": "s3cr#t: x", "context-length": None,
        "served-model-name": 'it\'s "quoted"', "cuda-graph-bs": [1, 2, 4],
    }


def _render_role_template(args, extra_args, api_key):
    """The role's config template, rendered as Ansible renders it (to_json is json.dumps)."""
    env = jinja2.Environment(keep_trailing_newline=True, trim_blocks=True)
    env.filters["to_json"] = json.dumps
    with open(TEMPLATE, encoding="utf-8") as handle:
        template = env.from_string(handle.read())
    return template.render(ansible_managed="Ansible managed", _sglang_server_args=args,
                           sglang_server_extra_args=extra_args, sglang_server_api_key=api_key)


def test_the_roles_real_config_template_reads_back_exactly():
    args = {"model-path": "/data/models/Kimi-K2.5-INT4", "tp-size": 8, "speculative-algorithm": "EAGLE3",
            "mem-fraction-static": 0.85, "trust-remote-code": True, "host": "127.0.0.1", "port": 30000}
    extra = {"chunked-prefill-size": 4096, "enable-metrics": False, "served-model-name": "kimi \"k2\" ü",
             "skipped": None}
    text = _render_role_template(args, extra, "k#ey: 'x'")
    expected = dict(args, **{k: v for k, v in extra.items() if v is not None})
    expected["api-key"] = "k#ey: 'x'"
    assert cli.parse_config(text) == expected


@pytest.mark.parametrize("text, needle", [
    ("server:\n  port: 1\n", "line 1: expected 'key: <JSON value>'"),
    ("port: 1\n  nested: 2\n", "line 2: expected 'key: <JSON value>' at the start"),
    ("port: 1\nport: 2\n", "duplicate key"),
    ("model-path: /not/json\n", "line 1: the value of 'model-path' is not JSON"),
    ("x: [[1]]\n", "only scalars and flat lists"),
    ("x: {\"a\": 1}\n", "only scalars and flat lists"),
    ("just a line\n", "expected 'key: <JSON value>'"),
])
def test_config_refuses_what_is_not_key_json_lines(text, needle):
    with pytest.raises(cli.ConfigError, match=re.escape(needle)):
        cli.parse_config(text)


def test_config_to_argv_follows_sglang_merger_rules():
    argv = cli.config_to_argv({"model_path": "/m", "trust-remote-code": True, "enable-metrics": False,
                               "some_bool": True, "bs": [1, 2], "empty": [], "nothing": None},
                              store_true_keys={"trust_remote_code", "enable_metrics"})
    assert argv == ["--model-path", "/m", "--trust-remote-code", "--some-bool", "true", "--bs", "1", "2"]


# --- command line ------------------------------------------------------------------------------------------------

def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_cli_overrides_config_and_both_key_spellings_work(tmp_path):
    cfg = _write(tmp_path, "c.yaml", 'model_path: "/from/config"\nport: 31000\ntp-size: 4\napi-key: "k1"\n'
                                     'speculative_algorithm: "eagle3"\n')
    args, unknown, ignored = cli.parse_args(["--config", cfg, "--port", "32000"])
    assert (args.model_path, args.port, args.tp_size, args.api_key) == ("/from/config", 32000, 4, "k1")
    assert args.speculative_algorithm == "EAGLE3"
    assert args.served_model_name == "/from/config"
    assert unknown == [] and ignored == []


def test_cli_flag_before_config_still_wins(tmp_path):
    cfg = _write(tmp_path, "c.yml", "port: 31000\n")
    args, _, _ = cli.parse_args(["--port", "32001", "--config", cfg])
    assert args.port == 32001


def test_unknown_sglang_flags_are_returned_not_fatal(tmp_path):
    cfg = _write(tmp_path, "c.yaml", "enable-metrics: true\nchunked-prefill-size: 4096\n")
    args, unknown, _ = cli.parse_args(["--config", cfg, "--tp", "2", "--cuda-graph-max-bs", "8"])
    assert args.tp_size == 2
    assert unknown == ["--enable-metrics", "true", "--chunked-prefill-size", "4096", "--cuda-graph-max-bs", "8"]


def test_emulator_keys_in_config_are_ignored(tmp_path):
    cfg = _write(tmp_path, "c.yaml", 'emulator-scenario: "hang"\nemulator_load_seconds: 9\n')
    args, _, ignored = cli.parse_args(["--config", cfg])
    assert args.emulator_scenario == "normal" and args.emulator_load_seconds == 3.0
    assert ignored == ["emulator-scenario", "emulator_load_seconds"]


def test_defaults_match_the_contract():
    args, _, _ = cli.parse_args([])
    assert (args.host, args.port, args.emulator_scenario, args.emulator_load_seconds, args.emulator_shards,
            args.emulator_capture_seconds, args.emulator_replay_speed, args.emulator_child_die_after) == \
        ("127.0.0.1", 30000, "normal", 3.0, 4, 1.0, 100.0, 2.0)


@pytest.mark.parametrize("argv", [
    ["--config", "/tmp/c.json"],
    ["--config", "/nonexistent/c.yaml"],
    ["--config"],
    ["--emulator-scenario", "explode"],
    ["--emulator-scenario", "replay"],
    ["--tp-size", "0"],
])
def test_bad_command_lines_exit_with_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_bad_config_content_is_a_usage_error(tmp_path, capsys):
    cfg = _write(tmp_path, "c.yaml", "server:\n  port: 1\n")
    with pytest.raises(SystemExit):
        cli.parse_args(["--config", cfg])
    assert "expected 'key: <JSON value>'" in capsys.readouterr().err


# --- EAGLEWorkerV2 check -----------------------------------------------------------------------------------------

UNPATCHED = textwrap.dedent('''\
    class BaseSpecWorker:
        pass


    class EAGLEWorkerV2(BaseSpecWorker):
        def __init__(self, server_args, gpu_id):
            """Doc."""
            def helper():
                return make_thing()
            self.gpu_id = gpu_id
            super().__init__()
            self.spec_disable_batch_threshold = 0
    ''')


def test_synthetic_unpatched_would_crash():
    res = scenarios.analyse_eagle_worker(UNPATCHED)
    assert res["class_found"] and res["init_found"]
    assert res["assigned_before"] is False
    assert res["raising_lineno"] == 11
    assert res["raising_source"] == "super().__init__()"


@pytest.mark.parametrize("early", [
    "self.spec_disable_batch_threshold = 0",
    "self.spec_disable_batch_threshold: int = 0",
    "if True:\n            self.spec_disable_batch_threshold = None",
])
def test_synthetic_early_assignment_counts_as_patched(early):
    source = UNPATCHED.replace('        """Doc."""\n', '        """Doc."""\n        %s\n' % early)
    res = scenarios.analyse_eagle_worker(source)
    assert res["assigned_before"] is True
    assert res["raising_source"] == "super().__init__()"


@pytest.mark.parametrize("early", [
    "setattr(self, 'spec_disable_batch_threshold', 0)",
    "self.spec_disable_batch_threshold = int(server_args.x)",
])
def test_an_assignment_that_contains_a_call_is_where_init_can_fail(early):
    # The rule of the patch module's at_risk (module_utils/init_order.py): a statement with a call can raise
    # before it assigns anything, so it is the first raising statement and the attribute is not set before it.
    source = UNPATCHED.replace('        """Doc."""\n', '        """Doc."""\n        %s\n' % early)
    res = scenarios.analyse_eagle_worker(source)
    assert res["assigned_before"] is False
    assert res["raising_source"] == early


def test_synthetic_other_instance_name():
    source = UNPATCHED.replace("(self, server_args", "(me, server_args").replace(
        "self.gpu_id = gpu_id", "me.spec_disable_batch_threshold = 1")
    assert scenarios.analyse_eagle_worker(source)["assigned_before"] is True


def test_synthetic_assignment_on_another_object_does_not_count():
    source = UNPATCHED.replace("self.gpu_id = gpu_id", "other.spec_disable_batch_threshold = 1")
    assert scenarios.analyse_eagle_worker(source)["assigned_before"] is False


def test_synthetic_missing_class_or_init():
    assert scenarios.analyse_eagle_worker("class Other:\n    pass\n")["class_found"] is False
    res = scenarios.analyse_eagle_worker("class EAGLEWorkerV2:\n    x = 1\n")
    assert res["class_found"] is True and res["init_found"] is False


def test_real_0_5_23_unpatched_would_crash():
    source = sglang_src.eagle_worker_v2_source("0.5.23")
    res = scenarios.analyse_eagle_worker(source.decode("utf-8"))
    assert res["init_found"]
    assert res["assigned_before"] is False
    assert res["raising_source"] == "super().__init__()"
    line = source.decode("utf-8").splitlines()[res["raising_lineno"] - 1]
    assert line.strip() == "super().__init__()"


def test_real_0_5_23_patched_by_our_patch_module_decodes():
    res = scenarios.analyse_eagle_worker(patched(sglang_src.eagle_worker_v2_source("0.5.23")).decode("utf-8"))
    assert res["assigned_before"] is True
    assert res["raising_source"] == "super().__init__()"


def test_eagle_plan_reads_the_installed_file(tmp_path):
    data = sglang_src.eagle_worker_v2_source("0.5.23")
    root = tmp_path / "site-packages" / "sglang"
    (root / "srt" / "speculative").mkdir(parents=True)
    (root / "srt" / "speculative" / "eagle_worker_v2.py").write_bytes(data)
    assert scenarios.find_sglang_root(str(root)) == str(root)
    assert scenarios.find_sglang_root(str(tmp_path / "site-packages")) == str(root)
    plan = scenarios.eagle_plan(str(root))
    assert plan["sha256"] == hashlib.sha256(data).hexdigest()
    assert plan["will_crash"] is True
    (root / "srt" / "speculative" / "eagle_worker_v2.py").write_bytes(patched(data))
    assert scenarios.eagle_plan(str(root))["will_crash"] is False


def test_find_sglang_root_missing(tmp_path):
    assert scenarios.find_sglang_root(str(tmp_path)) is None


# --- fake model, log formats, replay helpers ---------------------------------------------------------------------

def test_fake_output_is_deterministic_and_honours_max_new_tokens():
    a = scheduler.fake_output_ids("Hello there", 37)
    assert len(a) == 37 and a == scheduler.fake_output_ids("Hello there", 37)
    assert a != scheduler.fake_output_ids("Hello world", 37)
    assert scheduler.fake_output_ids("x", 0) == []
    assert len(scheduler.detokenize(a).split()) == 37


def test_prompt_token_count():
    assert scheduler.count_prompt_tokens("The capital city of France is") == 6
    assert scheduler.count_prompt_tokens([1, 2, 3]) == 3
    assert scheduler.count_prompt_tokens("") == 1


def test_shard_progress_is_tqdm_shaped():
    line = logs.tqdm_line("Loading safetensors checkpoint shards", 2, 4, 1.2, 0.6)
    assert line.startswith("\r")
    assert re.match(r"^\rLoading safetensors checkpoint shards:  50% Completed \| 2/4 \[00:01<00:01, +\d", line)


def test_log_prefixes(capfd):
    logs.log("Load weight begin. avail mem=1.00 GB", rank=3)
    logs.log("The server is fired up and ready to roll!")
    err = capfd.readouterr().err.splitlines()
    assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP3\] Load weight begin\.", err[0])
    assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] The server is fired up", err[1])


def test_log_level_warning_hides_info(capfd):
    logs.set_log_level("warning")
    try:
        logs.log("info line")
        logs.log("warn line", level="warning")
    finally:
        logs.set_log_level("info")
    err = capfd.readouterr().err
    assert "info line" not in err and "warn line" in err


def test_line_time_and_delays():
    lines = ["[2025-08-11 02:18:09] a\n", "no stamp\n", "[2025-08-11 02:18:19 TP0] b\n", "[17:43:23 TP6] c\n"]
    assert replay.line_time(lines[1]) is None
    delays = replay.replay_delays(lines, speed=10, fixed=0.005)
    assert delays[:3] == [0.0, 0.005, 1.0]
    assert replay.line_time(lines[3]) is not None


@pytest.mark.parametrize("name, label", [
    ("041-ready-eagle3-llama31-8b-docs-ci.log", "ready"),
    ("046-ready-eagle3-log-level-warning-no-ready-line.log", "ready"),
    ("019-crash-eagle3-tuning-sigquit-exit-minus9.log", "crashed"),
    ("049-loading-deepseek-r1-2x8-h800-capture-begin.log", "loading"),
])
def test_replay_outcome_uses_the_manifest(name, label):
    path = os.path.join(CORPUS, name)
    if not os.path.isfile(path):
        pytest.fail("corpus copy missing: %s (the test data is part of the repository)" % path, pytrace=False)
    with open(path, encoding="utf-8", errors="replace") as handle:
        assert replay.replay_outcome(path, handle.read()) == label


@pytest.mark.parametrize("text, label", [
    ("[2025-01-01 00:00:00] The server is fired up and ready to roll!\n", "ready"),
    ("[2025-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n", "crashed"),
    ("[2025-01-01 00:00:00 TP0] Load weight begin. avail mem=1 GB\n", "loading"),
])
def test_replay_outcome_without_manifest(tmp_path, text, label):
    path = _write(tmp_path, "x.log", text)
    assert replay.replay_outcome(path, text) == label


def test_banner_says_it_is_not_sglang():
    assert sglang_emulator.BANNER.startswith("[EMULATOR] sglang-emulator " + sglang_emulator.VERSION + ": this is NOT SGLang")


@pytest.mark.parametrize("version", sglang_src.RELEASES)
def test_every_release_unpatched_crashes_and_patched_decodes(version):
    source = sglang_src.eagle_worker_v2_source(version)
    before = scenarios.analyse_eagle_worker(source.decode("utf-8"))
    after = scenarios.analyse_eagle_worker(patched(source).decode("utf-8"))
    assert before["raising_lineno"] is not None and before["assigned_before"] is False
    assert after["assigned_before"] is True


# -- the decode model and the continuous batch (sglang_emulator.decode) -------------------------------------------
from sglang_emulator import decode  # noqa: E402 - tests/emulator, once on sys.path


def _run_batch(batch, steps=1000):
    """Run the batch to its end: every output, and the batch size of every step."""
    outs, sizes = [], []
    while not batch.idle() and steps:
        batch.begin_step()
        got, size = batch.end_step()
        outs.extend(got)
        sizes.append(size)
        steps -= 1
    return outs, sizes


def test_decode_step_time_grows_with_the_batch_and_costs_more_with_speculation():
    base = decode.DecodeModel(step_ms=8, per_req_ms=2)
    spec = decode.DecodeModel(step_ms=8, per_req_ms=2, speculative=True, accept_length=2.5, spec_overhead=0.3,
                              verify_cost=4, max_accept=4)
    assert base.step_seconds(1) == 0.010 and base.step_seconds(8) == 0.024
    assert abs(spec.step_seconds(1) - 0.0184) < 1e-9 and abs(spec.step_seconds(8) - 0.0744) < 1e-9
    # tokens/s per request: speculation wins alone and loses at 8 running requests (the crossover)
    assert 2.5 / spec.step_seconds(1) > 1 / base.step_seconds(1)
    assert 2.5 / spec.step_seconds(8) < 1 / base.step_seconds(8)


def test_decode_tokens_per_verify_step_average_the_accept_length_within_the_draft():
    spec = decode.DecodeModel(speculative=True, accept_length=2.5, max_accept=4)
    assert [spec.tokens(i) for i in range(1, 7)] == [2, 3, 2, 3, 2, 3]
    assert [decode.DecodeModel(speculative=True, accept_length=1.0).tokens(i) for i in (1, 2, 3)] == [1, 1, 1]
    assert sum(decode.DecodeModel(speculative=True, accept_length=2.47).tokens(i) for i in range(1, 101)) == 247
    assert decode.DecodeModel(step_ms=1).tokens(5) == 1  # no speculation: one token a step


def test_decode_model_refuses_settings_that_cannot_be():
    for kwargs in ({"step_ms": 0}, {"per_req_ms": -1}, {"speculative": True, "accept_length": 0.5},
                   {"speculative": True, "accept_length": 5, "max_accept": 4}):
        with pytest.raises(ValueError):
            decode.DecodeModel(**kwargs)


def test_batch_streams_every_step_and_answers_others_once_with_sglang_accept_figures():
    batch = decode.DecodeBatch(decode.DecodeModel(speculative=True, accept_length=2.5, max_accept=4))
    batch.add(decode.Request("s", list(range(10)), 3, stream=True))
    batch.add(decode.Request("n", list(range(6)), 2, stream=False))
    outs, sizes = _run_batch(batch)
    streamed = [o for o in outs if o["rid"] == "s"]
    # prefill gives 1 token, then 2, 3, 2, (2 of 3: the end)
    assert [len(o["output_ids"]) for o in streamed] == [1, 2, 3, 2, 2]
    assert sum((o["output_ids"] for o in streamed), []) == list(range(10))
    assert [o["finished"] for o in streamed] == [False] * 4 + [True] and streamed[-1]["verify_ct"] == 4
    other = [o for o in outs if o["rid"] == "n"]
    assert len(other) == 1 and other[0]["output_ids"] == list(range(6)) and other[0]["completion_tokens"] == 6
    assert sizes == [2, 2, 2, 1, 1]
    # tokens of verify steps / requests in them: (2+3+2+2) + (2+3) over 4 + 2 request-steps
    assert batch.avg_accept_length() == 14 / 6
    batch.flush()
    assert batch.avg_accept_length() is None


def test_batch_without_speculation_gives_one_token_a_step_and_no_accept_length():
    batch = decode.DecodeBatch(decode.DecodeModel())
    batch.add(decode.Request("a", [1, 2, 3], 1, stream=True))
    outs, sizes = _run_batch(batch)
    assert [o["output_ids"] for o in outs] == [[1], [2], [3]] and sizes == [1, 1, 1]
    assert batch.avg_accept_length() is None and outs[-1]["verify_ct"] == 0


def test_batch_joins_at_the_next_step_and_drops_an_aborted_request():
    batch = decode.DecodeBatch(decode.DecodeModel())
    batch.add(decode.Request("a", [1, 2, 3], 1, stream=True))
    seconds, joined = batch.begin_step()
    batch.add(decode.Request("b", [4, 5], 1, stream=True))
    assert [r.rid for r in joined] == ["a"] and [r.rid for r in batch.running] == ["a"]
    batch.end_step()
    _, joined = batch.begin_step()
    assert [r.rid for r in joined] == ["b"] and len(batch.running) == 2
    batch.abort("a")
    outs, _ = batch.end_step()
    assert [o["rid"] for o in outs] == ["b"]


def test_decode_flags_reach_the_model_and_bad_ones_are_refused():
    args, _, _ = cli.parse_args(["--speculative-algorithm", "eagle3", "--speculative-num-draft-tokens", "4",
                                 "--emulator-step-ms", "8", "--emulator-step-ms-per-req", "2",
                                 "--emulator-accept-length", "2.5", "--emulator-spec-overhead", "0.3",
                                 "--emulator-spec-verify-cost", "4"])
    from sglang_emulator.engine import decode_settings
    assert decode_settings(args) == {"step_ms": 8.0, "per_req_ms": 2.0, "accept_length": 2.5, "spec_overhead": 0.3,
                                     "verify_cost": 4.0, "max_accept": 4, "run_jitter": 0.0}
    with pytest.raises(SystemExit):
        cli.parse_args(["--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "2",
                        "--emulator-accept-length", "3"])
    with pytest.raises(SystemExit):
        cli.parse_args(["--emulator-run-jitter", "1.5"])


def test_run_jitter_makes_runs_alternately_slower_and_faster_by_flush_count():
    from sglang_emulator.decode import DecodeBatch, DecodeModel, Request
    model = DecodeModel(step_ms=8, per_req_ms=2, run_jitter=0.1)
    assert model.step_seconds(1, flushes=0) == pytest.approx(0.009)   # 10 ms x 0.9
    assert model.step_seconds(1, flushes=1) == pytest.approx(0.011)   # 10 ms x 1.1
    assert DecodeModel(step_ms=8, per_req_ms=2).step_seconds(1, flushes=1) == pytest.approx(0.010)
    batch = DecodeBatch(model)
    batch.add(Request("a", [1, 2], 3, False))
    assert batch.begin_step()[0] == pytest.approx(0.009)
    batch.end_step()
    batch.flush()
    assert batch.begin_step()[0] == pytest.approx(0.011)
    assert "alternately 10 % slower and faster" in model.describe()
    with pytest.raises(ValueError):
        DecodeModel(run_jitter=1.0)


# ------------------------------------------------------------------ multi-node (emulator 1.5 on)
def test_multinode_flags_are_read_from_the_config_file_as_the_role_writes_them(tmp_path):
    cfg = tmp_path / "server.yaml"
    cfg.write_text('tp-size: 4\nnnodes: 2\nnode-rank: 1\ndist-init-addr: "10.0.0.10:50000"\n')
    args, unknown, _ = cli.parse_args(["--config", str(cfg)])
    assert (args.nnodes, args.node_rank, args.dist_init_addr, unknown) == (2, 1, "10.0.0.10:50000", [])
    assert "nnodes=2, node_rank=1, dist_init_addr='10.0.0.10:50000'" in cli.server_args_line(args)


@pytest.mark.parametrize("argv, words", [
    (["--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "h:1", "--tp", "2"], "--node-rank must be in"),
    (["--nnodes", "2", "--dist-init-addr", "h:1", "--tp", "3"], "multiple of --nnodes"),
    (["--nnodes", "2", "--tp", "2"], "HOST:PORT"),
    (["--nnodes", "2", "--tp", "2", "--dist-init-addr", "h:70000"], "HOST:PORT"),
])
def test_multinode_flags_that_sglang_would_refuse_are_refused(argv, words, capsys):
    with pytest.raises(SystemExit):
        cli.parse_args(argv)
    assert words in capsys.readouterr().err


def test_the_dist_init_address_splits_ipv6_too():
    from sglang_emulator.multinode import split_addr
    assert split_addr("[::1]:50000") == ("::1", 50000) and split_addr("10.0.0.1:1") == ("10.0.0.1", 1)
