"""One side of the sweep: the runs of SGLang's own benchmark client (``python -m sglang.benchmark.serving``) at every
concurrency against our server, and their figures.

Reads the request as JSON on stdin (the API key never appears on a command line): ``module``, ``base_url``,
``api_key``, ``tokenizer``, ``side``, ``label``, ``concurrencies`` with ``min_requests`` and
``prompts_per_concurrency`` (requests per run: this many per slot, at least ``min_requests``; or one
``concurrency`` with ``num_prompts``), ``input_len``, ``output_len``, ``seed``, ``warmup_requests``, ``timeout``
(seconds per point: the process may take this times the points), ``repeats``, ``min_seconds``, ``dataset``
(``chat`` or ``random-ids``), ``dataset_json`` (the chat set's text, for ``chat``), ``chat_template``.

The prompts: ``chat``, the chat-shaped set shipped with the role (ShareGPT format, ``--dataset-name sharegpt
--dataset-path`` on a copy in the private temporary directory; each output ``output_len`` tokens; a point never asks
for more requests than the set holds), or ``random-ids`` (random token ids of exactly ``input_len`` tokens,
``--random-range-ratio 1``). Nothing is downloaded.

The runs: one process (``DRIVER``: the client module run as ``__main__`` once per run, so torch and the tokenizer
are imported once a side) runs the points in ascending order, each ``repeats`` times with the same requests. Where a
point's first run took less than ``min_seconds``, it is a calibration run (kept, not counted) and the point runs
again with proportionally more requests (at most 3 calibrations). Every run flushes SGLang's cache after its warm-up
(``--flush-cache``): SGLang counts its acceptance figures from zero there.

The accept length: SGLang's benchmark client keeps no per-request ``spec_verify_ct``, so it is read from the
``/server_info`` that the client reads at the end of its run (kept in its result line): its ``internal_states``
holds one state per data-parallel rank, each with ``avg_spec_accept_length`` since the run's flush. Every rank is
counted: ``dp_accept_length`` (files/dp_accept_length.py, run ahead of this file as one program: tasks/run.yml), the
plain mean of the ranks (``accept_ranks``: each rank's; SGLang 0.5.23 keeps no verify count beside the figure, so
under data parallelism with unequal ranks that mean is not the per-token figure). The client's own
``accept_length`` is the first rank's only; it is kept as ``client_accept_length``.

Prints one JSON object: ``ok``, ``error`` and ``concurrency`` (the first point that failed), ``side``, ``points``
(per concurrency: ``num_prompts``, ``ok``, ``error``, ``seconds``, ``line``: the point in words), ``rc``,
``seconds``, ``runs`` (per run: ``concurrency``, ``repeat``, ``calibration``, ``num_prompts``, ``seconds``,
``argv`` (the equivalent ``python -m`` command line, no secret on it), ``ok``, ``error``, ``figures`` (what the
client wrote in its ``--output-file`` line, picked by name: ``FIGURES``) and ``server`` (what its ``server_info``
says of speculative decoding: ``SERVER_KEYS``; the rest, the API key among it, is dropped)) and ``console`` (the
client's output, the key masked). Always exits 0: the caller's next task judges ``ok``. Python 3 standard library
only: it runs with the SGLang venv's python on the host (roles/sglang_bench/tasks/run.yml).
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
               "speculative_num_draft_tokens", "tp_size", "dp_size", "version")
CONSOLE_KEEP = 20000
MAX_CALIBRATIONS = 3
MARK = "@@eagle-bench-run "
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}

# The process that runs the client: argv[1] is its plan (JSON file). Each run is the client module as __main__ with
# its command line; after each, one MARK line says which file holds its result. Standard library only.
DRIVER = r'''
import json, math, os, runpy, sys, time
plan = json.load(open(sys.argv[1]))
def once(point, num, index):
    out = os.path.join(plan["dir"], "result-%d.jsonl" % index)
    sys.argv = ([plan["module"]] + plan["args"] + ["--max-concurrency", str(point["concurrency"]),
                "--num-prompts", str(num), "--output-file", out])
    code = 0
    try:
        runpy.run_module(plan["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    duration = None
    try:
        with open(out) as handle:
            lines = [line for line in handle.read().splitlines() if line.strip()]
        duration = float(json.loads(lines[-1]).get("duration")) if lines else None
    except (OSError, ValueError, TypeError):
        pass
    return out, code, duration
index = 0
for point in plan["points"]:
    num, counted, calibrations = point["num_prompts"], 0, 0
    while counted < plan["repeats"]:
        start = time.monotonic()
        out, code, duration = once(point, num, index)
        calibrate = (counted == 0 and code == 0 and duration is not None and duration < plan["min_seconds"]
                     and num < plan["max_prompts"] and calibrations < plan["max_calibrations"])
        print(__MARK__ + json.dumps({"file": out, "concurrency": point["concurrency"], "num_prompts": num, "rc": code,
                                     "calibration": calibrate, "seconds": round(time.monotonic() - start, 3)}),
              flush=True)
        index += 1
        if code != 0:
            sys.exit(code)
        if calibrate:
            calibrations += 1
            num = min(plan["max_prompts"],
                      max(num + 1, int(math.ceil(num * plan["min_seconds"] / max(duration, 1e-3) * 1.1))))
        else:
            counted += 1
'''.replace("__MARK__", repr(MARK))


def client_args(req, dataset_path=None):
    """The client's arguments but --num-prompts and --output-file (no secret among them)."""
    args = ["--backend", "sglang", "--base-url", req["base_url"]]
    if req.get("dataset", "random-ids") == "chat":
        args += ["--dataset-name", "sharegpt", "--dataset-path", dataset_path,
                 "--sharegpt-output-len", str(req["output_len"])]
        if req.get("chat_template"):
            args.append("--apply-chat-template")
    else:
        args += ["--dataset-name", "random-ids", "--random-input-len", str(req["input_len"]),
                 "--random-output-len", str(req["output_len"]), "--random-range-ratio", "1.0"]
    return args + ["--request-rate", "inf", "--seed", str(req["seed"]), "--tokenizer", req["tokenizer"],
                   "--warmup-requests", str(req["warmup_requests"]), "--flush-cache", "--disable-tqdm"]


def client_argv(python, req, output_file, dataset_path=None, num_prompts=None, concurrency=None):
    """One run's command line as ``python -m`` would run it (what the report shows; no secret on it)."""
    return ([python, "-m", req["module"]] + client_args(req, dataset_path)
            + ["--max-concurrency", str(concurrency if concurrency is not None else req["concurrency"]),
               "--num-prompts", str(num_prompts if num_prompts is not None else req["num_prompts"]),
               "--output-file", output_file])


def points_of(req):
    """The request's points, [{concurrency, num_prompts}]: each of ``concurrencies`` with ``prompts_per_concurrency``
    requests per slot and at least ``min_requests``; or its one ``concurrency`` with ``num_prompts``."""
    if req.get("concurrencies"):
        return [{"concurrency": int(c), "num_prompts": max(int(req["min_requests"]),
                                                           int(c) * int(req["prompts_per_concurrency"]))}
                for c in req["concurrencies"]]
    return [{"concurrency": int(req["concurrency"]), "num_prompts": int(req["num_prompts"])}]


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


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def accept_length(states):
    """(accept length, per-rank figures, how it was combined) from ``/server_info`` ``internal_states`` (one per
    data-parallel rank): ``dp_accept_length``'s mean of the ranks that report one; (None, [], None) where none does."""
    figure = dp_accept_length(states)  # pylint: disable=undefined-variable  # defined ahead: dp_accept_length.py
    if figure is None:
        return None, [], None
    ranks = figure["per_rank"]
    how = "mean of %d ranks" % len(ranks) if len(ranks) > 1 else "one rank"
    return figure["accept_length"], ranks, how


def pick(result, secrets=()):
    """(figures, server) from one result line of the client's --output-file."""
    figures = {key: _plain(result.get(key)) for key in FIGURES}
    info = result.get("server_info") if isinstance(result.get("server_info"), dict) else {}
    if isinstance(info.get("decode"), list) and info["decode"]:  # a PD-disaggregated deployment: its decode side
        info = info["decode"][0]
    server = {key: info.get(key) for key in SERVER_KEYS}
    value, ranks, how = accept_length(info.get("internal_states"))
    server["avg_spec_accept_length"] = ranks[0] if ranks else None
    server["accept_ranks"] = ranks
    server["accept_length_from"] = how
    figures["client_accept_length"] = figures["accept_length"]
    figures["accept_length"] = value if value is not None else figures["accept_length"]
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


def marks(console):
    """The driver's MARK lines: one per finished run."""
    out = []
    for line in console.splitlines():
        if line.startswith(MARK):
            try:
                out.append(json.loads(line[len(MARK):]))
            except ValueError:
                continue
    return out


def one_run(req, python, mark, repeat, dataset_path, secrets):
    """A run's record from its MARK and its result file."""
    run = {"concurrency": mark.get("concurrency"), "repeat": repeat, "calibration": bool(mark.get("calibration")),
           "num_prompts": mark.get("num_prompts"), "seconds": mark.get("seconds"),
           "argv": client_argv(python, req, os.path.basename(str(mark.get("file"))),
                               dataset_path and os.path.basename(dataset_path), mark.get("num_prompts"),
                               mark.get("concurrency")),
           "ok": False, "error": None, "figures": None, "server": None}
    try:
        result = last_result(mark.get("file"))
    except ValueError as exc:
        run["error"] = "the client's output file is not JSON: %s" % exc
        return run
    if mark.get("rc"):
        run["error"] = "the client exited with status %s (see its console)" % mark.get("rc")
    elif result is None:
        run["error"] = "the client wrote no result (see its console)"
    else:
        run["figures"], run["server"] = pick(result, secrets)
        completed = run["figures"].get("completed")
        if completed != mark.get("num_prompts"):
            run["error"] = "%s of %s requests completed (see the client's console)" % (completed, mark.get("num_prompts"))
        else:
            run["ok"] = True
    return run


def point_line(req, concurrency, counted, calibrations, seconds, error):
    """A point in one line, for the play's output: each counted run's output tokens/s and accept length."""
    def figure(run, key, digits):
        value = _number((run["figures"] or {}).get(key))
        return "-" if value is None else "%.*f" % (digits, value)
    line = "%s c=%s: " % (req["side"], concurrency)
    if counted:
        line += "%d run(s) of %s requests, output tok/s %s, accept length %s (%s s%s)" % (
            len(counted), counted[0]["num_prompts"], " / ".join(figure(r, "output_throughput", 1) for r in counted),
            " / ".join(figure(r, "accept_length", 2) for r in counted), seconds,
            ", %d calibration run(s)" % calibrations if calibrations else "")
    else:
        line += "no figures"
    if error:
        line += ": " + error
    return line + (" (%s)" % req["label"] if req.get("label") else "")


def judge_points(req, points, out, counted, timeout_error):
    """Each point's verdict into ``out`` (``points``; ``ok``, ``error`` and ``concurrency``: the first that failed),
    from its runs (``counted``: {concurrency: runs counted}) and how the process ended."""
    repeats = max(1, int(req.get("repeats", 1)))
    for point in points:
        c = point["concurrency"]
        mine = [r for r in out["runs"] if r["concurrency"] == c]
        failed = [r for r in mine if not r["ok"]]
        error = None
        if failed:
            error = failed[0]["error"]
        elif counted.get(c, 0) < repeats:
            if timeout_error:
                error = timeout_error
            elif out["rc"]:
                error = "the client exited with status %d (see its console)" % out["rc"]
            else:
                error = ("the client wrote no result (see its console)" if not mine
                         else "%d of %d runs finished (see the client's console)" % (counted.get(c, 0), repeats))
        seconds = round(sum(r["seconds"] or 0 for r in mine), 3)
        out["points"].append({"concurrency": c, "num_prompts": point["num_prompts"], "ok": error is None,
                              "error": error, "seconds": seconds,
                              "line": point_line(req, c, [r for r in mine if r["ok"] and not r["calibration"]],
                                                 len(mine) - counted.get(c, 0), seconds, error)})
        if error and out["error"] is None:
            out["error"], out["concurrency"] = error, c
    out["ok"] = out["error"] is None


def run(req, python=sys.executable, runner=subprocess.run, clock=time.monotonic):
    """Every point of ``req`` (one side), in one process; the answer (see the module's docstring)."""
    secrets = [req.get("api_key") or ""]
    repeats = max(1, int(req.get("repeats", 1)))
    points = points_of(req)
    out = {"ok": False, "error": None, "side": req["side"], "concurrency": None, "points": [], "rc": None,
           "seconds": None, "runs": [], "console": ""}
    work = tempfile.mkdtemp(prefix="sglang-bench-")
    try:
        dataset_path, max_prompts = None, max(max(p["num_prompts"] for p in points) * 64, 100000)
        if req.get("dataset", "random-ids") == "chat":
            dataset_path = os.path.join(work, "chat_prompts.json")
            with open(dataset_path, "w", encoding="utf-8") as handle:
                handle.write(req["dataset_json"])
            max_prompts = len(json.loads(req["dataset_json"]))
            for point in points:
                point["num_prompts"] = min(point["num_prompts"], max_prompts)
        plan = {"module": req["module"], "args": client_args(req, dataset_path), "points": points,
                "repeats": repeats, "min_seconds": float(req.get("min_seconds") or 0), "max_prompts": max_prompts,
                "max_calibrations": MAX_CALIBRATIONS, "dir": work}
        plan_path = os.path.join(work, "plan.json")
        with open(plan_path, "w", encoding="utf-8") as handle:
            json.dump(plan, handle)
        argv = [python, "-c", DRIVER, plan_path]
        timeout = req["timeout"] * len(points)
        start = clock()
        timed_out = False
        try:
            proc = runner(argv, cwd=work, env=client_env(os.environ, req.get("api_key")), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False)
            raw, out["rc"] = proc.stdout or b"", proc.returncode
        except subprocess.TimeoutExpired as exc:
            raw, timed_out = exc.output or b"", True
        out["seconds"] = round(clock() - start, 3)
        console = raw.decode("utf-8", "replace")
        counted = {}
        for mark in marks(console):
            c = mark.get("concurrency")
            record = one_run(req, python, mark, None if mark.get("calibration") else counted.get(c, 0), dataset_path,
                             secrets)
            counted[c] = counted.get(c, 0) + (0 if record["calibration"] else 1)
            out["runs"].append(record)
        out["console"] = mask("\n".join(l for l in console.splitlines() if not l.startswith(MARK)),
                              secrets)[-CONSOLE_KEEP:]
        judge_points(req, points, out, counted, "the client did not finish within %s s" % timeout if timed_out else None)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    """One side; whatever goes wrong in this runner itself is still one JSON answer (the task that runs it hides its
    output, the API key being in its input), with the traceback, the key masked."""
    req = {}
    try:
        req = json.load(sys.stdin)
        out = run(req)
    except Exception:  # noqa: BLE001 - reported, not hidden
        secrets = [req.get("api_key") or ""] if isinstance(req, dict) else []
        out = {"ok": False, "runs": [], "console": "",
               "error": "the benchmark runner failed: " + mask(traceback.format_exc(), secrets)[-CONSOLE_KEEP:]}
        if isinstance(req, dict):
            out.update(side=req.get("side"), points=[])
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
