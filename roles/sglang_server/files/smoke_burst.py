"""Smoke burst: concurrent /generate requests, one thread each, with prompts and max_new_tokens of varied lengths, so
the server's batch grows and shrinks while they run.

Reads {"url", "api_key", "timeout", "max_new_tokens": [...]} as JSON on stdin (the key never appears on a command
line) and prints {"ok", "summary", "results"} as JSON. Python 3 standard library only: it runs with the server's
python on the host (roles/sglang_server/tasks/smoke.yml)."""
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
            tokens = (got.get("meta_info") or {}).get("completion_tokens")
            results[i] = {"max_new_tokens": n, "status": resp.status, "chars": len(text), "tokens": tokens,
                          "s": round(time.monotonic() - t0, 3)}
    except urllib.error.HTTPError as exc:
        results[i] = {"max_new_tokens": n, "status": exc.code, "chars": 0, "error": exc.reason}
    except Exception as exc:
        results[i] = {"max_new_tokens": n, "status": None, "chars": 0, "error": "%s: %s" % (type(exc).__name__, exc)}


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
    print(json.dumps({"ok": not bad, "summary": summary, "results": results}))


if __name__ == "__main__":
    main()
