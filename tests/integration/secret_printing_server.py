"""TEST-ONLY server that prints its secrets the ways real servers do, then serves /health on loopback.

    python3 secret_printing_server.py --config FILE --port N

FILE holds ``api-key: "<key>"`` (the role's ``key: <JSON value>`` lines, as SGLang's --config reads them); the
secret environment value is HF_TOKEN. It prints the key as SGLang 0.5.23 logs ``server_args`` (a dict repr),
as a dataclass repr, in a JSON record, percent-encoded in an access line, split across two writes with a pause,
from a child process on stderr, then a progress line ending in ``\\r``; on SIGTERM it prints the key once more
and ``LAST LINE``, the way a server logs its shutdown. Without a key it prints the same lines with ``-``.
"""
from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import time
from urllib.parse import quote


def out(text, stream=sys.stdout):
    stream.write(text)
    stream.flush()


def main():
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    config = {}
    if "--config" in args:
        with open(args["--config"]) as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if value.strip():
                    config[name.strip()] = json.loads(value)
    key = config.get("api-key") or "-"
    port = int(args["--port"])
    out("[2026-12-03 10:00:00] server_args=%r\n" % {"model_path": "/models/tiny", "api_key": key, "port": port})
    out("[2026-12-03 10:00:00] server_args=ServerArgs(model_path='/models/tiny', api_key=%r, port=%d)\n" % (key, port))
    out(json.dumps({"level": "INFO", "msg": "args", "api_key": key}) + "\n")
    out('[2026-12-03 10:00:00] INFO:     127.0.0.1:5555 - "GET /v1/models?api_key=%s HTTP/1.1" 401 Unauthorized\n'
        % quote(key, safe=""), sys.stderr)
    out("[2026-12-03 10:00:00] HF token: %s\n" % os.environ.get("HF_TOKEN", "-"))
    half = len(key) // 2
    out("[2026-12-03 10:00:00] split key: " + key[:half])
    time.sleep(0.4)  # longer than any quiet-time flush would wait
    out(key[half:] + " end\n")
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('[child] api_key=' + sys.stdin.read() + '\\n')"],
                   input=key, text=True, check=True)
    out("\rLoading safetensors checkpoint shards: 1/2 [progress]")

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path.startswith("/health") else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Health)

    def on_term(signum, frame):
        out("\n[2026-12-03 10:00:09] SIGTERM received, shutting down (api_key=%s)\n" % key)
        out("LAST LINE\n")
        os._exit(0)
    signal.signal(signal.SIGTERM, on_term)
    out("\n[2026-12-03 10:00:01] The server is fired up and ready to roll!\n")
    server.serve_forever()


if __name__ == "__main__":
    main()
