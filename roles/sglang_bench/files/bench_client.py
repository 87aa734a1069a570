"""One run of SGLang's own benchmark client (``python -m sglang.benchmark.serving``) against our server, and its
figures.

Reads the request as JSON on stdin (the API key never appears on a command line): ``module``, ``base_url``,
``api_key``, ``tokenizer``, ``side``, ``concurrency``, ``num_prompts``, ``input_len``, ``output_len``, ``seed``,
``warmup_requests``, ``timeout``. Runs the client with this interpreter (the SGLang venv's python) in a private
temporary directory: dataset ``random-ids`` (random token ids: nothing is downloaded), fixed lengths
(``--random-range-ratio 1``), ``--flush-cache`` after the warm-up (SGLang then counts its acceptance figures from
zero, so the accept length belongs to this run), ``--max-concurrency``, every request at once. The key reaches the
client in its environment (``OPENAI_API_KEY``, which the client sends as ``Authorization: Bearer``), the Hub is
off (``HF_HUB_OFFLINE``).

Prints one JSON object: ``ok``, ``error``, ``side``, ``concurrency``, ``num_prompts``, ``argv``, ``rc``,
``seconds``, ``figures`` (what the client wrote in its ``--output-file`` line, picked by name: ``FIGURES``), ``server``
(what its ``server_info`` says of speculative decoding: ``SERVER_KEYS``; the rest, the API key among it, is dropped)
and ``console`` (the client's output, the key masked). Always exits 0: the caller's next task judges ``ok``.
Python 3 standard library only: it runs with the SGLang venv's python on the host (roles/sglang_bench/tasks/run.yml).
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

# The client's result line (sglang/benchmark/serving.py, benchmark(): `result`), by name; the same in 0.5.17 and 0.5.23.
FIGURES = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_itl_ms", "p99_itl_ms",
           "accept_length", "completed", "duration", "total_input_tokens", "total_output_tokens", "mean_ttft_ms",
           "mean_itl_ms", "median_e2e_latency_ms", "p99_e2e_latency_ms", "max_concurrency", "random_input_len",
           "random_output_len", "dataset_name", "backend", "request_rate")
# What the report keeps of the server's /server_info (SGLang returns every server argument there, the API key too).
SERVER_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
               "speculative_num_draft_tokens", "tp_size", "version")
CONSOLE_KEEP = 20000
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


def client_argv(python, req, output_file):
    """The client's command line (no secret on it)."""
    return [python, "-m", req["module"], "--backend", "sglang", "--base-url", req["base_url"],
            "--dataset-name", "random-ids", "--random-input-len", str(req["input_len"]),
            "--random-output-len", str(req["output_len"]), "--random-range-ratio", "1.0",
            "--num-prompts", str(req["num_prompts"]), "--max-concurrency", str(req["concurrency"]),
            "--request-rate", "inf", "--seed", str(req["seed"]), "--tokenizer", req["tokenizer"],
            "--warmup-requests", str(req["warmup_requests"]), "--flush-cache", "--disable-tqdm",
            "--output-file", output_file]


def client_env(base, api_key):
    """The client's environment: the key as OPENAI_API_KEY (or none at all), the Hub off."""
    env = {k: v for k, v in base.items() if k not in ("OPENAI_API_KEY", "API_KEY")}
    env.update(OFFLINE)
    if api_key:
        env["OPENAI_API_KEY"] = api_key
    return env


def _plain(value):
    """A JSON-safe number: inf and nan (the client writes request_rate inf) become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def pick(result, secrets=()):
    """(figures, server) from one result line of the client's --output-file."""
    figures = {key: _plain(result.get(key)) for key in FIGURES}
    info = result.get("server_info") if isinstance(result.get("server_info"), dict) else {}
    if isinstance(info.get("decode"), list) and info["decode"]:  # a PD-disaggregated deployment: its decode side
        info = info["decode"][0]
    server = {key: info.get(key) for key in SERVER_KEYS}
    states = info.get("internal_states")
    state = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    server["avg_spec_accept_length"] = state.get("avg_spec_accept_length")
    for key, value in list(server.items()):
        if isinstance(value, str) and any(s and s in value for s in secrets):
            server[key] = "***"
    return figures, server


def mask(text, secrets):
    """Text for the operator: every secret as ``***``, every control character but newline and tab as ``\\xNN``
    (a client's or server's text never moves the operator's cursor)."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group()), text)


def last_result(path):
    """The last JSON line of the client's output file, or None."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line for line in handle.read().splitlines() if line.strip()]
    except OSError:
        return None
    return json.loads(lines[-1]) if lines else None


def run(req, python=sys.executable, runner=subprocess.run, clock=time.monotonic):
    secrets = [req.get("api_key") or ""]
    out = {"ok": False, "error": None, "side": req["side"], "concurrency": req["concurrency"],
           "num_prompts": req["num_prompts"], "rc": None, "seconds": None, "figures": None, "server": None,
           "console": ""}
    work = tempfile.mkdtemp(prefix="sglang-bench-")
    try:
        output_file = os.path.join(work, "result.jsonl")
        argv = client_argv(python, req, output_file)
        out["argv"] = argv
        start = clock()
        try:
            proc = runner(argv, cwd=work, env=client_env(os.environ, req.get("api_key")), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=req["timeout"], check=False)
        except subprocess.TimeoutExpired as exc:
            out["seconds"] = round(clock() - start, 3)
            console = exc.output or b""
            out["console"] = mask(console.decode("utf-8", "replace"), secrets)[-CONSOLE_KEEP:]
            out["error"] = "the client did not finish within %s s" % req["timeout"]
            return out
        out["seconds"] = round(clock() - start, 3)
        out["rc"] = proc.returncode
        out["console"] = mask((proc.stdout or b"").decode("utf-8", "replace"), secrets)[-CONSOLE_KEEP:]
        try:
            result = last_result(output_file)
        except ValueError as exc:
            result, out["error"] = None, "the client's output file is not JSON: %s" % exc
        if proc.returncode != 0:
            out["error"] = "the client exited with status %d (see its console)" % proc.returncode
        elif result is None:
            out["error"] = out["error"] or "the client wrote no result (see its console)"
        else:
            out["figures"], out["server"] = pick(result, secrets)
            completed = out["figures"].get("completed")
            if completed != req["num_prompts"]:
                out["error"] = "%s of %d requests completed (see the client's console)" % (completed, req["num_prompts"])
            else:
                out["ok"] = True
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    """One run; whatever goes wrong in this runner itself is still one JSON answer (the task that runs it hides its
    output, the API key being in its input), with the traceback, the key masked."""
    req = {}
    try:
        req = json.load(sys.stdin)
        out = run(req)
    except Exception:  # noqa: BLE001 - reported, not hidden
        secrets = [req.get("api_key") or ""] if isinstance(req, dict) else []
        out = {"ok": False, "figures": None, "server": None, "console": "",
               "error": "the benchmark runner failed: " + mask(traceback.format_exc(), secrets)[-CONSOLE_KEEP:]}
        if isinstance(req, dict):
            out.update(side=req.get("side"), concurrency=req.get("concurrency"), num_prompts=req.get("num_prompts"))
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
