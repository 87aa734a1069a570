"""The benchmark runner (roles/sglang_bench/files/bench_client.py): the client's command line and environment, the
figures picked from the real client's --output-file line, the API key kept out of everything it returns. Pure: the
client's process is a fake that writes the recorded line of SGLang 0.5.23's client (tests/data/bench)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import role_program

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data", "bench")
KEY = "abcdefabcdefabcdef"  # the key the recorded lines' server had (its /server_info returned it, as SGLang does)

# As tasks/run.yml runs it: files/dp_accept_length.py, then files/bench_client.py
bench_client = role_program.load("sglang_bench", "run.yml", "bench_client.py")


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
    """subprocess.run for the runner's driver process: reads its plan (argv[-1]) and, for each run the plan asks
    for, writes ``line`` (or the next of ``lines``) into the run's output file and prints the driver's mark, then
    ``out``. ``durations`` (the result's ``duration`` per run) drive the driver's calibration as the real one does."""

    def __init__(self, line=None, rc=0, out=b"", timeout=False, lines=None, durations=None):
        self.lines = list(lines) if lines is not None else None
        self.line, self.rc, self.out, self.timeout, self.durations = line, rc, out, timeout, durations
        self.calls, self.plans = [], []

    def __call__(self, argv, **kwargs):
        self.calls.append((argv, kwargs))
        with open(argv[-1], encoding="utf-8") as handle:
            plan = json.load(handle)
        self.plans.append(plan)
        if self.timeout:
            raise subprocess.TimeoutExpired(argv, kwargs["timeout"], output=self.out)
        marks, index = [], 0
        for point in plan["points"]:
            index = self.point(plan, point, marks, index)
            if self.rc:
                break
        stdout = ("\n".join(marks) + "\n").encode() + self.out
        return subprocess.CompletedProcess(argv, self.rc, stdout=stdout)

    def point(self, plan, point, marks, index):
        num, counted = point["num_prompts"], 0
        while counted < plan["repeats"]:
            line = self.lines.pop(0) if self.lines is not None else self.line
            out = os.path.join(plan["dir"], "result-%d.jsonl" % index)
            duration = self.durations[index] if self.durations else 100.0
            if line is not None:
                try:
                    row = dict(json.loads(line), duration=duration, completed=num)
                    row.update({k: v for k, v in json.loads(line).items() if k == "completed" and v != 8})
                    line = json.dumps(row) + "\n"
                except ValueError:
                    pass
                with open(out, "a", encoding="utf-8") as handle:
                    handle.write(line)
            calibrate = counted == 0 and duration < plan["min_seconds"] and num < plan["max_prompts"]
            if self.rc == 0:
                marks.append(bench_client.MARK + json.dumps({"file": out, "num_prompts": num, "rc": 0,
                                                             "concurrency": point["concurrency"],
                                                             "calibration": calibrate, "seconds": 1.5}))
            index += 1
            if self.rc:
                break
            if calibrate:
                num = min(plan["max_prompts"], int(num * plan["min_seconds"] / duration * 1.1) + 1)
            else:
                counted += 1
        return index


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
    assert figures["client_accept_length"] == figures["accept_length"]  # one rank: the client's own figure
    assert server == {"speculative_algorithm": "EAGLE3", "speculative_num_steps": None, "speculative_eagle_topk": None,
                      "speculative_num_draft_tokens": 4, "tp_size": 1, "dp_size": 1, "version": None,
                      "avg_spec_accept_length": pytest.approx(2.4737, rel=1e-4),
                      "accept_ranks": [pytest.approx(2.4737, rel=1e-4)],
                      "accept_length_from": "one rank"}


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


def test_the_chat_set_goes_to_the_client_as_sharegpt_with_fixed_output_lengths():
    req = request(dataset="chat", chat_template=True, output_len=48)
    args = bench_client.client_args(req, "/tmp/x/chat_prompts.json")
    pairs = dict(zip(args[::2], args[1::2]))
    assert pairs["--dataset-name"] == "sharegpt" and pairs["--dataset-path"] == "/tmp/x/chat_prompts.json"
    assert pairs["--sharegpt-output-len"] == "48" and "--apply-chat-template" in args
    assert "--random-input-len" not in args and "--num-prompts" not in args  # the driver adds it per run
    assert "--apply-chat-template" not in bench_client.client_args(dict(req, chat_template=False), "/p")


def test_the_shipped_chat_set_is_sharegpt_shaped_multi_turn_and_of_varied_lengths():
    path = os.path.join(REPO, "roles", "sglang_bench", "files", "chat_prompts.json")
    assert os.path.getsize(path) < 400 * 1024
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    assert len(data) == 256
    for entry in data:
        turns = entry["conversations"]
        assert [t["from"] for t in turns[:2]] == ["human", "gpt"] and all(t["value"] for t in turns[:2])
    lengths = sorted(len(e["conversations"][0]["value"]) for e in data)
    assert lengths[0] < 100 and lengths[-1] > 1500  # a short question to a long pasted history
    multi = [e for e in data if e["turns_before"] > 0]
    assert len(multi) > len(data) / 3 and all(e["conversations"][0]["value"].count("Assistant: ") ==
                                              e["turns_before"] for e in multi)


def test_the_accept_length_is_the_mean_of_every_data_parallel_rank():
    # SGLang 0.5.23's internal_states: one dict per DP rank, avg_spec_accept_length and no verify count beside it
    spec = json.loads(recorded("spec"))
    rank = spec["server_info"]["internal_states"][0]
    states = [rank, dict(rank, avg_spec_accept_length=3.5), {"last_gen_throughput": 12.0}]  # the last: none yet
    value, ranks, how = bench_client.accept_length(states)
    assert value == pytest.approx((rank["avg_spec_accept_length"] + 3.5) / 2) and how == "mean of 2 ranks"
    assert ranks == [rank["avg_spec_accept_length"], 3.5]
    # a count a state might carry changes nothing: no release gives one, the figure is the plain mean
    value, _, _ = bench_client.accept_length([{"avg_spec_accept_length": 2.0, "spec_verify_ct": 300},
                                              {"avg_spec_accept_length": 3.0, "spec_verify_ct": 100}])
    assert value == 2.5
    assert not hasattr(bench_client, "VERIFY_COUNT_KEYS")
    assert bench_client.accept_length([{"other": 1}, "x"]) == (None, [], None)
    result = dict(spec, accept_length=2.0, server_info=dict(spec["server_info"], internal_states=[
        dict(rank, avg_spec_accept_length=2.0), dict(rank, avg_spec_accept_length=4.0)]))
    figures, server = bench_client.pick(result, [KEY])
    assert figures["accept_length"] == 3.0 and figures["client_accept_length"] == 2.0  # the client's: rank 0 only
    assert server["avg_spec_accept_length"] == 2.0 and server["accept_ranks"] == [2.0, 4.0]
    assert server["accept_length_from"] == "mean of 2 ranks"


def test_a_point_runs_its_repeats_in_one_process_with_the_same_requests():
    fake = FakeClient(recorded("spec"))
    out = bench_client.run(request(repeats=3, num_prompts=8), python="/venv/bin/python", runner=fake)
    assert out["ok"] and len(fake.calls) == 1
    argv, _ = fake.calls[0]
    assert argv[:2] == ["/venv/bin/python", "-c"] and argv[2] == bench_client.DRIVER
    assert [(r["repeat"], r["calibration"], r["num_prompts"], r["ok"]) for r in out["runs"]] == [
        (0, False, 8, True), (1, False, 8, True), (2, False, 8, True)]
    assert out["runs"][0]["argv"][1:3] == ["-m", "sglang.benchmark.serving"] and "--flush-cache" in out["runs"][0]["argv"]
    compile(bench_client.DRIVER, "driver", "exec")  # the driver is a program of its own


def test_a_side_runs_every_point_in_one_process_with_its_requests_per_run():
    fake = FakeClient(recorded("spec"))
    req = request(concurrencies=[1, 4, 16], min_requests=8, prompts_per_concurrency=2, repeats=2, label="emulated")
    out = bench_client.run(req, runner=fake)
    assert out["ok"] and len(fake.calls) == 1
    assert fake.plans[0]["points"] == [{"concurrency": 1, "num_prompts": 8}, {"concurrency": 4, "num_prompts": 8},
                                       {"concurrency": 16, "num_prompts": 32}]
    assert "--max-concurrency" not in fake.plans[0]["args"]  # the driver adds each point's
    assert [(r["concurrency"], r["repeat"]) for r in out["runs"]] == [(1, 0), (1, 1), (4, 0), (4, 1), (16, 0), (16, 1)]
    argv = out["runs"][-1]["argv"]
    assert argv[argv.index("--max-concurrency") + 1] == "16" and argv[argv.index("--num-prompts") + 1] == "32"
    assert [p["line"] for p in out["points"]][0] == (
        "speculative c=1: 2 run(s) of 8 requests, output tok/s 189.2 / 189.2, accept length 2.47 / 2.47 (3.0 s)"
        " (emulated)")


def test_a_side_past_its_timeout_names_the_point_it_was_at():
    fake = FakeClient(recorded("spec"), timeout=True)
    out = bench_client.run(request(concurrencies=[1, 4], min_requests=8, prompts_per_concurrency=2, timeout=5),
                           runner=fake)
    assert fake.calls[0][1]["timeout"] == 10  # sglang_bench_run_timeout is per point
    assert not out["ok"] and out["concurrency"] == 1 and out["error"] == "the client did not finish within 10 s"


def test_a_run_shorter_than_min_seconds_calibrates_and_is_not_counted():
    fake = FakeClient(recorded("spec"), durations=[2.0, 11.0, 12.0])
    out = bench_client.run(request(repeats=2, num_prompts=8, min_seconds=10), runner=fake)
    assert out["ok"], out["error"]
    assert [(r["repeat"], r["calibration"], r["num_prompts"]) for r in out["runs"]] == [
        (None, True, 8), (0, False, 45), (1, False, 45)]


def test_a_chat_point_never_asks_for_more_requests_than_the_set_holds():
    chat = json.dumps([{"conversations": [{"from": "human", "value": "q%d" % i}, {"from": "gpt", "value": "a"}]}
                       for i in range(10)])
    fake = FakeClient(recorded("spec"))
    out = bench_client.run(request(dataset="chat", dataset_json=chat, num_prompts=64, repeats=1), runner=fake)
    assert out["ok"] and out["points"][0]["num_prompts"] == 10 and fake.plans[0]["max_prompts"] == 10
    assert "--dataset-path" in fake.plans[0]["args"]


def test_the_key_goes_only_into_the_client_s_environment_and_the_hub_is_off():
    env = bench_client.client_env({"PATH": "/bin", "API_KEY": "other", "OPENAI_API_KEY": "stale"}, KEY)
    assert env["OPENAI_API_KEY"] == KEY and "API_KEY" not in env
    assert env["HF_HUB_OFFLINE"] == "1" and env["PATH"] == "/bin"
    assert "OPENAI_API_KEY" not in bench_client.client_env({"OPENAI_API_KEY": "stale"}, "")


def test_a_run_returns_the_figures_and_nothing_of_the_key():
    fake = FakeClient(recorded("spec"), out=("benchmark_args=... key %s \x1b[2J done\n" % KEY).encode())
    out = bench_client.run(request(), python="/venv/bin/python", runner=fake, clock=iter([0.0, 12.5]).__next__)
    assert out["ok"] and out["error"] is None and out["rc"] == 0 and out["seconds"] == 12.5
    (one,) = out["runs"]
    assert one["figures"]["completed"] == 8 and one["server"]["speculative_algorithm"] == "EAGLE3"
    text = json.dumps(out)
    assert KEY not in text
    assert "key *** \\\\x1b[2J done" in text  # masked, and the terminal escape shown, not sent
    assert bench_client.MARK not in out["console"]
    argv, kwargs = fake.calls[0]
    assert kwargs["env"]["OPENAI_API_KEY"] == KEY and kwargs["stdin"] == subprocess.DEVNULL
    assert KEY not in " ".join(argv) and KEY not in json.dumps(fake.plans[0])
    assert not os.path.exists(fake.plans[0]["dir"])  # its temp dir is gone


def test_a_run_with_failed_requests_is_not_ok():
    line = json.loads(recorded("spec"))
    line["completed"] = 6
    out = bench_client.run(request(), runner=FakeClient(json.dumps(line) + "\n"))
    assert not out["ok"] and out["error"] == "6 of 8 requests completed (see the client's console)"
    assert out["runs"][0]["ok"] is False


def test_a_client_that_fails_or_writes_nothing_is_reported_with_its_console():
    out = bench_client.run(request(), runner=FakeClient(None, rc=1, out=b"Traceback ...\nValueError: Warmup failed\n"))
    assert not out["ok"] and out["error"] == "the client exited with status 1 (see its console)"
    assert "Warmup failed" in out["console"] and out["runs"] == []
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
