# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The main process: starts the children, binds the HTTP server, warms up, forwards requests."""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

from sglang_emulator import READY_LINE, SIGQUIT_LINE
from sglang_emulator import drain as drain_mod
from sglang_emulator import loads as loads_mod
from sglang_emulator import multinode as multinode_mod
from sglang_emulator.logs import emu, log, log_block
from sglang_emulator.scenarios import installed_sglang_version
from sglang_emulator.scheduler import detokenizer_main, scheduler_main
from sglang_emulator.server import EmulatorHTTPServer, make_handler, url_host


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


def decode_settings(args):
    """The decode model's settings (sglang_emulator.decode.DecodeModel's keyword arguments) from the command line."""
    verify_cost = args.emulator_spec_verify_cost
    return {"step_ms": args.emulator_step_ms, "per_req_ms": args.emulator_step_ms_per_req,
            "accept_length": args.emulator_accept_length, "spec_overhead": args.emulator_spec_overhead,
            "verify_cost": 1.0 if verify_cost is None else verify_cost,
            "max_accept": args.speculative_num_draft_tokens, "run_jitter": args.emulator_run_jitter}


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
        self.health_delay = [0.0, 0]  # [seconds, how many health requests still wait that long]
        # SGLang 0.5.23's health: the health requests sent to the scheduler and not answered by it yet (resident
        # there, also after the HTTP side gave up), the most at once, and how many HTTP health requests are open
        self.health_open = set()
        self.health_most_resident = 0
        self.health_http_open = 0
        self.health_most_http = 0
        self.health_lock = threading.Lock()
        self.prefill = None  # (monotonic end, requests it runs) of the test control's long prefill
        self.sglang_version = installed_sglang_version()
        self.client_rids = set()    # client requests accepted and not answered yet (/v1/loads, the drain)
        self.multinode = None       # sglang_emulator.multinode.MultiNode with --nnodes > 1
        self.draining = False       # SIGTERM received: health answers 503 while the requests held finish
        self.cfg = {
            "scenario": self.scenario,
            "log_level": args.log_level,
            "quiet_load": self.scenario == "replay",
            "parent_pid": os.getpid(),
            "tp_size": args.tp_size,
            # a follower ignores SIGTERM (its children too): it ends when rank 0 goes away
            "ignore_sigterm": args.nnodes > 1 and args.node_rank > 0,
            "load_seconds": max(0.0, args.emulator_load_seconds),
            "shards": args.emulator_shards,
            "capture_seconds": max(0.0, args.emulator_capture_seconds),
            "child_die_after": max(0.0, args.emulator_child_die_after),
            "health_resident_crash": max(0, getattr(args, "emulator_health_resident_crash", 3)),
            "speculative": bool(args.speculative_algorithm),
            "decode": decode_settings(args),
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
        for rank in range(self.args.tp_size // max(1, self.args.nnodes)):
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
                msg = self.detok_out.recv()
            except (EOFError, OSError):
                return
            self.last_receive = time.time()
            for out in (msg["outs"] if msg.get("type") == "batch" else [msg]):
                with self.health_lock:
                    self.health_open.discard(out.get("rid"))
                with self.pending_lock:
                    waiter = self.pending.get(out["rid"])
                    if waiter is not None and (out.get("finished", True) or "queue" not in waiter):
                        del self.pending[out["rid"]]
                if waiter is None:
                    continue
                if "queue" in waiter:
                    waiter["queue"].put(out)
                else:
                    waiter["result"] = out
                    waiter["event"].set()

    def _send(self, msg, waiter):
        """Register the waiter of msg["rid"] and send msg to the TP0 scheduler; False when the pipe is gone. A
        client's generate (not a warm-up, not a health check) is held in ``client_rids`` until ``done(rid)``."""
        client = msg.get("type") == "generate" and not msg.get("warmup") and not msg.get("health")
        with self.pending_lock:
            self.pending[msg["rid"]] = waiter
            if client:
                self.client_rids.add(msg["rid"])
        try:
            with self.send_lock:
                self.sched_conns[0].send(msg)
        except OSError:
            self.done(msg["rid"])
            return False
        return True

    def done(self, rid):
        """The request is answered (or given up): no waiter, no longer held."""
        with self.pending_lock:
            self.pending.pop(rid, None)
            self.client_rids.discard(rid)

    def ask(self, kind, timeout):
        """One control request to the TP0 scheduler (``get_internal_state``, ``flush_cache``): its reply, or None on
        timeout."""
        rid = uuid.uuid4().hex
        waiter = {"event": threading.Event(), "result": None}
        if not self._send({"type": kind, "rid": rid}, waiter) or not waiter["event"].wait(timeout):
            self.done(rid)
            return None
        return waiter["result"]

    def health_check(self, window):
        """SGLang 0.5.23's health_generate: a one-token request to the scheduler, then up to ``window`` s for *any*
        output of the detokenizer (its own, or any other request's). True: healthy. On False the request stays resident
        in the scheduler (SGLang's task.cancel() does not take it out) until the scheduler answers it."""
        rid = "HEALTH_CHECK_" + uuid.uuid4().hex
        waiter = {"event": threading.Event(), "result": None}
        tic = time.time()
        with self.health_lock:
            self.health_open.add(rid)
            self.health_most_resident = max(self.health_most_resident, len(self.health_open))
            self.health_http_open += 1
            self.health_most_http = max(self.health_most_http, self.health_http_open)
        try:
            msg = {"type": "generate", "rid": rid, "prompt": [0], "max_new_tokens": 1, "warmup": False,
                   "health": True, "stream": False}
            if not self._send(msg, waiter):
                return False
            end = tic + window
            while time.time() < end:
                if waiter["event"].wait(min(0.05, max(0.0, end - time.time()))) or self.last_receive > tic:
                    return True
            return False
        finally:
            self.done(rid)
            with self.health_lock:
                self.health_http_open -= 1

    def health_state(self):
        """The test control's view of health (GET /emulator/health_state)."""
        with self.health_lock:
            return {"resident": len(self.health_open), "most_resident": self.health_most_resident,
                    "open": self.health_http_open, "most_open": self.health_most_http}

    def long_prefill(self, seconds, running, log_every):
        """Test control: the scheduler runs a prefill of ``seconds`` s with ``running`` requests and no output at all
        (a long chunked prefill of a big model); a "Prefill batch" line every ``log_every`` s (0: none)."""
        self.prefill = (time.monotonic() + seconds, running)
        with self.send_lock:
            self.sched_conns[0].send({"type": "long_prefill", "seconds": seconds, "log_every": log_every,
                                      "running": running})

    def submit(self, prompt, max_new_tokens, timeout, warmup=False, health=False):
        """Send one request to the TP0 scheduler and wait for the detokenized output. None on timeout."""
        rid = uuid.uuid4().hex
        waiter = {"event": threading.Event(), "result": None}
        msg = {"type": "generate", "rid": rid, "prompt": prompt, "max_new_tokens": max_new_tokens,
               "warmup": warmup, "health": health, "stream": False}
        try:
            if not self._send(msg, waiter) or not waiter["event"].wait(timeout):
                return None
            return waiter["result"]
        finally:
            self.done(rid)

    # -- load and drain -----------------------------------------------------------------------------------------
    def in_flight(self):
        """The client requests accepted and not answered yet."""
        with self.pending_lock:
            return set(self.client_rids)

    def serving(self):
        """Whether /health answers 200: up, and no SIGTERM received."""
        return self.up and not self.draining

    def loads(self, query):
        """The body of GET /v1/loads (raises loads.LoadsError for what SGLang refuses)."""
        prefill = self.prefill
        extra = prefill[1] if prefill is not None and time.monotonic() < prefill[0] else 0
        load = loads_mod.snapshot(len(self.in_flight()) + extra, self.cfg)
        return loads_mod.answer(load, query, self.sglang_version, self.args.tp_size)

    def children_alive(self):
        return all(proc.is_alive() for proc in self.children)

    def begin_drain(self):
        """SIGTERM: answer health with 503 from now on and end once no client request is held (a thread)."""
        if self.draining:
            return
        self.draining = True
        threading.Thread(target=self._drain_then_exit, daemon=True).start()

    def _drain_then_exit(self):
        outcome = drain_mod.drain(self.in_flight, self.children_alive, lambda msg, level: log(msg, level=level),
                                  time.sleep, max(0.01, self.args.emulator_drain_interval))
        if outcome == "children_gone":
            emu("drain: the child processes are gone (a SIGTERM to the whole process group kills them, as it kills "
                "SGLang's): %d requests will not finish" % len(self.in_flight()))
        self.shutdown()

    def shutdown(self, code=0):
        """Stop the children (SIGTERM, then SIGKILL after 1 s) and exit."""
        if self.multinode is not None:
            self.multinode.on_shutdown()
        self.kill_children(signal.SIGTERM)
        deadline = time.monotonic() + 1.0
        for proc in self.children:
            proc.join(max(0.0, deadline - time.monotonic()))
        self.kill_children(signal.SIGKILL)
        os._exit(code)

    def submit_stream(self, prompt, max_new_tokens):
        """Send one streamed request: returns (rid, a queue of its outputs: each step's new tokens), or None when the
        scheduler's pipe is gone."""
        rid = uuid.uuid4().hex
        waiter = {"queue": queue.Queue()}
        msg = {"type": "generate", "rid": rid, "prompt": prompt, "max_new_tokens": max_new_tokens,
               "warmup": False, "health": False, "stream": True}
        if not self._send(msg, waiter):
            return None
        return rid, waiter["queue"]

    def abort(self, rid):
        """The client of a streamed request went away: drop it from the batch."""
        self.done(rid)
        try:
            with self.send_lock:
                self.sched_conns[0].send({"type": "abort", "rid": rid})
        except OSError:
            pass

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

    def bind_quiet(self):
        """Bind without uvicorn's lines (a replayed log brings its own), or exit 1."""
        EmulatorHTTPServer.address_family = socket.AF_INET6 if ":" in self.args.host else socket.AF_INET
        try:
            self.server = EmulatorHTTPServer((self.args.host, self.args.port), make_handler(self))
        except OSError as exc:
            emu("replay: cannot bind %s:%d: %s" % (self.args.host, self.args.port, exc))
            self.kill_children()
            os._exit(1)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()

    def take_health_delay(self):
        """Seconds the current health request waits first (the test control /emulator/health_delay)."""
        with self.pending_lock:
            seconds, count = self.health_delay
            if count <= 0:
                return 0.0
            self.health_delay = [seconds, count - 1]
            return seconds

    def warmup(self):
        """SGLang's _wait_and_warmup: GET /get_model_info, then one POST /generate through HTTP."""
        if self.args.emulator_warmup_seconds > 0:  # a big model's warm-up: HTTP is up, not ready yet
            time.sleep(self.args.emulator_warmup_seconds)
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
        if self.args.nnodes > 1:
            self.multinode = multinode_mod.MultiNode(self)
            if self.args.node_rank == 0:
                self.multinode.run_rank0()
            else:
                self.multinode.run_follower()
            return
        self.start_children()
        self.wait_schedulers()
        self.bind()
        self.warmup()
        while True:
            time.sleep(3600)



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
        # SGLang's SignalHandler.sigterm_handler: drain, then exit (before it serves there is nothing to drain).
        if engine.ready:
            engine.begin_drain()
        else:
            engine.shutdown()

    def on_int(signum, frame):
        engine.shutdown()

    def on_quit(signum, frame):
        # SGLang's launch_phase_sigquit_handler: log, then kill_process_tree(os.getpid()) (itself included).
        log(SIGQUIT_LINE, level="error")
        engine.kill_children(signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    # A follower of a multi-node server ignores SIGTERM: it ends when rank 0 goes away (sglang_emulator.multinode).
    signal.signal(signal.SIGTERM, signal.SIG_IGN if engine.cfg.get("ignore_sigterm") else on_term)
    signal.signal(signal.SIGINT, on_int)
    signal.signal(signal.SIGQUIT, on_quit)


