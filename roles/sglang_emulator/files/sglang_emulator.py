#!/usr/bin/env python3
# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang emulator: NOT SGLang.

A stdlib-only stand-in for ``python -m sglang.launch_server`` on machines without a GPU (tests, rehearsals).
It takes SGLang's command line, prints SGLang's real log lines with SGLang's timing shape, starts real child
processes (schedulers and a detokenizer) and serves SGLang's HTTP endpoints with fake, deterministic text.
Scenarios (``--emulator-scenario``) reproduce the failure modes the deployment has to survive.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import http.server
import importlib.util
import json
import multiprocessing
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

VERSION = "1.0"
BANNER = (
    "[EMULATOR] sglang-emulator %s: this is NOT SGLang; it emulates SGLang's HTTP API and log lines "
    "for rehearsals and tests" % VERSION
)
SCENARIOS = ("normal", "crash_loading", "eagle", "child_dies", "hang", "health_503", "port_taken", "replay")
EAGLE_ALGORITHMS = ("EAGLE", "EAGLE3")
EAGLE_ATTRIBUTE = "spec_disable_batch_threshold"
EAGLE_CLASS = "EAGLEWorkerV2"
EAGLE_FILE = os.path.join("srt", "speculative", "eagle_worker_v2.py")
HEALTH_GENERATE_TIMEOUT = 1.0
REQUEST_TIMEOUT = 60.0
READY_LINE = "The server is fired up and ready to roll!"
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."
FAKE_GPU_MEM = 78.58
FAKE_VOCAB = (
    "the", "model", "answers", "with", "a", "short", "and", "deterministic", "sentence", "about",
    "speculative", "decoding", "draft", "tokens", "are", "verified", "by", "target", "in", "one",
    "forward", "pass", "so", "latency", "drops", "when", "acceptance", "is", "high", "emulated",
)
HTTP_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                405: "Method Not Allowed", 500: "Internal Server Error", 503: "Service Unavailable"}


# ---------------------------------------------------------------------------------------------------------------
# Logging: one os.write per line, so lines of several processes sharing the log file never mix.
# ---------------------------------------------------------------------------------------------------------------

def _now_prefix(rank=None):
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    if rank is None:
        return "[%s] " % stamp
    return "[%s TP%d] " % (stamp, rank)


def emit_raw(text):
    """Write text as is (it carries its own line ends) to stderr, unbuffered."""
    data = text.encode("utf-8", "replace")
    while data:
        try:
            written = os.write(2, data)
        except InterruptedError:
            continue
        except OSError:
            return
        data = data[written:]


_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_MIN_LEVEL = [20]


def set_log_level(name):
    _MIN_LEVEL[0] = _LEVELS.get(name, 20)


def log(msg, rank=None, level="info"):
    """Log one SGLang-style line: ``[date time] msg`` (main process) or ``[date time TPn] msg`` (scheduler)."""
    if _LEVELS[level] < _MIN_LEVEL[0]:
        return
    emit_raw("".join(_now_prefix(rank) + line + "\n" for line in msg.split("\n")))


def log_block(lines_text, rank=None):
    """Log an error block (traceback): prefix on the first line only, like Python's logging."""
    emit_raw(_now_prefix(rank) + lines_text.rstrip("\n") + "\n")


def emu(msg):
    """An emulator-only line, always marked ``[EMULATOR]``."""
    emit_raw("[EMULATOR] %s\n" % msg)


# ---------------------------------------------------------------------------------------------------------------
# Config file: SGLang's --config takes a YAML mapping of option names. A tiny flat-YAML parser (scalars, flow lists).
# ---------------------------------------------------------------------------------------------------------------

class ConfigError(ValueError):
    """A config file that the emulator (and SGLang) would refuse."""


_YAML_TRUE = ("true", "yes", "on")
_YAML_FALSE = ("false", "no", "off")
_YAML_NULL = ("", "~", "null")
_INT_RE = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")
_FLOAT_RE = re.compile(r"^[-+]?(\d[\d_]*)?\.?\d*([eE][-+]?\d+)?$")


def _strip_comment(text):
    """Drop a ``# comment`` that is outside quotes (YAML: '#' after whitespace or at the start)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i]
    return text


def _parse_quoted(text, lineno):
    quote = text[0]
    if quote == "'":
        out, i = [], 1
        while i < len(text):
            if text[i] == "'":
                if text[i + 1:i + 2] == "'":
                    out.append("'")
                    i += 2
                    continue
                return "".join(out), text[i + 1:]
            out.append(text[i])
            i += 1
    else:
        escapes = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "/": "/", "r": "\r", "0": "\0"}
        out, i = [], 1
        while i < len(text):
            ch = text[i]
            if ch == "\\" and i + 1 < len(text):
                out.append(escapes.get(text[i + 1], "\\" + text[i + 1]))
                i += 2
                continue
            if ch == '"':
                return "".join(out), text[i + 1:]
            out.append(ch)
            i += 1
    raise ConfigError("line %d: unterminated quoted string" % lineno)


def parse_scalar(text, lineno=0):
    """A YAML 1.1 plain or quoted scalar, as PyYAML's safe_load reads it (the common cases)."""
    text = text.strip()
    if text[:1] in ("'", '"'):
        value, rest = _parse_quoted(text, lineno)
        if rest.strip():
            raise ConfigError("line %d: text after a quoted string: %r" % (lineno, rest.strip()))
        return value
    low = text.lower()
    if low in _YAML_NULL:
        return None
    if low in _YAML_TRUE:
        return True
    if low in _YAML_FALSE:
        return False
    if _INT_RE.match(text):
        return int(text.replace("_", ""))
    if any(c.isdigit() for c in text) and _FLOAT_RE.match(text) and ("." in text or "e" in low):
        try:
            return float(text.replace("_", ""))
        except ValueError:
            pass
    if low in (".inf", "+.inf"):
        return float("inf")
    if low == "-.inf":
        return float("-inf")
    if text[:1] in ("{", "&", "*", "!", "|", ">"):
        raise ConfigError("line %d: only flat scalars and flow lists are supported, got %r" % (lineno, text))
    return text


def _split_flow_items(body, lineno):
    items, cur, quote = [], [], None
    for ch in body:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch in "[]{}":
            raise ConfigError("line %d: nested collections are not supported" % lineno)
        elif ch == ",":
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if quote:
        raise ConfigError("line %d: unterminated quoted string" % lineno)
    items.append("".join(cur))
    if items and not items[-1].strip():
        items.pop()  # trailing comma
    return items


def parse_value(text, lineno=0):
    text = text.strip()
    if text.startswith("["):
        if not text.endswith("]"):
            raise ConfigError("line %d: unterminated flow list" % lineno)
        body = text[1:-1]
        if not body.strip():
            return []
        return [parse_scalar(item, lineno) for item in _split_flow_items(body, lineno)]
    return parse_scalar(text, lineno)


def parse_flat_yaml(text):
    """Parse a flat YAML mapping ``key: value`` (scalars, flow lists) into a dict, keeping the order."""
    result = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).rstrip()
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        if line[0] in " \t":
            raise ConfigError("line %d: nested (indented) YAML is not supported: %r" % (lineno, raw))
        if line.startswith("- "):
            raise ConfigError("line %d: the config must be a mapping, not a list" % lineno)
        match = re.match(r"^([A-Za-z0-9_.\-]+|'[^']*'|\"[^\"]*\")\s*:(\s+(.*))?$", line)
        if not match:
            raise ConfigError("line %d: expected 'key: value', got %r" % (lineno, raw))
        key = match.group(1).strip("'\"")
        if key in result:
            raise ConfigError("line %d: duplicate key %r" % (lineno, key))
        result[key] = parse_value(match.group(3) or "", lineno)
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


# ---------------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------------

def build_parser():
    parser = argparse.ArgumentParser(
        prog="sglang_emulator.py",
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
    add("--config", dest="config", default=None)
    add("--emulator-scenario", dest="emulator_scenario", choices=SCENARIOS, default="normal")
    add("--emulator-load-seconds", dest="emulator_load_seconds", type=float, default=3.0)
    add("--emulator-shards", dest="emulator_shards", type=int, default=4)
    add("--emulator-capture-seconds", dest="emulator_capture_seconds", type=float, default=1.0)
    add("--emulator-child-die-after", dest="emulator_child_die_after", type=float, default=2.0)
    add("--emulator-replay", dest="emulator_replay", default=None)
    add("--emulator-replay-speed", dest="emulator_replay_speed", type=float, default=100.0)
    add("--emulator-sglang-root", dest="emulator_sglang_root", default=None)
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
                config = parse_flat_yaml(handle.read())
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
    if args.emulator_shards < 1:
        parser.error("--emulator-shards must be >= 1")
    if args.emulator_scenario == "replay" and not args.emulator_replay:
        parser.error("--emulator-scenario replay needs --emulator-replay FILE")
    if args.speculative_algorithm:
        args.speculative_algorithm = args.speculative_algorithm.upper()
    return args, unknown, ignored


# ---------------------------------------------------------------------------------------------------------------
# The EAGLEWorkerV2 early-init check (ast, on the INSTALLED sglang file)
# ---------------------------------------------------------------------------------------------------------------

def find_sglang_root(explicit=None):
    """Directory of the installed ``sglang`` package, found without importing it. None when absent."""
    if explicit:
        for cand in (explicit, os.path.join(explicit, "sglang")):
            if os.path.isfile(os.path.join(cand, EAGLE_FILE)):
                return os.path.abspath(cand)
        return None
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _walk_no_nested(node):
    """ast.walk over what runs when the statement runs: not into the bodies of nested functions and classes."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        stack = node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
    elif isinstance(node, ast.ClassDef):
        stack = node.decorator_list + node.bases + [k.value for k in node.keywords]
    else:
        stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        for child in ast.iter_child_nodes(cur):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            stack.append(child)


def _assigns_attribute(stmt, attr, me="self"):
    for node in _walk_no_nested(stmt):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and getattr(node, "value", None) is not None:
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if (isinstance(sub, ast.Attribute) and sub.attr == attr and isinstance(sub.value, ast.Name)
                        and sub.value.id == me):
                    return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id == me
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == attr):
            return True
    return False


def _contains_call(stmt):
    return any(isinstance(node, ast.Call) for node in _walk_no_nested(stmt))


def analyse_eagle_worker(source, filename="eagle_worker_v2.py", class_name=EAGLE_CLASS, attr=EAGLE_ATTRIBUTE):
    """Decide whether ``self.<attr>`` is assigned in ``<class>.__init__`` before the first statement that can raise.

    Statements of ``__init__`` are read in order. One that assigns the attribute (``self.attr = ...``,
    ``self.attr: T = ...``, ``setattr(self, "attr", ...)``, also inside an if/try at that level) marks it assigned.
    Otherwise the first statement that contains a call is the one that can raise (where the draft worker init
    fails on this hardware). Returns a dict: class_found, init_found, assigned_before (bool), assigned_lineno,
    raising_lineno, raising_source."""
    result = {"class_found": False, "init_found": False, "assigned_before": False, "assigned_lineno": None,
              "raising_lineno": None, "raising_source": None}
    tree = ast.parse(source, filename=filename)
    cls = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        return result
    result["class_found"] = True
    init = next((n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == "__init__"), None)
    if init is None:
        return result
    result["init_found"] = True
    params = list(getattr(init.args, "posonlyargs", [])) + list(init.args.args)
    me = params[0].arg if params else "self"
    for stmt in init.body:
        if _assigns_attribute(stmt, attr, me):
            if result["assigned_lineno"] is None:
                result["assigned_lineno"] = stmt.lineno
            continue
        if _contains_call(stmt):
            result["raising_lineno"] = stmt.lineno
            segment = ast.get_source_segment(source, stmt) or ""
            result["raising_source"] = segment.strip().splitlines()[0] if segment.strip() else ""
            break
    result["assigned_before"] = result["assigned_lineno"] is not None
    return result


def _def_lineno(path, pattern, default):
    try:
        with open(path, encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, 1):
                if re.match(pattern, line):
                    return lineno
    except OSError:
        pass
    return default


def eagle_plan(root):
    """Read the installed eagle_worker_v2.py and decide what the eagle scenario does."""
    path = os.path.join(root, EAGLE_FILE)
    with open(path, "rb") as handle:
        data = handle.read()
    analysis = analyse_eagle_worker(data.decode("utf-8"), filename=path)
    analysis.update({"path": path, "sha256": hashlib.sha256(data).hexdigest(), "root": root})
    analysis["will_crash"] = not analysis["assigned_before"]
    sched = os.path.join(root, "srt", "managers", "scheduler.py")
    analysis["lines"] = {
        "run_scheduler_process": _def_lineno(sched, r"^def run_scheduler_process\(", 6310) + 40,
        "event_loop_overlap": _def_lineno(sched, r"^    def event_loop_overlap\(", 2061) + 20,
        "run_batch": _def_lineno(sched, r"^    def run_batch\(", 4614) + 60,
        "forward_batch_generation": _def_lineno(path, r"^    def forward_batch_generation\(", 1416) + 30,
    }
    return analysis


# ---------------------------------------------------------------------------------------------------------------
# Fake model
# ---------------------------------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def count_prompt_tokens(prompt):
    if isinstance(prompt, list):
        return max(1, len(prompt))
    return max(1, len(_TOKEN_RE.findall(str(prompt or ""))))


def fake_output_ids(prompt, max_new_tokens):
    """Deterministic token ids derived from the prompt."""
    seed = hashlib.sha256(json.dumps(prompt, sort_keys=True).encode("utf-8")).digest()
    ids, block = [], seed
    while len(ids) < max_new_tokens:
        ids.extend(b % len(FAKE_VOCAB) for b in block)
        block = hashlib.sha256(block).digest()
    return ids[:max_new_tokens]


def detokenize(ids):
    return "".join(" " + FAKE_VOCAB[i] for i in ids)


# ---------------------------------------------------------------------------------------------------------------
# Child processes
# ---------------------------------------------------------------------------------------------------------------

def _set_title(title):
    try:
        import setproctitle  # type: ignore[import-not-found]
    except ImportError:
        return
    setproctitle.setproctitle(title)


def _watch_parent(parent_pid):
    """Children die with their parent, as SGLang's kill_itself_when_parent_died does."""
    def loop():
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(0.2)
    threading.Thread(target=loop, daemon=True).start()


def _tqdm_line(desc, n, total, elapsed, unit_s):
    pct = int(100 * n / total)
    remaining = (total - n) * unit_s
    fmt = lambda s: "%02d:%02d" % (int(s) // 60, int(s) % 60)  # noqa: E731
    if n == 0:
        rate = "?it/s"
        rem = "?"
    else:
        rate = "%5.2fs/it" % unit_s if unit_s >= 1 else "%5.2fit/s" % (1.0 / max(unit_s, 1e-3))
        rem = fmt(remaining)
    return "\r%s: %3d%% Completed | %d/%d [%s<%s, %s]" % (desc, pct, n, total, fmt(elapsed), rem, rate)


class SchedulerEmu:
    """What one scheduler process (TP rank) does: load, then serve requests from the tokenizer manager."""

    def __init__(self, rank, cfg, conn, detok_conn):
        self.rank = rank
        self.cfg = cfg
        self.conn = conn
        self.detok_conn = detok_conn
        self.first_client_request = True
        self.die_at = None

    def log(self, msg, level="info"):
        log(msg, rank=self.rank, level=level)

    def sleep(self, seconds):
        if seconds > 0:
            time.sleep(seconds)

    # -- loading ------------------------------------------------------------------------------------------------
    def load(self):
        cfg = self.cfg
        scenario = cfg["scenario"]
        if cfg.get("quiet_load"):
            return
        self.log("Init torch distributed begin.")
        self.sleep(0.05)
        self.log("Init torch distributed ends. mem usage=0.00 GB")
        self.log("Load weight begin. avail mem=%.2f GB" % FAKE_GPU_MEM)
        if self.rank == 0:
            self.log("Using model weights format ['*.safetensors']")
        if scenario == "hang":
            while True:
                time.sleep(3600)
        shards = cfg["shards"]
        per_shard = cfg["load_seconds"] / shards
        start = time.monotonic()
        if self.rank == 0:
            emit_raw(_tqdm_line("Loading safetensors checkpoint shards", 0, shards, 0, per_shard) + "\n")
        for i in range(1, shards + 1):
            self.sleep(per_shard)
            if scenario == "crash_loading" and i > shards // 2 and self.rank == 0:
                self.crash(self.oom_traceback(), during_init=True)
            if self.rank == 0:
                emit_raw(_tqdm_line("Loading safetensors checkpoint shards", i, shards,
                                    time.monotonic() - start, per_shard) + "\n")
        if self.rank == 0:
            emit_raw(_tqdm_line("Loading safetensors checkpoint shards", shards, shards,
                                time.monotonic() - start, per_shard) + "\n\n")
        weights = 15.11
        self.log("Load weight end. type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB."
                 % (cfg["arch"], FAKE_GPU_MEM - weights, weights))
        kv_tokens = cfg["max_total_num_tokens"]
        self.log("KV Cache is allocated. #tokens: %d, K size: 1.25 GB, V size: 1.25 GB" % kv_tokens)
        self.log("Memory pool end. avail mem=%.2f GB" % (FAKE_GPU_MEM - weights - 2.76))
        self.capture("Capture cuda graph", FAKE_GPU_MEM - weights - 3.33)
        if cfg["speculative"]:
            self.load_draft()
        self.log("max_total_num_tokens=%d, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                 "max_running_requests=128, context_len=%d, available_gpu_mem=%.2f GB"
                 % (kv_tokens, cfg["context_len"], FAKE_GPU_MEM - weights - 4.0))

    def capture(self, what, avail):
        cfg = self.cfg
        self.log("%s begin. This can take up to several minutes. avail mem=%.2f GB" % (what, avail))
        if what == "Capture cuda graph":
            self.log("Capture cuda graph bs [1, 2, 4, 8]")
        t0 = time.monotonic()
        steps = 4
        if self.rank == 0:
            # tqdm on a file: carriage returns, no newline until the bar closes (a partial line meanwhile)
            emit_raw("\r  0%|          | 0/4 [00:00<?, ?it/s]")
            for i, bs in enumerate((8, 4, 2, 1), 1):
                self.sleep(cfg["capture_seconds"] / steps)
                fill = "\u2588" * (10 * i // steps)
                emit_raw("\rCapturing batches (bs=%d avail_mem=%.2f GB): %3d%%|%-10s| %d/%d [00:00<00:00, %5.2fit/s]"
                         % (bs, avail - 0.05 * i, 100 * i // steps, fill, i, steps,
                            steps / max(cfg["capture_seconds"], 0.01)))
            emit_raw("\n")
        else:
            self.sleep(cfg["capture_seconds"])
        self.log("%s end. Time elapsed: %.2f s. mem usage=0.54 GB. avail mem=%.2f GB."
                 % (what, time.monotonic() - t0, avail - 0.54))

    def load_draft(self):
        cfg = self.cfg
        self.log("Init torch distributed begin.")
        self.log("Init torch distributed ends. mem usage=0.00 GB")
        self.log("Load weight begin. avail mem=59.60 GB")
        self.sleep(min(0.5, cfg["load_seconds"] / 4))
        plan = cfg.get("eagle")
        if plan is not None:
            # The draft worker construction fails on this hardware at the first statement that can raise; the
            # failure is swallowed higher up and the server goes on without a working draft worker.
            self.log("WARNING: EAGLE draft worker initialization failed in %s.__init__ at %s:%s (%s): "
                     "RuntimeError: draft model initialization failed on this device. Falling back: the server "
                     "starts, speculative decoding state may be incomplete."
                     % (EAGLE_CLASS, plan["path"], plan["raising_lineno"], plan["raising_source"]), level="warning")
            return
        self.log("Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=57.46 GB, "
                 "mem usage=2.15 GB.")
        self.log("KV Cache is allocated. #tokens: %d, K size: 0.04 GB, V size: 0.04 GB"
                 % cfg["max_total_num_tokens"])
        self.log("Memory pool end. avail mem=57.37 GB")
        self.capture("Capture draft cuda graph", 58.05)
        self.capture("Capture draft extend cuda graph", 58.20)

    # -- crashes ------------------------------------------------------------------------------------------------
    def _site(self):
        return self.cfg["site_root"]

    def oom_traceback(self):
        site = self._site()
        return "\n".join([
            "Traceback (most recent call last):",
            '  File "%s/srt/managers/scheduler.py", line 6350, in run_scheduler_process' % site,
            "    scheduler = Scheduler(server_args, port_args)",
            '  File "%s/srt/managers/scheduler.py", line 402, in __init__' % site,
            "    self.init_model_worker()",
            '  File "%s/srt/managers/scheduler.py", line 611, in init_model_worker' % site,
            "    self.tp_worker = TpModelWorker(**worker_kwargs)",
            '  File "%s/srt/managers/tp_worker.py", line 247, in __init__' % site,
            "    self._init_model_runner()",
            '  File "%s/srt/model_executor/model_runner.py", line 412, in __init__' % site,
            "    self.initialize(min_per_gpu_memory)",
            '  File "%s/srt/model_executor/model_runner.py", line 517, in initialize' % site,
            "    self.load_model()",
            '  File "%s/srt/model_executor/model_runner.py", line 983, in load_model' % site,
            "    self.model = self.loader.load_model(",
            '  File "%s/srt/model_loader/loader.py", line 680, in load_model' % site,
            "    self.load_weights_and_postprocess(",
            '  File "%s/srt/model_loader/loader.py", line 701, in load_weights_and_postprocess' % site,
            "    model.load_weights(weights)",
            '  File "%s/srt/models/llama.py", line 652, in load_weights' % site,
            "    weight_loader(param, loaded_weight, shard_id)",
            '  File "%s/srt/layers/linear.py", line 824, in weight_loader' % site,
            "    loaded_weight = loaded_weight.narrow(output_dim, start_idx, shard_size).contiguous()",
            "                    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU %d has a total capacity "
            "of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB "
            "memory in use. Of the allocated memory 77.20 GiB is allocated by PyTorch, and 312.45 MiB is reserved "
            "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)" % self.rank,
        ])

    def eagle_traceback(self):
        site = self._site()
        lines = self.cfg["eagle"]["lines"]
        return "\n".join([
            "Traceback (most recent call last):",
            '  File "%s/srt/managers/scheduler.py", line %d, in run_scheduler_process'
            % (site, lines["run_scheduler_process"]),
            "    scheduler.run_event_loop()",
            '  File "%s/srt/managers/scheduler.py", line %d, in event_loop_overlap'
            % (site, lines["event_loop_overlap"]),
            "    batch_result = self.run_batch(batch)",
            "                   ^^^^^^^^^^^^^^^^^^^^^",
            '  File "%s/srt/managers/scheduler.py", line %d, in run_batch' % (site, lines["run_batch"]),
            "    batch_result = self.model_worker.forward_batch_generation(model_worker_batch)",
            "                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            '  File "%s/srt/speculative/eagle_worker_v2.py", line %d, in forward_batch_generation'
            % (site, lines["forward_batch_generation"]),
            "    if batch.batch_size() > self.%s:" % EAGLE_ATTRIBUTE,
            "                            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            "AttributeError: '%s' object has no attribute '%s'" % (EAGLE_CLASS, EAGLE_ATTRIBUTE),
        ])

    def crash(self, traceback_text, during_init):
        """SGLang's run_scheduler_process: log the exception, SIGQUIT the parent, end."""
        log_block("Scheduler hit an exception: " + traceback_text, rank=self.rank)
        try:
            os.kill(self.cfg["parent_pid"], signal.SIGQUIT)
        except OSError:
            pass
        os._exit(1 if during_init else 0)

    # -- serving ------------------------------------------------------------------------------------------------
    def serve(self):
        while True:
            timeout = 0.2
            if self.die_at is not None:
                left = self.die_at - time.monotonic()
                if left <= 0:
                    os.kill(os.getpid(), signal.SIGKILL)
                timeout = min(timeout, max(left, 0.01))
            if not self.conn.poll(timeout):
                continue
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                os._exit(0)
            kind = msg.get("type")
            if kind == "server_ready":
                if self.cfg["scenario"] == "child_dies" and self.rank == 0:
                    self.die_at = time.monotonic() + self.cfg["child_die_after"]
            elif kind == "generate" and self.rank == 0:
                self.generate(msg)

    def generate(self, req):
        cfg = self.cfg
        prompt_tokens = count_prompt_tokens(req["prompt"])
        max_new = req["max_new_tokens"]
        is_health = req.get("health", False)
        if not is_health:
            self.log("Prefill batch. #new-seq: 1, #new-token: %d, #cached-token: 0, token usage: %.2f, "
                     "#running-req: 0, #queue-req: 0, " % (prompt_tokens, prompt_tokens / cfg["max_total_num_tokens"]))
        client = not is_health and not req.get("warmup", False)
        if client and self.first_client_request:
            self.first_client_request = False
            plan = cfg.get("eagle")
            if plan is not None and plan["will_crash"]:
                self.crash(self.eagle_traceback(), during_init=False)
        ids = fake_output_ids(req["prompt"], max_new)
        if max_new > 1 and not is_health:
            time.sleep(min(0.001 * max_new, 0.2))
            spec = ", accept len: 2.47" if cfg["speculative"] else ""
            self.log("Decode batch. #running-req: 1, #token: %d, token usage: %.2f%s, cuda graph: True, "
                     "gen throughput (token/s): %.2f, #queue-req: 0, "
                     % (prompt_tokens + max_new, (prompt_tokens + max_new) / cfg["max_total_num_tokens"], spec,
                        163.41 if cfg["speculative"] else 71.88))
        self.detok_conn.send({"rid": req["rid"], "output_ids": ids, "prompt_tokens": prompt_tokens,
                              "max_new_tokens": max_new})


def scheduler_main(rank, cfg, conn, detok_conn):
    """Entry of a scheduler child process."""
    _set_title("sglang::scheduler_TP%d" % rank)
    set_log_level(cfg["log_level"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(cfg["parent_pid"])
    sched = SchedulerEmu(rank, cfg, conn, detok_conn)
    sched.load()
    conn.send({"type": "init_done", "rank": rank, "max_total_num_tokens": cfg["max_total_num_tokens"]})
    sched.serve()


def detokenizer_main(cfg, in_conn, out_conn):
    """Entry of the detokenizer child process: token ids in, text out."""
    _set_title("sglang::detokenizer")
    set_log_level(cfg["log_level"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(cfg["parent_pid"])
    while True:
        try:
            msg = in_conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        ids = msg["output_ids"]
        out_conn.send({"rid": msg["rid"], "text": detokenize(ids), "output_ids": ids,
                       "prompt_tokens": msg["prompt_tokens"], "completion_tokens": len(ids)})


# ---------------------------------------------------------------------------------------------------------------
# Parent: tokenizer manager + HTTP server
# ---------------------------------------------------------------------------------------------------------------

def direct_children(pid):
    """PIDs whose parent is pid, read from /proc (empty where there is no /proc)."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid and fields[0] != b"Z":
            found.append(int(name))
    return found


class Engine:
    """The main process: owns the children, forwards requests, collects outputs."""

    def __init__(self, args, eagle):
        self.args = args
        self.scenario = args.emulator_scenario
        self.ready = False          # ready line printed
        self.up = False             # /health answers 200
        self.warmup_token = uuid.uuid4().hex
        self.children = []
        self.sched_conns = []
        self.pending = {}
        self.pending_lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.server = None
        self.last_receive = time.time()
        self.eagle = eagle
        self.cfg = {
            "scenario": self.scenario,
            "log_level": args.log_level,
            "quiet_load": self.scenario == "replay",
            "parent_pid": os.getpid(),
            "tp_size": args.tp_size,
            "load_seconds": max(0.0, args.emulator_load_seconds),
            "shards": args.emulator_shards,
            "capture_seconds": max(0.0, args.emulator_capture_seconds),
            "child_die_after": max(0.0, args.emulator_child_die_after),
            "speculative": bool(args.speculative_algorithm),
            "eagle": eagle,
            "arch": "LlamaForCausalLM",
            "max_total_num_tokens": 20480,
            "context_len": args.context_length or 131072,
            "site_root": (eagle or {}).get("root") or "/usr/local/lib/python3.12/dist-packages/sglang",
        }

    # -- children -----------------------------------------------------------------------------------------------
    def start_children(self):
        ctx = multiprocessing.get_context("spawn")
        detok_in_r, detok_in_w = ctx.Pipe(duplex=False)
        detok_out_r, detok_out_w = ctx.Pipe(duplex=False)
        detok = ctx.Process(target=detokenizer_main, args=(self.cfg, detok_in_r, detok_out_w),
                            name="sglang::detokenizer", daemon=False)
        detok.start()
        self.children.append(detok)
        for rank in range(self.args.tp_size):
            parent_end, child_end = ctx.Pipe(duplex=True)
            proc = ctx.Process(target=scheduler_main, args=(rank, self.cfg, child_end, detok_in_w),
                               name="sglang::scheduler_TP%d" % rank, daemon=False)
            proc.start()
            child_end.close()
            self.children.append(proc)
            self.sched_conns.append(parent_end)
        # The parent keeps its copy of detok_in_w open: the detokenizer outlives a dead scheduler, as in SGLang.
        self._detok_in_w = detok_in_w
        detok_in_r.close()
        detok_out_w.close()
        self.detok_out = detok_out_r
        threading.Thread(target=self._collect_outputs, daemon=True).start()

    def wait_schedulers(self):
        """Block until every scheduler reported init_done (SGLang's _wait_for_scheduler_ready)."""
        for rank, conn in enumerate(self.sched_conns):
            proc = self.children[rank + 1]
            while True:
                if conn.poll(0.2):
                    try:
                        conn.recv()
                    except (EOFError, OSError):
                        self._scheduler_died(rank, proc)
                    break
                if not proc.is_alive():
                    self._scheduler_died(rank, proc)

    def _scheduler_died(self, rank, proc):
        proc.join(1)
        log_block("\n".join([
            "Traceback (most recent call last):",
            '  File "%s/srt/entrypoints/engine.py", line 2036, in _wait_for_scheduler_ready' % self.cfg["site_root"],
            "    raise _scheduler_died_error(i, scheduler_procs[i])",
            "RuntimeError: Rank %d scheduler died during initialization (exit code: %s). If exit code is -9 "
            "(SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."
            % (rank, proc.exitcode),
        ]))
        self.kill_children()
        os._exit(1)

    def kill_children(self, sig=signal.SIGKILL):
        """Signal every child: ours, and any other (multiprocessing's resource tracker), like kill_process_tree."""
        pids = {proc.pid for proc in self.children if proc.pid is not None and proc.exitcode is None}
        pids.update(direct_children(os.getpid()))
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def _collect_outputs(self):
        while True:
            try:
                out = self.detok_out.recv()
            except (EOFError, OSError):
                return
            with self.pending_lock:
                waiter = self.pending.pop(out["rid"], None)
            self.last_receive = time.time()
            if waiter is not None:
                waiter["result"] = out
                waiter["event"].set()

    def submit(self, prompt, max_new_tokens, timeout, warmup=False, health=False):
        """Send one request to the TP0 scheduler and wait for the detokenized output. None on timeout."""
        rid = uuid.uuid4().hex
        waiter = {"event": threading.Event(), "result": None}
        with self.pending_lock:
            self.pending[rid] = waiter
        msg = {"type": "generate", "rid": rid, "prompt": prompt, "max_new_tokens": max_new_tokens,
               "warmup": warmup, "health": health}
        try:
            with self.send_lock:
                self.sched_conns[0].send(msg)
        except OSError:
            with self.pending_lock:
                self.pending.pop(rid, None)
            return None
        if not waiter["event"].wait(timeout):
            with self.pending_lock:
                self.pending.pop(rid, None)
            return None
        return waiter["result"]

    def broadcast(self, msg):
        for conn in self.sched_conns:
            try:
                with self.send_lock:
                    conn.send(msg)
            except OSError:
                pass

    # -- startup ------------------------------------------------------------------------------------------------
    def bind(self):
        """Uvicorn's startup: bind, or log uvicorn's bind error and exit 1."""
        log("INFO:     Started server process [%d]" % os.getpid())
        log("INFO:     Waiting for application startup.")
        log("INFO:     Application startup complete.")
        handler = make_handler(self)
        EmulatorHTTPServer.address_family = socket.AF_INET6 if ":" in self.args.host else socket.AF_INET
        blocker = None
        if self.scenario == "port_taken":
            blocker = occupy_port(self.args.host, self.args.port)
        try:
            server = EmulatorHTTPServer((self.args.host, self.args.port), handler)
        except OSError as exc:
            log("ERROR:    [Errno %s] error while attempting to bind on address %r: %s"
                % (exc.errno, (self.args.host, self.args.port), (exc.strerror or str(exc)).lower()),
                level="error")
            log("INFO:     Waiting for application shutdown.")
            log("INFO:     Application shutdown complete.")
            self.kill_children()
            os._exit(1)
        if blocker is not None:
            blocker.close()
        self.server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
        log("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)"
            % (url_host(self.args.host), server.server_address[1]))

    def warmup(self):
        """SGLang's _wait_and_warmup: GET /get_model_info, then one POST /generate through HTTP."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.args.host, self.args.host)
        base = "http://%s:%d" % (url_host(host), self.server.server_address[1])
        headers = {"X-Emulator-Warmup": self.warmup_token}
        if self.args.api_key:
            headers["Authorization"] = "Bearer %s" % self.args.api_key
        try:
            urllib.request.urlopen(urllib.request.Request(base + "/get_model_info", headers=headers), timeout=30).read()
            body = json.dumps({"text": "The capital city of France is",
                               "sampling_params": {"temperature": 0, "max_new_tokens": 8}}).encode()
            req = urllib.request.Request(base + "/generate", data=body, method="POST",
                                         headers=dict(headers, **{"Content-Type": "application/json"}))
            urllib.request.urlopen(req, timeout=30).read()
        except (urllib.error.URLError, OSError) as exc:
            log_block("Initialization failed. warmup error: Traceback (most recent call last):\n"
                      "urllib.error.URLError: %s" % exc)
            self.kill_children()
            os._exit(1)
        self.up = True
        self.ready = True
        log(READY_LINE)
        self.broadcast({"type": "server_ready"})

    def run(self):
        self.start_children()
        self.wait_schedulers()
        self.bind()
        self.warmup()
        while True:
            time.sleep(3600)


def url_host(host):
    """A host as it appears in a URL (IPv6 literals in brackets)."""
    return "[%s]" % host if ":" in host else host


class EmulatorHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # uvicorn sets SO_REUSEADDR too; a LISTENING port still fails with EADDRINUSE

    def handle_error(self, request, client_address):  # pragma: no cover - quiet client disconnects
        pass


def make_handler(engine):
    args = engine.args

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "uvicorn"
        sys_version = ""
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):  # replaced by uvicorn-style access lines
            pass

        def _access(self, code):
            log('INFO:     %s:%d - "%s %s HTTP/1.1" %d %s' % (
                self.client_address[0], self.client_address[1], self.command, self.path.split("?")[0], code,
                HTTP_REASONS.get(code, "")))

        def _send(self, code, payload=None, ctype="application/json"):
            body = b""
            if payload is not None:
                body = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
            self.send_response_only(code, HTTP_REASONS.get(code))
            self.send_header("date", self.date_time_string())
            self.send_header("server", "uvicorn")
            self.send_header("content-length", str(len(body)))
            if body:
                self.send_header("content-type", ctype)
            self.end_headers()
            if body and self.command != "HEAD":
                self.wfile.write(body)
            self._access(code)

        def _authorized(self, path):
            if not args.api_key or path.startswith(("/health", "/ready", "/metrics")):
                return True
            header = self.headers.get("Authorization", "")
            parts = header.split(" ", 1)
            return len(parts) == 2 and parts[0].lower() == "bearer" and parts[1] == args.api_key

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return {}
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("request body must be a JSON object")
            return data

        def _is_warmup(self):
            return self.headers.get("X-Emulator-Warmup") == engine.warmup_token

        def do_GET(self):  # noqa: N802
            path = self.path.split("?")[0]
            if not self._authorized(path):
                return self._send(401, {"error": "Unauthorized"})
            if path == "/health":
                return self._send(200 if engine.up and engine.scenario != "health_503" else 503)
            if path == "/health_generate":
                return self._health_generate()
            if path == "/get_model_info":
                return self._send(200, {
                    "model_path": args.model_path, "tokenizer_path": args.tokenizer_path, "is_generation": True,
                    "preferred_sampling_params": None, "weight_version": "default",
                    "has_image_understanding": False, "has_audio_understanding": False,
                    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "emulator": True,
                    "emulator_version": VERSION, "emulator_scenario": engine.scenario})
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{
                    "id": args.served_model_name, "object": "model", "created": int(time.time()),
                    "owned_by": "sglang", "root": args.model_path, "parent": None,
                    "max_model_len": engine.cfg["context_len"]}]})
            return self._send(404, {"detail": "Not Found"})

        def do_POST(self):  # noqa: N802
            path = self.path.split("?")[0]
            if not self._authorized(path):
                return self._send(401, {"error": "Unauthorized"})
            if path in ("/health", "/health_generate"):
                return self._send(405, {"detail": "Method Not Allowed"})
            if path not in ("/generate", "/v1/completions"):
                return self._send(404, {"detail": "Not Found"})
            try:
                body = self._body()
            except (ValueError, UnicodeDecodeError) as exc:
                return self._send(400, {"error": {"message": "invalid JSON body: %s" % exc}})
            if path == "/generate":
                return self._generate(body)
            return self._completions(body)

        def _health_generate(self):
            if not engine.ready or engine.scenario == "health_503":
                return self._send(503)
            tic = time.time()
            out = engine.submit([0], 1, HEALTH_GENERATE_TIMEOUT, health=True)
            if out is None:
                log("Health check failed. Server couldn't get a response from detokenizer for last %d seconds. "
                    "tic start time: %s. last_heartbeat time: %s"
                    % (HEALTH_GENERATE_TIMEOUT, time.strftime("%H:%M:%S", time.localtime(tic)),
                       time.strftime("%H:%M:%S", time.localtime(engine.last_receive))), level="error")
                return self._send(503)
            return self._send(200)

        def _generate(self, body):
            text = body.get("text")
            prompt = text if text is not None else body.get("input_ids")
            if prompt is None:
                return self._send(400, {"error": {"message": "Either text or input_ids should be provided."}})
            params = body.get("sampling_params") or {}
            try:
                max_new = int(params.get("max_new_tokens", 128))
            except (TypeError, ValueError):
                return self._send(400, {"error": {"message": "max_new_tokens must be an integer"}})
            if max_new < 0:
                return self._send(400, {"error": {"message": "max_new_tokens must be at least 0"}})
            batch = isinstance(text, list) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], list))
            results = []
            for one in (prompt if batch else [prompt]):
                start = time.time()
                out = engine.submit(one, max_new, REQUEST_TIMEOUT, warmup=self._is_warmup())
                if out is None:
                    return self._send(500, {"error": {"message": "the scheduler did not answer"}})
                results.append({"text": out["text"], "output_ids": out["output_ids"], "meta_info": {
                    "id": uuid.uuid4().hex, "finish_reason": {"type": "length", "length": max_new},
                    "prompt_tokens": out["prompt_tokens"], "completion_tokens": out["completion_tokens"],
                    "cached_tokens": 0, "e2e_latency": round(time.time() - start, 6)}})
            if body.get("stream"):
                return self._send_stream(results)
            return self._send(200, results if batch else results[0])

        def _send_stream(self, chunks):
            """Server-sent events as SGLang streams them: ``data: {json}`` lines, then ``data: [DONE]``."""
            body = b"".join(b"data: " + json.dumps(chunk).encode("utf-8") + b"\n\n" for chunk in chunks)
            self._send(200, body + b"data: [DONE]\n\n", ctype="text/event-stream")

        def _completions(self, body):
            prompt = body.get("prompt")
            if prompt is None:
                return self._send(400, {"error": {"message": "prompt is required"}})
            try:
                max_new = int(body.get("max_tokens", 16))
            except (TypeError, ValueError):
                return self._send(400, {"error": {"message": "max_tokens must be an integer"}})
            out = engine.submit(prompt, max_new, REQUEST_TIMEOUT, warmup=self._is_warmup())
            if out is None:
                return self._send(500, {"error": {"message": "the scheduler did not answer"}})
            response = {
                "id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
                "model": body.get("model") or args.served_model_name,
                "choices": [{"index": 0, "text": out["text"], "logprobs": None, "finish_reason": "length",
                             "matched_stop": None}],
                "usage": {"prompt_tokens": out["prompt_tokens"], "completion_tokens": out["completion_tokens"],
                          "total_tokens": out["prompt_tokens"] + out["completion_tokens"]}}
            if body.get("stream"):
                return self._send_stream([response])
            return self._send(200, response)

    return Handler


# ---------------------------------------------------------------------------------------------------------------
# Replay
# ---------------------------------------------------------------------------------------------------------------

_STAMP_RE = re.compile(r"\[(\d{4}-\d{2}-\d{2} )?(\d{2}:\d{2}:\d{2})")
_CRASH_MARKERS = ("Scheduler hit an exception", "Received sigquit from a child", "SIGQUIT received",
                  "scheduler died during initialization", "Initialization failed. warmup error",
                  "Traceback (most recent call last)", "Killed")


def line_time(line):
    """Seconds from the line's ``[date time`` or ``[time`` prefix, or None."""
    match = _STAMP_RE.search(line[:80])
    if not match:
        return None
    date = (match.group(1) or "2000-01-01 ").strip()
    try:
        stamp = datetime.datetime.strptime("%s %s" % (date, match.group(2)), "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return stamp.timestamp()


def replay_outcome(path, text):
    """ready | crashed | loading for a replayed log: MANIFEST.tsv next to it decides, else the log's text."""
    manifest = os.path.join(os.path.dirname(os.path.abspath(path)), "MANIFEST.tsv")
    if os.path.isfile(manifest):
        import csv
        with open(manifest, encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                if row.get("file") == os.path.basename(path) and row.get("label") in ("ready", "crashed", "loading"):
                    return row["label"]
    if READY_LINE in text:
        return "ready"
    if any(marker in text for marker in _CRASH_MARKERS):
        return "crashed"
    return "loading"


def replay_delays(lines, speed, fixed=0.005):
    """Delay before each line: timestamp gaps divided by speed, or a fixed small delay for unstamped lines."""
    delays, last = [], None
    for line in lines:
        stamp = line_time(line)
        if stamp is None:
            delays.append(fixed)
            continue
        delays.append(0.0 if last is None else max(0.0, (stamp - last) / max(speed, 1e-6)))
        last = stamp
    return delays


def run_replay(engine, args):
    path = args.emulator_replay
    with open(path, "rb") as handle:
        text = handle.read().decode("utf-8", "replace")
    outcome = replay_outcome(path, text)
    emu("replay: %s (%d bytes, sha256 %s), speed x%g, outcome when it ends: %s"
        % (path, len(text), hashlib.sha256(text.encode("utf-8", "replace")).hexdigest(), args.emulator_replay_speed,
           outcome))
    lines = text.splitlines(keepends=True)
    for delay, line in zip(replay_delays(lines, args.emulator_replay_speed), lines):
        if delay:
            time.sleep(delay)
        emit_raw(line if line.endswith(("\n", "\r")) else line + "\n")
        if outcome == "ready" and engine.server is None and "Uvicorn running on" in line:
            engine.bind_quiet()
    if outcome == "ready":
        if engine.server is None:
            engine.bind_quiet()
        engine.up = engine.ready = True
        engine.broadcast({"type": "server_ready"})
        while True:
            time.sleep(3600)
    if outcome == "crashed":
        engine.kill_children()
        os._exit(1)
    while True:
        time.sleep(3600)


def _bind_quiet(self):
    EmulatorHTTPServer.address_family = socket.AF_INET6 if ":" in self.args.host else socket.AF_INET
    try:
        self.server = EmulatorHTTPServer((self.args.host, self.args.port), make_handler(self))
    except OSError as exc:
        emu("replay: cannot bind %s:%d: %s" % (self.args.host, self.args.port, exc))
        self.kill_children()
        os._exit(1)
    threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()


Engine.bind_quiet = _bind_quiet


# ---------------------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------------------

def server_args_line(args):
    def q(value):
        return repr(value)
    fields = [
        ("model_path", args.model_path), ("tokenizer_path", args.tokenizer_path), ("tokenizer_mode", "auto"),
        ("skip_tokenizer_init", False), ("load_format", "auto"), ("trust_remote_code", args.trust_remote_code),
        ("context_length", args.context_length), ("is_embedding", False), ("host", args.host),
        ("port", args.port), ("mem_fraction_static", args.mem_fraction_static or 0.79),
        ("tp_size", args.tp_size), ("dp_size", args.dp_size), ("log_level", args.log_level),
        ("api_key", "<redacted by emulator>" if args.api_key else None),
        ("served_model_name", args.served_model_name),
        ("speculative_algorithm", args.speculative_algorithm),
        ("speculative_draft_model_path", args.speculative_draft_model_path),
        ("speculative_num_steps", args.speculative_num_steps),
        ("speculative_eagle_topk", args.speculative_eagle_topk),
        ("speculative_num_draft_tokens", args.speculative_num_draft_tokens),
    ]
    return "server_args=ServerArgs(%s)" % ", ".join("%s=%s" % (k, q(v)) for k, v in fields)


def occupy_port(host, port):
    """port_taken: make the port really busy (a listening socket) unless something else already holds it."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
        sock.listen(1)
    except OSError:
        sock.close()
        return None
    emu("port_taken: holding %s:%d with a listening socket so that the server's bind fails for real" % (host, port))
    return sock


def install_parent_signals(engine):
    def on_term(signum, frame):
        engine.kill_children(signal.SIGTERM)
        deadline = time.monotonic() + 1.0
        for proc in engine.children:
            proc.join(max(0.0, deadline - time.monotonic()))
        engine.kill_children(signal.SIGKILL)
        os._exit(0)

    def on_quit(signum, frame):
        # SGLang's launch_phase_sigquit_handler: log, then kill_process_tree(os.getpid()) (itself included).
        log(SIGQUIT_LINE, level="error")
        engine.kill_children(signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGQUIT, on_quit)


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
        if args.speculative_algorithm not in EAGLE_ALGORITHMS:
            emu("eagle scenario without --speculative-algorithm EAGLE/EAGLE3 (got %s): nothing to emulate, "
                "running as normal" % args.speculative_algorithm)
        else:
            root = find_sglang_root(args.emulator_sglang_root)
            if root is None:
                emu("ERROR: eagle scenario needs the installed sglang package to read %s; not found (%s). "
                    "Install sglang or pass --emulator-sglang-root DIR (the sglang package directory)."
                    % (EAGLE_FILE, args.emulator_sglang_root or "importlib.util.find_spec('sglang') found nothing"))
                return 2
            try:
                eagle = eagle_plan(root)
            except (OSError, SyntaxError, UnicodeDecodeError) as exc:
                emu("ERROR: eagle scenario cannot read %s: %s" % (os.path.join(root, EAGLE_FILE), exc))
                return 2
            if not eagle["init_found"] or eagle["raising_lineno"] is None:
                emu("ERROR: %s: no %s.__init__ with a statement that can raise; cannot emulate"
                    % (eagle["path"], EAGLE_CLASS))
                return 2
            emu("eagle: read %s sha256=%s; %s.__init__ first raising statement: line %d `%s`; "
                "self.%s assigned before it: %s -> %s"
                % (eagle["path"], eagle["sha256"], EAGLE_CLASS, eagle["raising_lineno"], eagle["raising_source"],
                   EAGLE_ATTRIBUTE,
                   "yes (line %d)" % eagle["assigned_lineno"] if eagle["assigned_before"] else "no",
                   "path=unpatched: the first decode will crash" if eagle["will_crash"]
                   else "path=patched: decode works"))
    engine = Engine(args, eagle)
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


if __name__ == "__main__":
    sys.exit(main())
