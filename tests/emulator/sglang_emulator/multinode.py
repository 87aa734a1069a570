# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Several nodes as one server (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``), as SGLang 0.5.x behaves.

A real TCP rendezvous stands for torch.distributed's: rank 0 listens on the dist-init address and waits, without a
deadline of its own (torch's store waits for 30 minutes), until every other node has connected and said
``join R``. Then each node loads. After its own load a follower says ``loaded R``; rank 0 waits at SGLang's load
barrier (``dist.monitored_barrier``, ``--emulator-barrier-seconds``, SGLang's 480 s) for every follower's word, and
fails there with SGLang's ValueError ("TP rank 0 could finish the model loading, but there are other ranks that
didn't finish loading") when one is missing. Rank 0 then serves as a single-node server does; a follower serves
SGLang's dummy health server (``/health``, ``/health_generate``, ``/ping``: 200 whatever rank 0 does), ignores
SIGTERM (its children too) and ends when rank 0's connection closes. A follower's connection that drops kills rank 0
the way NCCL does (a DistBackendError traceback from TP0).
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import threading
import time

from sglang_emulator.logs import emu, log, log_block

NCCL_REMOTE_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
    "remote process exited or there was a network error, NCCL version 2.21.5\n"
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
    "Last error:\n"
    "socketProgress: Connection closed by remote peer %s")


def split_addr(addr):
    """``host:port`` (``[v6]:port``) -> (host, port); ValueError when it is not that."""
    host, sep, port = (addr or "").rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("--dist-init-addr must be HOST:PORT, got %r" % addr)
    return host.strip("[]"), int(port)


def _traceback(site, exc_lines):
    return "\n".join([
        "Traceback (most recent call last):",
        '  File "%s/srt/managers/scheduler.py", line 3190, in run_scheduler_process' % site,
        "    scheduler = Scheduler(",
        '  File "%s/srt/model_executor/model_runner.py", line 849, in load_model' % site,
        "    raise ValueError(" if exc_lines.startswith("ValueError") else "    dist.all_reduce(tensor)",
    ] + exc_lines.split("\n"))


class _Lines:
    """Newline-framed words over a socket (``join 1``, ``loaded 1``)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def send(self, word):
        try:
            self.sock.sendall(word.encode() + b"\n")
            return True
        except OSError:
            return False

    def read(self):
        """The next word, or None at end of connection."""
        while b"\n" not in self.buf:
            try:
                data = self.sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                return None
            self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode("ascii", "replace").strip()


class MultiNode:
    def __init__(self, engine):
        self.engine = engine
        self.args = engine.args
        self.nnodes = self.args.nnodes
        self.rank = self.args.node_rank
        self.host, self.port = split_addr(self.args.dist_init_addr)
        self.cond = threading.Condition()
        self.joined = set()
        self.loaded = set()
        self.stopping = False

    # -- rank 0 -------------------------------------------------------------------------------------------------
    def _listen(self):
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            log_block("Scheduler hit an exception: " + _traceback(self.engine.cfg["site_root"], (
                "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                "address. port: %d, useIpv6: False, code: -98, name: EADDRINUSE, message: address already in use"
                % self.port)), rank=0)
            emu("rank 0 cannot listen on %s:%d: %s" % (self.host, self.port, exc))
            os._exit(1)
        sock.listen(self.nnodes)
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def _accept(self, sock):
        while True:
            conn, peer = sock.accept()
            threading.Thread(target=self._follow, args=(_Lines(conn), "%s:%d" % peer[:2]), daemon=True).start()

    def _follow(self, lines, peer):
        first = lines.read() or ""
        if not first.startswith("join "):
            return
        rank = int(first.split()[1])
        with self.cond:
            self.joined.add(rank)
            self.cond.notify_all()
        while True:
            word = lines.read()
            if word is None:
                break
            if word.startswith("loaded "):
                with self.cond:
                    self.loaded.add(rank)
                    self.cond.notify_all()
        with self.cond:
            if self.stopping:
                return
        # NCCL: a peer gone is a collective that fails on rank 0 (its watchdog tears the process down).
        log("[rank0]:[E ProcessGroupNCCL.cpp:1595] [PG 0 Rank 0] Process group watchdog thread terminated with "
            "exception: NCCL error: remote process exited or there was a network error (node %d, %s)" % (rank, peer),
            level="error")
        log_block("Scheduler hit an exception: " + _traceback(self.engine.cfg["site_root"], NCCL_REMOTE_ERROR % peer),
                  rank=0)
        self.engine.kill_children()
        os._exit(1)

    def _wait(self, what, deadline):
        with self.cond:
            while len(what) < self.nnodes - 1:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self.cond.wait(1.0 if left is None else min(left, 1.0))
        return True

    def run_rank0(self):
        self._listen()
        emu("node 0 of %d: waiting at %s:%d for the other nodes to join" % (self.nnodes, self.host, self.port))
        self._wait(self.joined, None)
        emu("node 0: every node joined")
        self.engine.start_children()
        self.engine.wait_schedulers()
        if not self._wait(self.loaded, time.monotonic() + self.args.emulator_barrier_seconds):
            missing = sorted(set(range(1, self.nnodes)) - self.loaded)
            emu("load barrier: nodes %s did not finish loading within %.1f s"
                % (", ".join(map(str, missing)), self.args.emulator_barrier_seconds))
            log_block("Scheduler hit an exception: " + _traceback(self.engine.cfg["site_root"], (
                "ValueError: TP rank 0 could finish the model loading, but there are other ranks that didn't finish "
                "loading. It is likely due to unexpected failures (e.g., OOM) or a slow node.")), rank=0)
            self.engine.kill_children()
            os._exit(1)
        self.engine.bind()
        self.engine.warmup()
        while True:
            time.sleep(3600)

    def on_shutdown(self):
        with self.cond:
            self.stopping = True

    # -- followers ----------------------------------------------------------------------------------------------
    def _connect(self):
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=5)
                sock.settimeout(None)
                return _Lines(sock)
            except OSError:
                time.sleep(0.2)

    def run_follower(self):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        emu("node %d of %d: joining %s:%d" % (self.rank, self.nnodes, self.host, self.port))
        if self.args.emulator_join_delay > 0:
            time.sleep(self.args.emulator_join_delay)
        lines = self._connect()
        lines.send("join %d" % self.rank)
        threading.Thread(target=self._watch_rank0, args=(lines,), daemon=True).start()
        self.engine.start_children()
        self.engine.wait_schedulers()
        lines.send("loaded %d" % self.rank)
        serve_dummy_health(self.args.host, self.args.port)
        while True:
            time.sleep(3600)

    def _watch_rank0(self, lines):
        while lines.read() is not None:
            pass
        log("[rank%d]:[E ProcessGroupNCCL.cpp:1595] Process group watchdog thread terminated with exception: "
            "NCCL error: remote process exited or there was a network error (node 0)" % self.rank, level="error")
        emu("node %d: rank 0 is gone; ending" % self.rank)
        self.engine.kill_children()
        os._exit(1)


class _DummyHealth(http.server.BaseHTTPRequestHandler):
    """SGLang's launch_dummy_health_check_server: 200 on /health, /health_generate and /ping, 404 else."""
    server_version = "uvicorn"
    sys_version = ""

    def _answer(self):
        code = 200 if self.path.split("?")[0] in ("/health", "/health_generate", "/ping") else 404
        body = b"" if code == 200 else b'{"detail":"Not Found"}'
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_HEAD = _answer

    def log_message(self, fmt, *args):  # pragma: no cover - uvicorn's access lines are not modelled here
        pass


def serve_dummy_health(host, port):
    log("INFO:     Started server process [%d]" % os.getpid())
    log("INFO:     Waiting for application startup.")
    log("INFO:     Application startup complete.")
    cls = type("DummyHealthServer", (http.server.ThreadingHTTPServer,),
               {"daemon_threads": True, "allow_reuse_address": True,
                "address_family": socket.AF_INET6 if ":" in host else socket.AF_INET})
    try:
        server = cls((host, port), _DummyHealth)
    except OSError as exc:
        log("ERROR:    [Errno %s] error while attempting to bind on address %r: %s"
            % (exc.errno, (host, port), (exc.strerror or str(exc)).lower()), level="error")
        os._exit(1)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    log("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (host, port))
