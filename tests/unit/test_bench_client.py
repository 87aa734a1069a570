"""The benchmark runner (roles/sglang_bench/files/bench_client.py): the client's command line and environment, the
figures picked from the real client's --output-file line, the API key kept out of everything it returns. Pure: the
client's process is a fake that writes the recorded line of SGLang 0.5.23's client (tests/data/bench)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data", "bench")
KEY = "abcdefabcdefabcdef"  # the key the recorded lines' server had (its /server_info returned it, as SGLang does)

_spec = importlib.util.spec_from_file_location("bench_client", os.path.join(REPO, "roles", "sglang_bench", "files",
                                                                            "bench_client.py"))
bench_client = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_client)


def recorded(side):
    """The first result line the real client (SGLang 0.5.23's sglang.benchmark.serving) wrote against the emulator."""
    with open(os.path.join(DATA, "client-0.5.23-%s.jsonl" % side), encoding="utf-8") as handle:
        return handle.readline()


def request(**over):
    req = {"module": "sglang.benchmark.serving", "base_url": "http://127.0.0.1:30000", "api_key": KEY,
           "tokenizer": "/data/models/m", "side": "speculative", "concurrency": 1, "num_prompts": 8, "input_len": 64,
           "output_len": 48, "seed": 1, "warmup_requests": 1, "timeout": 60}
    req.update(over)
    return req


class FakeClient:
    """subprocess.run for the client: writes ``line`` into the --output-file of the argv it gets, prints ``out``."""

    def __init__(self, line=None, rc=0, out=b"", timeout=False):
        self.line, self.rc, self.out, self.timeout = line, rc, out, timeout
        self.calls = []

    def __call__(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        if self.timeout:
            raise subprocess.TimeoutExpired(argv, kwargs["timeout"], output=self.out)
        if self.line is not None:
            with open(argv[argv.index("--output-file") + 1], "a", encoding="utf-8") as handle:
                handle.write(self.line)
        return subprocess.CompletedProcess(argv, self.rc, stdout=self.out)


def test_the_recorded_lines_hold_the_key_the_server_returned():
    # What the runner must keep out: SGLang's /server_info returns every server argument, the API key too.
    assert KEY in recorded("spec") and json.loads(recorded("spec"))["server_info"]["api_key"] == KEY


def test_figures_are_picked_by_the_client_s_own_names():
    figures, server = bench_client.pick(json.loads(recorded("spec")), [KEY])
    assert figures["output_throughput"] == pytest.approx(189.16146, rel=1e-5)
    assert figures["request_throughput"] == pytest.approx(3.94086, rel=1e-5)
    assert figures["median_ttft_ms"] == pytest.approx(15.85, abs=0.01)
    assert figures["p99_ttft_ms"] > figures["median_ttft_ms"]
    assert figures["median_itl_ms"] == pytest.approx(4.20, abs=0.01) and figures["p99_itl_ms"] > 0
    assert figures["accept_length"] == pytest.approx(2.4737, rel=1e-4)
    assert figures["completed"] == 8 and figures["max_concurrency"] == 1
    assert figures["request_rate"] == "inf"  # the client writes Infinity: not JSON, kept as text
    assert server == {"speculative_algorithm": "EAGLE3", "speculative_num_steps": None, "speculative_eagle_topk": None,
                      "speculative_num_draft_tokens": 4, "tp_size": 1, "version": None,
                      "avg_spec_accept_length": pytest.approx(2.4737, rel=1e-4)}


def test_the_baseline_has_no_accept_length():
    figures, server = bench_client.pick(json.loads(recorded("baseline")), [KEY])
    assert figures["accept_length"] is None and server["avg_spec_accept_length"] is None
    assert server["speculative_algorithm"] is None and figures["output_throughput"] > 0


def test_a_disaggregated_server_info_is_read_from_its_decode_side():
    result = {"server_info": {"decode": [{"speculative_algorithm": "EAGLE3",
                                          "internal_states": [{"avg_spec_accept_length": 3.1}]}]}}
    assert bench_client.pick(result)[1]["avg_spec_accept_length"] == 3.1


def test_the_command_line_is_sglang_s_client_with_fixed_lengths_and_no_secret():
    argv = bench_client.client_argv("/venv/bin/python", request(concurrency=8, num_prompts=16), "/tmp/x/out.jsonl")
    assert argv[:3] == ["/venv/bin/python", "-m", "sglang.benchmark.serving"]
    pairs = dict(zip(argv[3::2], argv[4::2]))
    assert pairs["--dataset-name"] == "random-ids" and pairs["--random-range-ratio"] == "1.0"
    assert pairs["--max-concurrency"] == "8" and pairs["--num-prompts"] == "16" and pairs["--seed"] == "1"
    assert pairs["--tokenizer"] == "/data/models/m" and "--flush-cache" in argv
    assert KEY not in " ".join(argv)


def test_the_key_goes_only_into_the_client_s_environment_and_the_hub_is_off():
    env = bench_client.client_env({"PATH": "/bin", "API_KEY": "other", "OPENAI_API_KEY": "stale"}, KEY)
    assert env["OPENAI_API_KEY"] == KEY and "API_KEY" not in env
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] == "/bin"
    assert "OPENAI_API_KEY" not in bench_client.client_env({"OPENAI_API_KEY": "stale"}, "")


def test_a_run_returns_the_figures_and_nothing_of_the_key():
    fake = FakeClient(recorded("spec"), out=("benchmark_args=... key %s \x1b[2J done\n" % KEY).encode())
    out = bench_client.run(request(), python="/venv/bin/python", runner=fake, clock=iter([0.0, 12.5]).__next__)
    assert out["ok"] and out["error"] is None and out["rc"] == 0 and out["seconds"] == 12.5
    assert out["figures"]["completed"] == 8 and out["server"]["speculative_algorithm"] == "EAGLE3"
    text = json.dumps(out)
    assert KEY not in text
    assert "key *** \\\\x1b[2J done" in text  # masked, and the terminal escape shown, not sent
    argv, kwargs = fake.calls[0]
    assert kwargs["env"]["OPENAI_API_KEY"] == KEY and kwargs["stdin"] == subprocess.DEVNULL
    assert not os.path.exists(os.path.dirname(argv[argv.index("--output-file") + 1]))  # its temp dir is gone


def test_a_run_with_failed_requests_is_not_ok():
    line = json.loads(recorded("spec"))
    line["completed"] = 6
    out = bench_client.run(request(), runner=FakeClient(json.dumps(line) + "\n"))
    assert not out["ok"] and out["error"] == "6 of 8 requests completed (see the client's console)"


def test_a_client_that_fails_or_writes_nothing_is_reported_with_its_console():
    out = bench_client.run(request(), runner=FakeClient(None, rc=1, out=b"Traceback ...\nValueError: Warmup failed\n"))
    assert not out["ok"] and out["error"] == "the client exited with status 1 (see its console)"
    assert "Warmup failed" in out["console"] and out["figures"] is None
    out = bench_client.run(request(), runner=FakeClient(None, rc=0))
    assert out["error"] == "the client wrote no result (see its console)"
    out = bench_client.run(request(), runner=FakeClient("{not json\n"))
    assert not out["ok"] and out["error"].startswith("the client's output file is not JSON")


def test_a_client_past_its_timeout_is_reported():
    out = bench_client.run(request(timeout=5), runner=FakeClient(timeout=True, out=b"half way %s" % KEY.encode()),
                           clock=iter([0.0, 5.0]).__next__)
    assert not out["ok"] and out["error"] == "the client did not finish within 5 s" and out["console"] == "half way ***"


def test_a_failure_of_the_runner_itself_is_still_one_json_answer_with_the_key_masked(monkeypatch, capsys):
    """The task that runs the runner hides its output (the key is in its input): its own crash must come back as
    JSON that says what failed, never as a bare traceback."""
    import io
    key = "sk-runner-crash-0123456789"
    monkeypatch.setattr(bench_client.sys, "stdin", io.StringIO(json.dumps({"api_key": key, "side": "baseline"})))
    bench_client.main()  # the request lacks its fields: run() raises KeyError
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["side"] == "baseline"
    assert out["error"].startswith("the benchmark runner failed: Traceback") and "KeyError" in out["error"]
    assert key not in json.dumps(out)
    monkeypatch.setattr(bench_client.sys, "stdin", io.StringIO("not json"))
    bench_client.main()
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and "JSONDecodeError" in out["error"]
