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
from sglang_emulator.logs import emit_raw, log, log_block, set_log_level, tqdm_line

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
        self.send_lock = threading.Lock()  # outputs sent by the serve loop and by requests that end later

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
            if cfg["scenario"] == "crash_hang":
                self.crash_and_hang()
        ids = fake_output_ids(req["prompt"], max_new)
        out = {"rid": req["rid"], "output_ids": ids, "prompt_tokens": prompt_tokens, "max_new_tokens": max_new}
        if client and cfg.get("token_seconds", 0) > 0:
            # A long decode: it ends later, beside the next requests (health checks are not held behind it).
            self.decode_line(prompt_tokens, max_new)
            timer = threading.Timer(max_new * cfg["token_seconds"], self.send_later, args=(out,))
            timer.daemon = True
            timer.start()
            return
        if max_new > 1 and not is_health:
            time.sleep(min(0.001 * max_new, 0.2))
            self.decode_line(prompt_tokens, max_new)
        self.send_output(out)

    def decode_line(self, prompt_tokens, max_new):
        cfg = self.cfg
        spec = ", accept len: 2.47" if cfg["speculative"] else ""
        self.log("Decode batch. #running-req: 1, #token: %d, token usage: %.2f%s, cuda graph: True, "
                 "gen throughput (token/s): %.2f, #queue-req: 0, "
                 % (prompt_tokens + max_new, (prompt_tokens + max_new) / cfg["max_total_num_tokens"], spec,
                    163.41 if cfg["speculative"] else 71.88))

    def send_output(self, out):
        with self.send_lock:
            self.detok_conn.send(out)

    def send_later(self, out):
        """A long decode's output, from its timer thread (a detokenizer gone meanwhile ends nothing here)."""
        try:
            self.send_output(out)
        except OSError:
            pass


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

