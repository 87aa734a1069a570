# Copyright: (c) eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SGLang's HTTP endpoints, served with uvicorn's access lines and the fake model's answers."""

from __future__ import annotations

import http.server
import json
import queue
import time
import urllib.parse
import uuid

from sglang_emulator import HTTP_REASONS, REQUEST_TIMEOUT, VERSION, health_window
from sglang_emulator.drain import HEALTH_DURING_SHUTDOWN
from sglang_emulator.loads import LoadsError
from sglang_emulator.logs import log, log_block

def url_host(host):
    """A host as it appears in a URL (IPv6 literals in brackets)."""
    return "[%s]" % host if ":" in host else host


class EmulatorHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # uvicorn sets SO_REUSEADDR too; a LISTENING port still fails with EADDRINUSE

    def handle_error(self, request, client_address):  # pragma: no cover - quiet client disconnects
        pass


def log_request(kind, body, raw, out=None):
    """SGLang's request-log line (``Receive: obj=GenerateReqInput(rid=..., text=...)``, ``Finish: obj=..., out=...``).

    Current SGLang repr()s the text (one physical line); with ``raw`` the text goes in as is, as older releases
    wrote it, so a prompt's own newlines start new physical lines of the log.
    """
    text = body.get("text")
    shown = ("'%s'" % text if raw and isinstance(text, str) else repr(text))
    line = "%s: obj=GenerateReqInput(rid='%s', text=%s, input_ids=%r, sampling_params=%r, stream=%r)" % (
        kind, uuid.uuid4().hex, shown, body.get("input_ids"), body.get("sampling_params"), bool(body.get("stream")))
    if out is not None:
        line += ", out=%r" % (out,)
    log_block(line)  # Python's logging: the prefix on the first physical line only


# What /server_info reports of the server's arguments (SGLang returns every one of them).
SERVER_INFO_ARGS = ("model_path", "tokenizer_path", "served_model_name", "host", "port", "tp_size", "dp_size",
                    "mem_fraction_static", "context_length", "api_key", "speculative_algorithm",
                    "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
                    "speculative_num_draft_tokens", "log_level")


def meta_info(engine, rid, out, max_new, start, finished=True):
    """A generation's ``meta_info`` as SGLang 0.5.23's tokenizer manager builds it; the speculative figures
    (``spec_accept_length`` = completion tokens / verify steps, ...) once it has finished."""
    meta = {"id": rid, "finish_reason": {"type": "length", "length": max_new} if finished else None,
            "prompt_tokens": out["prompt_tokens"], "weight_version": "default", "num_retractions": 0,
            "reasoning_tokens": 0, "completion_tokens": out["completion_tokens"], "cached_tokens": 0}
    if not finished:
        return meta
    meta["e2e_latency"] = round(time.time() - start, 6)
    verify_ct = out.get("verify_ct") or 0
    draft_tokens = engine.args.speculative_num_draft_tokens or 4
    if engine.cfg["speculative"] and verify_ct > 0:
        proposed = verify_ct * (draft_tokens - 1)
        correct = max(0, out["completion_tokens"] - 1 - verify_ct)
        meta.update({"spec_accept_rate": correct / proposed if proposed else 0.0, "spec_accept_length": out["completion_tokens"] / verify_ct,
                     "spec_num_correct_drafts": correct, "spec_num_proposed_drafts": proposed,
                     "spec_verify_ct": verify_ct})
    return meta


def make_handler(engine):
    args = engine.args

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "uvicorn"
        sys_version = ""
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):  # replaced by uvicorn-style access lines
            pass

        def _access(self, code):
            # uvicorn's AccessFormatter with SGLang's format ("[%(asctime)s] %(levelprefix)s %(client_addr)s -
            # \"%(request_line)s\" %(status_code)s"): the path re-quoted, the query string as the client sent it.
            path, _, query = self.path.partition("?")
            shown = urllib.parse.quote(urllib.parse.unquote(path)) + ("?" + query if query else "")
            log('INFO:     %s:%d - "%s %s HTTP/1.1" %d %s' % (
                self.client_address[0], self.client_address[1], self.command, shown, code,
                HTTP_REASONS.get(code, "")))

        def _send(self, code, payload=None, ctype="application/json"):
            body = b""
            if payload is not None:
                body = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
            self.send_response_only(code, HTTP_REASONS.get(code))
            self.send_header("date", self.date_time_string())
            self.send_header("server", "uvicorn")
            self.send_header("content-length", str(len(body)))
            if body:
                self.send_header("content-type", ctype)
            self.end_headers()
            # uvicorn logs the access line when the response starts, before its body goes out: a client that
            # reads the answer and logs next (the warm-up, then the ready line) always logs after it.
            self._access(code)
            if body and self.command != "HEAD":
                self.wfile.write(body)

        def _authorized(self, path):
            if not args.api_key or path.startswith(("/health", "/ready", "/metrics")):
                return True
            header = self.headers.get("Authorization", "")
            parts = header.split(" ", 1)
            return len(parts) == 2 and parts[0].lower() == "bearer" and parts[1] == args.api_key

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not raw:
                return {}
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("request body must be a JSON object")
            return data

        def _is_warmup(self):
            return self.headers.get("X-Emulator-Warmup") == engine.warmup_token

        def do_GET(self):  # noqa: N802
            path, _, query = self.path.partition("?")
            if not self._authorized(path):
                return self._send(401, {"error": "Unauthorized"})
            if path in ("/health", "/health_generate") and engine.draining:
                log(HEALTH_DURING_SHUTDOWN)
                return self._send(503)
            if path == "/health":
                return self._send(200 if engine.serving() and engine.scenario != "health_503" else 503)
            if path == "/health_generate":
                return self._health_generate()
            if path == "/emulator/health_state":
                return self._send(200, engine.health_state())  # test control (the emulator only)
            if path == "/v1/loads":
                try:
                    return self._send(200, engine.loads(urllib.parse.parse_qs(query)))
                except LoadsError as exc:
                    return self._send(exc.status, {"detail": str(exc)})
            if path == "/get_model_info":
                return self._send(200, {
                    "model_path": args.model_path, "tokenizer_path": args.tokenizer_path, "is_generation": True,
                    "preferred_sampling_params": None, "weight_version": "default",
                    "has_image_understanding": False, "has_audio_understanding": False,
                    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "emulator": True,
                    "emulator_version": VERSION, "emulator_scenario": engine.scenario})
            if path in ("/server_info", "/get_server_info"):
                return self._server_info()
            if path == "/flush_cache":
                return self._flush_cache()
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{
                    "id": args.served_model_name, "object": "model", "created": int(time.time()),
                    "owned_by": "sglang", "root": args.model_path, "parent": None,
                    "max_model_len": engine.cfg["context_len"]}]})
            return self._send(404, {"detail": "Not Found"})

        def do_POST(self):  # noqa: N802
            path = self.path.split("?")[0]
            if not self._authorized(path):
                return self._send(401, {"error": "Unauthorized"})
            if path in ("/health", "/health_generate"):
                return self._send(405, {"detail": "Method Not Allowed"})
            if path == "/emulator/health_delay":
                # Test control (the emulator only): the next `count` health requests take `seconds` (a busy server).
                try:
                    body = self._body()
                    engine.health_delay = [float(body.get("seconds", 0)), int(body.get("count", 1))]
                except (ValueError, TypeError, UnicodeDecodeError) as exc:
                    return self._send(400, {"error": {"message": str(exc)}})
                return self._send(200, {"health_delay": engine.health_delay})
            if path == "/emulator/long_prefill":
                # Test control (the emulator only): a prefill of `seconds` s with `running` requests and no output at
                # all; health requests meanwhile stay resident in the scheduler (SGLang 0.5.23, #35884).
                try:
                    body = self._body()
                    engine.long_prefill(float(body.get("seconds", 60)), int(body.get("running", 1)),
                                        float(body.get("log_every", 0)))
                except (ValueError, TypeError, UnicodeDecodeError) as exc:
                    return self._send(400, {"error": {"message": str(exc)}})
                return self._send(200, {"long_prefill": body})
            if path == "/flush_cache":
                return self._flush_cache()
            if path not in ("/generate", "/v1/completions"):
                return self._send(404, {"detail": "Not Found"})
            try:
                body = self._body()
            except (ValueError, UnicodeDecodeError) as exc:
                return self._send(400, {"error": {"message": "invalid JSON body: %s" % exc}})
            if path == "/generate":
                return self._generate(body)
            return self._completions(body)

        def _other_method(self):
            """Any other method (HEAD, PUT, DELETE, ...): FastAPI's 405 after the API-key check, with its access line."""
            if not self._authorized(self.path.split("?")[0]):
                return self._send(401, {"error": "Unauthorized"})
            return self._send(405, {"detail": "Method Not Allowed"})

        do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _other_method  # noqa: N815 - http.server's names

        def _health_generate(self):
            delay = engine.take_health_delay()
            if delay:
                time.sleep(delay)
            if not engine.ready or engine.scenario == "health_503":
                return self._send(503)
            tic = time.time()
            window = health_window()
            if not engine.health_check(window):
                log("Health check failed. Server couldn't get a response from detokenizer for last %d seconds. "
                    "tic start time: %s. last_heartbeat time: %s"
                    % (window, time.strftime("%H:%M:%S", time.localtime(tic)),
                       time.strftime("%H:%M:%S", time.localtime(engine.last_receive))), level="error")
                return self._send(503)
            return self._send(200)

        def _generate(self, body):
            text = body.get("text")
            prompt = text if text is not None else body.get("input_ids")
            if prompt is None:
                return self._send(400, {"error": {"message": "Either text or input_ids should be provided."}})
            params = body.get("sampling_params") or {}
            try:
                max_new = int(params.get("max_new_tokens", 128))
            except (TypeError, ValueError):
                return self._send(400, {"error": {"message": "max_new_tokens must be an integer"}})
            if max_new < 0:
                return self._send(400, {"error": {"message": "max_new_tokens must be at least 0"}})
            batch = isinstance(text, list) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], list))
            if body.get("stream") and not batch and not self._is_warmup():
                return self._stream_generate(body, prompt, max_new)
            if engine.args.log_requests and not self._is_warmup():
                log_request("Receive", body, engine.args.emulator_raw_request_log)
            results = []
            for one in (prompt if batch else [prompt]):
                start = time.time()
                out = engine.submit(one, max_new, REQUEST_TIMEOUT, warmup=self._is_warmup())
                if out is None:
                    return self._send(500, {"error": {"message": "the scheduler did not answer"}})
                meta = meta_info(engine, uuid.uuid4().hex, out, max_new, start)
                results.append({"text": out["text"], "output_ids": out["output_ids"], "meta_info": meta})
            if engine.args.log_requests and not self._is_warmup():
                log_request("Finish", body, engine.args.emulator_raw_request_log,
                            out={"text": results[0]["text"], "meta_info": results[0]["meta_info"]})
            if body.get("stream"):
                return self._send_stream(results)
            return self._send(200, results if batch else results[0])

        def _stream_generate(self, body, prompt, max_new):
            """A streamed /generate as SGLang sends it: one ``data: {json}`` event per decode step with the text,
            output ids and completion tokens so far, ``finish_reason`` and the speculative figures in the last one,
            then ``data: [DONE]`` (chunked transfer encoding, as uvicorn's StreamingResponse)."""
            if engine.args.log_requests:
                log_request("Receive", body, engine.args.emulator_raw_request_log)
            start = time.time()
            sent = engine.submit_stream(prompt, max_new)
            if sent is None:
                return self._send(500, {"error": {"message": "the scheduler did not answer"}})
            rid, outputs = sent
            self.send_response_only(200, HTTP_REASONS[200])
            self.send_header("date", self.date_time_string())
            self.send_header("server", "uvicorn")
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            text, ids, out = "", [], {}
            try:
                while not out.get("finished"):
                    try:
                        out = outputs.get(timeout=REQUEST_TIMEOUT)
                    except queue.Empty:
                        engine.abort(rid)
                        self._chunk(b"data: " + json.dumps({"error": {
                            "message": "the scheduler did not answer", "type": "internal_error", "code": 500,
                            "retryable": False}}).encode("utf-8") + b"\n\n")
                        break
                    text += out["text"]
                    ids += out["output_ids"]
                    event = {"text": text, "output_ids": list(ids),
                             "meta_info": meta_info(engine, rid, dict(out, output_ids=ids), max_new, start,
                                                    finished=out["finished"])}
                    self._chunk(b"data: " + json.dumps(event).encode("utf-8") + b"\n\n")
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
            except OSError:  # the client went away: SGLang aborts the request
                engine.abort(rid)
                self.close_connection = True
            finally:
                engine.done(rid)
            self._access(200)
            if engine.args.log_requests:
                log_request("Finish", body, engine.args.emulator_raw_request_log, out={"text": text})

        def _chunk(self, data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        def _server_info(self):
            """SGLang's /server_info: the server's arguments (the API key too, as SGLang 0.5.23 returns it),
            ``internal_states`` per DP rank with ``avg_spec_accept_length`` under speculative decoding, the version."""
            state = engine.ask("get_internal_state", REQUEST_TIMEOUT)
            if state is None:
                return self._send(500, {"error": {"message": "the scheduler did not answer"}})
            info = {key: getattr(args, key) for key in SERVER_INFO_ARGS}
            info.update({"internal_states": [state["state"]], "version": engine.sglang_version,
                         "emulator": True, "emulator_version": VERSION})
            return self._send(200, info)

        def _flush_cache(self):
            """SGLang's /flush_cache: done once no request runs (the acceptance figures start again)."""
            if engine.ask("flush_cache", REQUEST_TIMEOUT) is None:
                return self._send(400, b"Flush cache failed.\n", ctype="text/plain; charset=utf-8")
            return self._send(200, b"Cache flushed.\nPlease check backend logs for more details. (When there are "
                                   b"running or waiting requests, the operation will not be performed.)\n",
                              ctype="text/plain; charset=utf-8")

        def _send_stream(self, chunks):
            """Server-sent events as SGLang streams them: ``data: {json}`` lines, then ``data: [DONE]``."""
            body = b"".join(b"data: " + json.dumps(chunk).encode("utf-8") + b"\n\n" for chunk in chunks)
            self._send(200, body + b"data: [DONE]\n\n", ctype="text/event-stream")

        def _completions(self, body):
            prompt = body.get("prompt")
            if prompt is None:
                return self._send(400, {"error": {"message": "prompt is required"}})
            try:
                max_new = int(body.get("max_tokens", 16))
            except (TypeError, ValueError):
                return self._send(400, {"error": {"message": "max_tokens must be an integer"}})
            out = engine.submit(prompt, max_new, REQUEST_TIMEOUT, warmup=self._is_warmup())
            if out is None:
                return self._send(500, {"error": {"message": "the scheduler did not answer"}})
            response = {
                "id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
                "model": body.get("model") or args.served_model_name,
                "choices": [{"index": 0, "text": out["text"], "logprobs": None, "finish_reason": "length",
                             "matched_stop": None}],
                "usage": {"prompt_tokens": out["prompt_tokens"], "completion_tokens": out["completion_tokens"],
                          "total_tokens": out["prompt_tokens"] + out["completion_tokens"]}}
            if body.get("stream"):
                return self._send_stream([response])
            return self._send(200, response)

    return Handler


