"""Smoke burst: concurrent /generate requests, one thread each, with prompts and max_new_tokens of varied lengths, so
the server's batch grows and shrinks while they run; then the accept length of speculative decoding over those same
requests.

Reads {"url", "api_key", "timeout", "max_new_tokens": [...], "server_info_url"} as JSON on stdin (the key never
appears on a command line) and prints {"ok", "summary", "results", "speculation"} as JSON. Python 3 standard library
only: it runs with the server's python on the host (roles/sglang_server/tasks/smoke.yml).

The accept length (tokens per verify step, the bonus token included: 1.0 is a draft that never hits) comes from the
burst's own requests: SGLang (0.5.9 to 0.5.23 at least) puts ``spec_verify_ct`` in each finished request's
``meta_info``, beside ``completion_tokens``; the figure is the sum of one over the sum of the other, over every request
that made a verify step, whichever data-parallel rank ran it. A server that gives no per-request figure is asked
``/server_info`` after the burst: ``dp_accept_length`` (files/dp_accept_length.py, run ahead of this file as one
program: tasks/smoke.yml), the mean of every DP rank's ``avg_spec_accept_length``. That counter is cumulative since
the server started (SGLang keeps no counts beside it, so it cannot be differenced): right after a start it covers the
warm-up request and the smoke's own, and the figure says so."""
import json
import sys
import threading
import time
import urllib.error
import urllib.request


def one(req, results, i, n):
    """Send request i (max_new_tokens n) and record its status, text length, completion tokens and duration."""
    body = {"text": ("Tell me about speculative decoding, part %d. " % i) * (i + 1),
            "sampling_params": {"max_new_tokens": int(n), "temperature": 0.7}}
    headers = {"Content-Type": "application/json"}
    if req["api_key"]:
        headers["Authorization"] = "Bearer " + req["api_key"]
    r = urllib.request.Request(req["url"], data=json.dumps(body).encode(), headers=headers, method="POST")
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(r, timeout=req["timeout"]) as resp:
            got = json.loads(resp.read().decode())
            text = got.get("text") or ""
            meta = got.get("meta_info") or {}
            results[i] = {"max_new_tokens": n, "status": resp.status, "chars": len(text),
                          "tokens": meta.get("completion_tokens"), "verify_ct": meta.get("spec_verify_ct"),
                          "s": round(time.monotonic() - t0, 3)}
    except urllib.error.HTTPError as exc:
        results[i] = {"max_new_tokens": n, "status": exc.code, "chars": 0, "error": exc.reason}
    except Exception as exc:
        results[i] = {"max_new_tokens": n, "status": None, "chars": 0, "error": "%s: %s" % (type(exc).__name__, exc)}


def _number(value):
    """A count or figure from a server's JSON (never a bool), else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def accept_from_requests(results):
    """The accept length over the requests that report their verify steps: {"accept_length", "source", "requests",
    "tokens", "verify_steps"}, or None when none does (a server without speculation, or one that does not say)."""
    counted = [r for r in results if r and r.get("status") == 200 and (_number(r.get("verify_ct")) or 0) > 0
               and _number(r.get("tokens")) is not None]
    if not counted:
        return None
    tokens = sum(r["tokens"] for r in counted)
    steps = sum(r["verify_ct"] for r in counted)
    return {"accept_length": round(tokens / steps, 3), "source": "requests", "requests": len(counted),
            "tokens": tokens, "verify_steps": steps}


def accept_from_server_info(info):
    """The accept length from /server_info (``dp_accept_length``: the mean of every DP rank's
    avg_spec_accept_length), None when no rank reports one."""
    states = info.get("internal_states") if isinstance(info, dict) else None
    figure = dp_accept_length(states)  # pylint: disable=undefined-variable  # defined ahead: dp_accept_length.py
    if figure is None:
        return None
    return {"accept_length": round(figure["accept_length"], 3), "source": "server_info",
            "ranks": len(figure["per_rank"]), "of_ranks": figure["of_ranks"]}


def describe(figure):
    """The figure in words, for the line beside the burst."""
    if figure is None:
        return "accept length: not reported by the server (no spec_verify_ct per request, none in /server_info)"
    if figure["source"] == "requests":
        return "accept length %.2f (%d requests: %d tokens in %d verify steps)" % (
            figure["accept_length"], figure["requests"], figure["tokens"], figure["verify_steps"])
    return "accept length %.2f (/server_info, cumulative since the start, %d of %d DP ranks averaged)" % (
        figure["accept_length"], figure["ranks"], figure["of_ranks"])


def server_info(req):
    """GET /server_info (its JSON), or None when it does not answer."""
    headers = {"Authorization": "Bearer " + req["api_key"]} if req["api_key"] else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(req["server_info_url"], headers=headers),
                                    timeout=min(30, req["timeout"])) as resp:
            return json.loads(resp.read().decode())
    except Exception:  # an older server without the endpoint: no figure, said as such
        return None


def speculation(req, results):
    """The accept length of the burst's requests, or /server_info's when they report none (see the module's doc)."""
    figure = accept_from_requests(results)
    if figure is None and req.get("server_info_url"):
        figure = accept_from_server_info(server_info(req))
    return {"figure": figure, "summary": describe(figure)}


def main():
    req = json.load(sys.stdin)
    results = [None] * len(req["max_new_tokens"])
    threads = [threading.Thread(target=one, args=(req, results, i, n)) for i, n in enumerate(req["max_new_tokens"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Answered 200 with text or, failing that, with completion tokens: one or two tokens can decode to no text yet
    # (SGLang holds back an incomplete UTF-8 sequence and skips special tokens).
    bad = [r for r in results if r["status"] != 200 or (r["chars"] == 0 and not r.get("tokens"))]
    summary = "%d/%d concurrent requests answered with generated tokens" % (len(results) - len(bad), len(results))
    if bad:
        summary += "; failed: " + "; ".join(
            "max_new_tokens %s: %s %s" % (r["max_new_tokens"], r["status"], r.get("error", "no text, no completion tokens")) for r in bad)
    spec = speculation(req, results) if req.get("speculative") and not bad else None
    print(json.dumps({"ok": not bad, "summary": summary, "results": results, "speculation": spec}))


if __name__ == "__main__":
    main()
