#!/usr/bin/env python3
"""A small torch "server" for GPU tests: holds GPU memory, optionally serves /health on 127.0.0.1.

    holder.py --gib 20 [--port 30123] [--children 1 --child-gib 2] [--ready-file F] [--device cuda|none]
              [--ignore-term]

The parent allocates --gib GiB with torch.empty(..., dtype=torch.uint8) on the device, starts --children child
processes of itself that each hold --child-gib GiB (like SGLang's scheduler processes), then writes --ready-file
(its PID) and serves GET /health (200 "ok") on 127.0.0.1:--port until it is signalled. Without --port it sleeps.
Prints one "[HOLDER] ..." line per step so a log follower can see it load.
"""
from __future__ import annotations

import argparse
import http.server
import os
import signal
import subprocess
import sys
import time


def log(msg):
    print("[HOLDER] pid=%d %s" % (os.getpid(), msg), flush=True)


def hold(gib, device):
    if gib <= 0 or device == "none":
        return None
    import torch  # noqa: PLC0415 - heavy import, only where the memory is taken

    buf = torch.empty(int(gib * 1024**3), dtype=torch.uint8, device=device)
    torch.cuda.synchronize()
    return buf


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server API
        code = 200 if self.path in ("/health", "/health_generate", "/v1/models") else 404
        body = b"ok\n" if code == 200 else b"not found\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=20)
    parser.add_argument("--port", type=int)
    parser.add_argument("--children", type=int, default=0)
    parser.add_argument("--child-gib", type=float, default=1)
    parser.add_argument("--ready-file")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--api-key", help="accepted and ignored (tests the secret masking)")
    parser.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM (only SIGKILL stops it)")
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, signal.SIG_IGN if args.ignore_term else (lambda *_: sys.exit(0)))
    kids = []
    for _ in range(args.children):
        kids.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--gib", str(args.child_gib),
                                      "--device", args.device] + (["--ignore-term"] if args.ignore_term else []),
                                     stdin=subprocess.DEVNULL))
        log("started child pid=%d" % kids[-1].pid)
    log("allocating %s GiB on %s" % (args.gib, args.device))
    buf = hold(args.gib, args.device)  # noqa: F841 - kept alive on purpose
    log("holding %s GiB" % args.gib)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as handle:
            handle.write("%d\n" % os.getpid())
        os.replace(tmp, args.ready_file)
    if args.port:
        server = http.server.HTTPServer(("127.0.0.1", args.port), Health)
        log("The server is fired up and ready to roll! serving /health on 127.0.0.1:%d" % args.port)
        server.serve_forever()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
