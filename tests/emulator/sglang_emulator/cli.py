# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The command line: SGLang's flags (from argv and from ``--config FILE``) plus the ``--emulator-*`` flags; main()."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from sglang_emulator import BANNER, SCENARIOS
from sglang_emulator.decode import DecodeModel
from sglang_emulator.engine import Engine, decode_settings, install_parent_signals
from sglang_emulator.logs import emit_raw, emu, log, set_log_level
from sglang_emulator.multinode import split_addr
from sglang_emulator.replay import run_replay
from sglang_emulator.scenarios import ScenarioError, prepare_eagle


class ConfigError(ValueError):
    """A config file that the emulator cannot read."""


def parse_config(text):
    """The server config the deployment writes: one ``key: <JSON value>`` line per option (JSON scalars and
    lists are YAML too, so SGLang's YAML loader reads the same file), ``#`` comment lines and blank lines."""
    result = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if raw[:1] in " \t":
            raise ConfigError("line %d: expected 'key: <JSON value>' at the start of the line, got %r" % (lineno, raw))
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise ConfigError("line %d: expected 'key: <JSON value>', got %r" % (lineno, raw))
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise ConfigError("line %d: the value of %r is not JSON (%s)" % (lineno, key, exc))
        if isinstance(parsed, dict) or (isinstance(parsed, list) and any(isinstance(v, (list, dict)) for v in parsed)):
            raise ConfigError("line %d: %r: only scalars and flat lists are server options" % (lineno, key))
        if key in result:
            raise ConfigError("line %d: duplicate key %r" % (lineno, key))
        result[key] = parsed
    return result


def config_to_argv(config, store_true_keys):
    """Turn a config mapping into argv the way SGLang's ConfigArgumentMerger does."""
    argv = []
    for key, value in config.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if key.replace("-", "_") in store_true_keys:
                if value:
                    argv.append(flag)
            else:
                argv.extend([flag, str(value).lower()])
        elif isinstance(value, list):
            if value:
                argv.append(flag)
                argv.extend(str(item) for item in value)
        elif value is None:
            continue
        else:
            argv.extend([flag, str(value)])
    return argv


def build_parser():
    parser = argparse.ArgumentParser(
        prog="sglang-emulator",
        description="SGLang emulator (NOT SGLang): takes `python -m sglang.launch_server` arguments.",
        allow_abbrev=False,
    )
    add = parser.add_argument
    add("--model-path", "--model", dest="model_path", default="emulated/model")
    add("--tokenizer-path", dest="tokenizer_path", default=None)
    add("--served-model-name", dest="served_model_name", default=None)
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--tp-size", "--tp", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    add("--dp-size", "--dp", dest="dp_size", type=int, default=1)
    add("--speculative-algorithm", dest="speculative_algorithm", default=None)
    add("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path",
        default=None)
    add("--speculative-num-steps", dest="speculative_num_steps", type=int, default=None)
    add("--speculative-eagle-topk", dest="speculative_eagle_topk", type=int, default=None)
    add("--speculative-num-draft-tokens", dest="speculative_num_draft_tokens", type=int, default=None)
    add("--mem-fraction-static", dest="mem_fraction_static", type=float, default=None)
    add("--context-length", dest="context_length", type=int, default=None)
    add("--api-key", dest="api_key", default=None)
    add("--log-level", dest="log_level", default="info",
        choices=["debug", "info", "warning", "error", "critical"], type=str.lower)
    add("--trust-remote-code", dest="trust_remote_code", action="store_true")
    # SGLang's request log: every request's text is echoed into the server log (sglang/srt/utils/request_logger.py).
    add("--log-requests", dest="log_requests", action="store_true")
    # Older SGLang printed the prompt as is, not repr()'d: a prompt's newlines make new physical log lines.
    add("--emulator-raw-request-log", dest="emulator_raw_request_log", action="store_true")
    add("--config", dest="config", default=None)
    # Several nodes as one server (sglang_emulator.multinode): rank 0 at --dist-init-addr, the others join it.
    add("--nnodes", dest="nnodes", type=int, default=1)
    add("--node-rank", dest="node_rank", type=int, default=0)
    add("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None)
    # SGLang's load barrier (UNBALANCED_MODEL_LOADING_TIMEOUT_S): rank 0 waits this long for the others' load.
    add("--emulator-barrier-seconds", dest="emulator_barrier_seconds", type=float, default=480.0)
    # A follower that joins late (a slow node, a firewall): seconds before it connects to rank 0.
    add("--emulator-join-delay", dest="emulator_join_delay", type=float, default=0.0)
    add("--emulator-scenario", dest="emulator_scenario", choices=SCENARIOS, default="normal")
    add("--emulator-load-seconds", dest="emulator_load_seconds", type=float, default=3.0)
    add("--emulator-shards", dest="emulator_shards", type=int, default=4)
    add("--emulator-capture-seconds", dest="emulator_capture_seconds", type=float, default=1.0)
    add("--emulator-child-die-after", dest="emulator_child_die_after", type=float, default=2.0)
    # SGLang #35884: health requests left resident in a busy scheduler; this many at once crash it (0: never).
    add("--emulator-health-resident-crash", dest="emulator_health_resident_crash", type=int, default=3)
    add("--emulator-warmup-seconds", dest="emulator_warmup_seconds", type=float, default=0.0)
    # After SIGTERM: seconds between two looks at the requests still held (SGLang 0.5.23 looks every 5 s).
    add("--emulator-drain-interval", dest="emulator_drain_interval", type=float, default=0.5)
    add("--emulator-replay", dest="emulator_replay", default=None)
    add("--emulator-replay-speed", dest="emulator_replay_speed", type=float, default=100.0)
    add("--emulator-sglang-root", dest="emulator_sglang_root", default=None)
    # The decode model (sglang_emulator.decode.DecodeModel): what a step of n running requests costs, and what
    # speculative decoding gives and costs. Its tokens/s are emulated figures, for a benchmark's shape only.
    add("--emulator-step-ms", dest="emulator_step_ms", type=float, default=1.0)
    add("--emulator-step-ms-per-req", dest="emulator_step_ms_per_req", type=float, default=0.0)
    add("--emulator-accept-length", dest="emulator_accept_length", type=float, default=2.47)
    add("--emulator-spec-overhead", dest="emulator_spec_overhead", type=float, default=0.0)
    add("--emulator-spec-verify-cost", dest="emulator_spec_verify_cost", type=float, default=None)
    # Runs alternately this fraction slower and faster (by flush_cache count): a benchmark's spread, reproducibly.
    add("--emulator-run-jitter", dest="emulator_run_jitter", type=float, default=0.0)
    return parser


def _store_true_keys(parser):
    keys = set()
    for action in parser._actions:  # noqa: SLF001 - same introspection SGLang does
        if isinstance(action, argparse._StoreTrueAction):  # noqa: SLF001
            keys.add(action.dest)
            keys.update(opt[2:].replace("-", "_") for opt in action.option_strings if opt.startswith("--"))
    return keys


def parse_args(argv):
    """Parse argv like SGLang: config file values first, CLI flags override them.

    Returns (namespace, unknown_args, ignored_config_keys)."""
    parser = build_parser()
    argv = list(argv)
    ignored = []
    if argv.count("--config") > 1:
        parser.error("Multiple config files specified! Only one allowed.")
    if "--config" in argv:
        idx = argv.index("--config")
        if idx == len(argv) - 1:
            parser.error("No config file specified after --config flag!")
        path = argv[idx + 1]
        if os.path.splitext(path)[1].lower() not in (".yaml", ".yml"):
            parser.error("Config file must be YAML format, got: %s" % os.path.splitext(path)[1])
        try:
            with open(path, encoding="utf-8") as handle:
                config = parse_config(handle.read())
        except OSError as exc:
            parser.error("Config file not found: %s (%s)" % (path, exc.strerror))
        except ConfigError as exc:
            parser.error("Config file %s: %s" % (path, exc))
        for key in list(config):
            if key.replace("-", "_").startswith("emulator_") or key in ("config",):
                ignored.append(key)
                del config[key]
        argv = config_to_argv(config, _store_true_keys(parser)) + argv[:idx] + argv[idx + 2:]
    args, unknown = parser.parse_known_args(argv)
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    if args.tokenizer_path is None:
        args.tokenizer_path = args.model_path
    if args.tp_size < 1:
        parser.error("--tp-size must be >= 1")
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        parser.error("--node-rank must be in [0, --nnodes) and --nnodes >= 1")
    if args.nnodes > 1:
        if args.tp_size % args.nnodes:
            parser.error("--tp-size must be a multiple of --nnodes")
        try:
            split_addr(args.dist_init_addr)
        except ValueError as exc:
            parser.error(str(exc))
    if args.emulator_shards < 1:
        parser.error("--emulator-shards must be >= 1")
    if args.emulator_scenario == "replay" and not args.emulator_replay:
        parser.error("--emulator-scenario replay needs --emulator-replay FILE")
    if args.speculative_algorithm:
        args.speculative_algorithm = args.speculative_algorithm.upper()
    try:
        DecodeModel(speculative=bool(args.speculative_algorithm), **decode_settings(args))
    except ValueError as exc:
        parser.error("the decode model: %s" % exc)
    return args, unknown, ignored


def server_args_line(args):
    def q(value):
        return repr(value)
    fields = [
        ("model_path", args.model_path), ("tokenizer_path", args.tokenizer_path), ("tokenizer_mode", "auto"),
        ("skip_tokenizer_init", False), ("load_format", "auto"), ("trust_remote_code", args.trust_remote_code),
        ("context_length", args.context_length), ("is_embedding", False), ("host", args.host),
        ("port", args.port), ("mem_fraction_static", args.mem_fraction_static or 0.79),
        ("tp_size", args.tp_size), ("dp_size", args.dp_size), ("nnodes", args.nnodes),
        ("node_rank", args.node_rank), ("dist_init_addr", args.dist_init_addr), ("log_level", args.log_level),
        ("api_key", args.api_key),  # as SGLang logs it: in clear (the deployment must redact it)
        ("served_model_name", args.served_model_name),
        ("speculative_algorithm", args.speculative_algorithm),
        ("speculative_draft_model_path", args.speculative_draft_model_path),
        ("speculative_num_steps", args.speculative_num_steps),
        ("speculative_eagle_topk", args.speculative_eagle_topk),
        ("speculative_num_draft_tokens", args.speculative_num_draft_tokens),
    ]
    return "server_args=ServerArgs(%s)" % ", ".join("%s=%s" % (k, q(v)) for k, v in fields)


def main(argv=None):
    emit_raw(BANNER + "\n")
    args, unknown, ignored = parse_args(sys.argv[1:] if argv is None else argv)
    set_log_level(args.log_level)
    if unknown:
        emu("ignoring SGLang options the emulator does not model: %s" % " ".join(unknown))
    if ignored:
        emu("ignoring emulator keys in the config file (emulator options are flags only): %s" % ", ".join(ignored))
    eagle = None
    if args.emulator_scenario == "eagle":
        try:
            eagle = prepare_eagle(args)
        except ScenarioError as exc:
            emu("ERROR: %s" % exc)
            return 2
    engine = Engine(args, eagle)
    if args.emulator_scenario != "replay":
        emu("decode model (emulated tokens/s): %s"
            % DecodeModel(speculative=bool(args.speculative_algorithm), **decode_settings(args)).describe())
    install_parent_signals(engine)
    if args.emulator_scenario != "replay":  # a replayed log brings its own startup lines
        if args.speculative_algorithm:
            emit_raw("WARNING:sglang.srt.server_args:Overlap scheduler is disabled because of using eagle "
                     "speculative decoding.\n")
        log(server_args_line(args))
    if args.emulator_scenario == "replay":
        engine.start_children()
        engine.wait_schedulers()
        return run_replay(engine, args)
    if args.emulator_scenario == "hang":
        engine.start_children()
        while True:
            time.sleep(3600)
    engine.run()
    return 0
