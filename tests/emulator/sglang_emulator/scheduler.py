# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The child processes: schedulers (one per TP rank) and the detokenizer, and the fake model they run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import threading
import time

from sglang_emulator import EAGLE_ATTRIBUTE, EAGLE_CLASS, FAKE_GPU_MEM, FAKE_VOCAB
from sglang_emulator.decode import DecodeBatch, DecodeModel, Request
from sglang_emulator.logs import emit_raw, log, log_block, set_log_level, tqdm_line

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
DECODE_LOG_INTERVAL = 40


def decode_model(cfg):
    """The decode model of the scheduler's config (cfg["decode"]: DecodeModel's keyword arguments)."""
    return DecodeModel(speculative=cfg["speculative"], **cfg.get("decode", {}))


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



class SchedulerEmu:
    """What one scheduler process (TP rank) does: load, then serve requests from the tokenizer manager."""

    def __init__(self, rank, cfg, conn, detok_conn):
        self.rank = rank
        self.cfg = cfg
        self.conn = conn
        self.detok_conn = detok_conn
        self.first_client_request = True
        self.die_at = None
        self.batch = DecodeBatch(decode_model(cfg))
        self.flush_waiting = []
        self.last_throughput = 0.0
        self.prefill_until = None  # the test control's long prefill: no output of any kind until then
        self.prefill_log = (0.0, None, 0)  # (every s, next line at, requests) of its "Prefill batch" lines
        self.resident = []  # health requests held while busy (SGLang keeps them; #35884)

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
            emit_raw(tqdm_line("Loading safetensors checkpoint shards", 0, shards, 0, per_shard) + "\n")
        for i in range(1, shards + 1):
            self.sleep(per_shard)
            if scenario == "crash_loading" and i > shards // 2 and self.rank == 0:
                self.crash(self.oom_traceback(), during_init=True)
            if self.rank == 0:
                emit_raw(tqdm_line("Loading safetensors checkpoint shards", i, shards,
                                    time.monotonic() - start, per_shard) + "\n")
        if self.rank == 0:
            emit_raw(tqdm_line("Loading safetensors checkpoint shards", shards, shards,
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

    def crash_and_hang(self):
        """crash_hang: the decode raises and is logged like a scheduler crash, but the process tree stays up and
        answers nothing (no SIGQUIT reaches the launcher): only health can prove the server dead."""
        root = self.cfg["site_root"]
        log_block("Scheduler hit an exception: " + "\n".join([
            "Traceback (most recent call last):",
            '  File "%s/srt/managers/scheduler.py", line 2960, in run_scheduler_process' % root,
            "    scheduler.event_loop_overlap()",
            '  File "%s/srt/managers/scheduler.py", line 1064, in event_loop_overlap' % root,
            "    batch_result = self.run_batch(batch)",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ]), rank=self.rank)
        while True:
            time.sleep(3600)

    # -- serving ------------------------------------------------------------------------------------------------
    def serve(self):
        """Receive requests and run the continuous batch (TP0; the other ranks only wait): a step ends at its
        time, its outputs go to the detokenizer in one message, and the next step starts with whoever waits."""
        step_end = None
        last_end = None
        while True:
            now = time.monotonic()
            if self.die_at is not None and now >= self.die_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if self.prefilling(now):
                step_end = None  # the batch waits for the prefill: nothing is output
                timeout = 0.05
            else:
                timeout = 0.2 if step_end is None else max(0.0, step_end - now)
            if self.die_at is not None:
                timeout = min(timeout, max(self.die_at - now, 0.01))
            if self.conn.poll(timeout):
                try:
                    msg = self.conn.recv()
                except (EOFError, OSError):
                    os._exit(0)
                self.handle(msg)
            if self.prefilling(time.monotonic()):
                continue
            if step_end is not None and time.monotonic() >= step_end:
                self.end_step()
                last_end, step_end = step_end, None
            if step_end is None and not self.batch.idle():
                step_end = self.begin_step(last_end)
            if self.flush_waiting and self.batch.idle():
                self.flush()

    def handle(self, msg):
        kind = msg.get("type")
        if kind == "server_ready":
            if self.cfg["scenario"] == "child_dies" and self.rank == 0:
                self.die_at = time.monotonic() + self.cfg["child_die_after"]
        elif self.rank != 0:
            return
        elif kind == "generate":
            self.admit(msg)
        elif kind == "long_prefill":
            every = float(msg.get("log_every") or 0)
            self.prefill_until = time.monotonic() + float(msg["seconds"])
            self.prefill_log = (every, time.monotonic() if every > 0 else None, int(msg.get("running") or 1))
        elif kind == "abort":
            self.batch.abort(msg["rid"])
        elif kind == "flush_cache":
            self.flush_waiting.append(msg["rid"])
        elif kind == "get_internal_state":
            state = {"last_gen_throughput": round(self.last_throughput, 2)}
            accept = self.batch.avg_accept_length()
            if accept is not None:
                state["avg_spec_accept_length"] = accept
            self.detok_conn.send({"type": "reply", "rid": msg["rid"], "state": state})

    def prefilling(self, now):
        """Whether the long prefill runs (its "Prefill batch" lines logged as it goes); once it ends, the health
        requests held meanwhile are answered."""
        if self.prefill_until is None:
            return False
        every, next_at, running = self.prefill_log
        if now < self.prefill_until:
            if next_at is not None and now >= next_at:
                self.log("Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.40, "
                         "#running-req: %d, #queue-req: 0, " % running)
                self.prefill_log = (every, now + every, running)
            return True
        self.prefill_until = None
        held, self.resident = self.resident, []
        if held:
            self.detok_conn.send({"type": "batch", "outs": [{
                "rid": req["rid"], "output_ids": [0], "completion_tokens": 1, "prompt_tokens": 1, "verify_ct": 0,
                "finished": True} for req in held]})
        return False

    def resident_crash(self):
        """SGLang #35884: health requests piled up in the scheduler crash paged prefill."""
        root = self.cfg["site_root"]
        self.crash("\n".join([
            "Traceback (most recent call last):",
            '  File "%s/srt/managers/scheduler.py", line 2960, in run_scheduler_process' % root,
            "    scheduler.event_loop_overlap()",
            '  File "%s/srt/mem_cache/allocator.py", line 412, in alloc_extend' % root,
            "    assert len(torch.unique(out_indices)) == len(out_indices)",
            "AssertionError: %d health check requests are resident in the scheduler" % len(self.resident),
        ]), during_init=False)

    def admit(self, req):
        """A generate request: a health check answers at once (it does not wait for the batch, so a long step never
        fails it); the first client request runs the scenario's crash; every other request waits for the next step."""
        prompt_tokens = count_prompt_tokens(req["prompt"])
        ids = fake_output_ids(req["prompt"], req["max_new_tokens"])
        if req.get("health", False) and self.prefilling(time.monotonic()):
            # busy: SGLang's scheduler skips it, and keeps it (a client that gave up does not take it out)
            self.resident.append(req)
            limit = self.cfg.get("health_resident_crash", 0)
            if limit and len(self.resident) >= limit:
                self.resident_crash()
            return
        if req.get("health", False):
            self.detok_conn.send({"type": "batch", "outs": [{
                "rid": req["rid"], "output_ids": ids, "completion_tokens": len(ids), "prompt_tokens": prompt_tokens,
                "verify_ct": 0, "finished": True}]})
            return
        if not req.get("warmup", False) and self.first_client_request:
            self.first_client_request = False
            plan = self.cfg.get("eagle")
            crash = plan is not None and plan["will_crash"]
            if crash or self.cfg["scenario"] == "crash_hang":
                # The request's prefill runs (and is logged) before the first decode step, where SGLang dies.
                self.log("Prefill batch. #new-seq: 1, #new-token: %d, #cached-token: 0, token usage: %.2f, "
                         "#running-req: %d, #queue-req: 0, "
                         % (prompt_tokens, prompt_tokens / self.cfg["max_total_num_tokens"], len(self.batch.running)))
            if crash:
                self.crash(self.eagle_traceback(), during_init=False)
            if self.cfg["scenario"] == "crash_hang":
                self.crash_and_hang()
        self.batch.add(Request(req["rid"], ids, prompt_tokens, req.get("stream", False)))

    def begin_step(self, last_end=None):
        """Start a step; returns when it ends. A step that follows the last one at once is timed from that one's
        planned end, so the emulator's own work between steps (slow on a busy host) is not added to the model's
        time, as a GPU's step time does not wait for the host; after a pause it starts now."""
        seconds, joined = self.batch.begin_step()
        now = time.monotonic()
        start = last_end if last_end is not None and 0.0 <= now - last_end < seconds else now
        if joined:
            new_tokens = sum(r.prompt_tokens for r in joined)
            self.log("Prefill batch. #new-seq: %d, #new-token: %d, #cached-token: 0, token usage: %.2f, "
                     "#running-req: %d, #queue-req: 0, "
                     % (len(joined), new_tokens, new_tokens / self.cfg["max_total_num_tokens"],
                        len(self.batch.running) - len(joined)))
        return start + seconds

    def end_step(self):
        outs, size = self.batch.end_step()
        if outs:
            self.detok_conn.send({"type": "batch", "outs": outs})
        seconds = self.batch.last_step_seconds
        self.last_throughput = self.batch.last_step_tokens / seconds if seconds > 0 else 0.0
        # SGLang logs a decode line every decode_log_interval (40) decode steps, and only then: a short request (the
        # warm-up's 8 tokens) logs none, so the first client request after it is still "the first batches".
        if self.batch.steps % DECODE_LOG_INTERVAL == 0:
            tokens = sum(r.prompt_tokens + r.emitted for r in self.batch.running) or size
            accept = self.batch.avg_accept_length()
            spec = ", accept len: %.2f" % accept if accept is not None else ""
            self.log("Decode batch. #running-req: %d, #token: %d, token usage: %.2f%s, cuda graph: True, "
                     "gen throughput (token/s): %.2f, #queue-req: %d, "
                     % (size, tokens, tokens / self.cfg["max_total_num_tokens"], spec, self.last_throughput,
                        len(self.batch.waiting)))

    def flush(self):
        """SGLang's flush_cache: only when nothing runs; resets the acceptance figures."""
        self.batch.flush()
        self.log("Cache is flushed successfully!")
        for rid in self.flush_waiting:
            self.detok_conn.send({"type": "reply", "rid": rid, "flushed": True})
        self.flush_waiting = []


def scheduler_main(rank, cfg, conn, detok_conn):
    """Entry of a scheduler child process."""
    _set_title("sglang::scheduler_TP%d" % rank)
    set_log_level(cfg["log_level"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if cfg.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _watch_parent(cfg["parent_pid"])
    sched = SchedulerEmu(rank, cfg, conn, detok_conn)
    sched.load()
    conn.send({"type": "init_done", "rank": rank, "max_total_num_tokens": cfg["max_total_num_tokens"]})
    sched.serve()


def detokenizer_main(cfg, in_conn, out_conn):
    """Entry of the detokenizer child process: token ids in, text out (a step's outputs in one message)."""
    _set_title("sglang::detokenizer")
    set_log_level(cfg["log_level"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch_parent(cfg["parent_pid"])
    while True:
        try:
            msg = in_conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if msg.get("type") == "batch":
            msg = {"type": "batch", "outs": [dict(out, text=detokenize(out["output_ids"])) for out in msg["outs"]]}
        out_conn.send(msg)
