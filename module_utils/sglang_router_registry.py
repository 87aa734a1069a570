# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A worker in sglang-router's registry: taken out before its server stops, put back once it serves again
(module sglang_router_worker). Module side only; the HTTP client, the clock and sleep are the caller's (injectable).

The router's worker API, as sglang-router 0.3.2 answers it:

- ``GET /workers``: ``{"workers": [{"id": <UUID>, "url", "is_healthy", "worker_type", ...}], "total", "stats"}``.
- ``POST /workers`` with ``{"url", "api_key", ...}``: 202 ``{"status": "accepted", "worker_id": <UUID>, "location"}``;
  the worker is added in the background (the router asks its health and model info first). The same URL again
  answers 202 with the same id.
- ``GET /workers/{id}``: 200 with the worker, and ``job_status`` ``{"job_type", "status": "processing"|"failed",
  "message"}`` while a background job on it runs; 404 ``WORKER_NOT_FOUND`` once it is gone.
- ``DELETE /workers/{id}``: 202; the id must be the UUID (a URL is refused with 400); removal is also in the
  background.
- With ``--control-plane-api-keys`` these need ``Authorization: Bearer <admin key>`` (401 otherwise).

The router never drains a worker: once it is out of the registry no new request goes to it, and what it already
holds is the server's own business (wait_for_drain watches the server's ``/v1/loads``).
"""

from __future__ import annotations

import time
from urllib.parse import quote, urlsplit

from ansible.module_utils.sglang_json_http import without_userinfo

PENDING_JOB = ("pending", "processing", "queued", "running")
SECRET_KEYS = ("api_key", "apikey", "token", "authorization")


class RouterError(Exception):
    """What went wrong, in words, with the facts for the result (``fields``)."""

    def __init__(self, msg, **fields):
        super().__init__(msg)
        self.fields = fields


DEFAULT_PORTS = {"http": 80, "https": 443}


def normal_url(url):
    """A worker URL as compared here: scheme and host lowercased, the scheme's default port dropped, no trailing
    slash."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = parts.netloc.rsplit("@", 1)[-1].lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is not None and port == DEFAULT_PORTS.get(scheme):
        host = host.rsplit(":", 1)[0]
    return "%s://%s%s" % (scheme, host, parts.path.rstrip("/"))


def shown(record):
    """A worker record without anything secret in it, at any depth (the router returns none today; kept that way),
    its URL without a user:password@."""
    if isinstance(record, dict):
        return dict((key, "********" if str(key).lower() in SECRET_KEYS
                     else without_userinfo(value) if key == "url" and isinstance(value, str) else shown(value))
                    for key, value in record.items())
    if isinstance(record, list):
        return [shown(value) for value in record]
    return record


def workers_of(body):
    """The worker records of a ``GET /workers`` answer; RouterError when it is not the router's shape."""
    if not isinstance(body, dict) or not isinstance(body.get("workers"), list):
        raise RouterError("GET /workers did not answer with a worker list (is this an sglang-router?): %s"
                          % (str(body)[:300],))
    return [w for w in body["workers"] if isinstance(w, dict)]


def find(workers, url):
    """The record of the worker at ``url``, or None; RouterError when the router lists it more than once (which one
    to take out or keep cannot be told)."""
    want = normal_url(url)
    found = [r for r in workers if isinstance(r.get("url"), str) and normal_url(r["url"]) == want]
    if len(found) > 1:
        raise RouterError("the router lists %s %d times (ids %s): remove the extra records by hand"
                          % (url, len(found), ", ".join(str(r.get("id")) for r in found)))
    return found[0] if found else None


def listed_urls(workers):
    return sorted(without_userinfo(str(r.get("url"))) for r in workers)


def progress(status, body):
    """Where a worker stands, from ``GET /workers/{id}``: (state, words). States: ``ready`` (listed, healthy, no job
    running), ``gone`` (404), ``failed`` (its job failed), ``pending`` (a job runs, or it is not healthy yet)."""
    if status == 404:
        return "gone", "not listed"
    if status != 200 or not isinstance(body, dict):
        return "pending", "GET answered %s: %s" % (status, str(body)[:200])
    job = body.get("job_status")
    if isinstance(job, dict):
        state = str(job.get("status", "")).lower()
        words = "%s %s%s" % (job.get("job_type", "job"), state or "?",
                             (": %s" % job["message"]) if job.get("message") else "")
        if state == "failed":
            return "failed", words
        if state in PENDING_JOB or not state:
            return "pending", words
    if body.get("is_healthy") is True:
        return "ready", "listed and healthy"
    return "pending", "listed, not healthy yet"


class RouterWorkers(object):
    """Take a worker out of the router's registry (``absent``) or put it in (``present``), and wait until the
    router has done it. ``http`` is a JsonHttp to the router."""

    def __init__(self, http, clock=time.monotonic, sleep=time.sleep):
        self.http = http
        self.clock = clock
        self.sleep = sleep
        self.polls = 0

    def _call(self, method, path, body=None, ok=(200,)):
        answer = self.http.call(method, path, body)
        if answer.status in (401, 403):
            raise RouterError("the router refused %s %s with %d: give it an admin key of its --control-plane-api-keys "
                              "(router_api_key)" % (method, path, answer.status), http_status=answer.status)
        if ok and answer.status not in ok:
            body = str(answer.body)[:300]
            raise RouterError("the router answered %s %s with %d: %s" % (method, path, answer.status, body),
                              http_status=answer.status)
        return answer

    def listing(self):
        return workers_of(self._call("GET", "/workers").body)

    def _get(self, worker_id):
        self.polls += 1
        answer = self._call("GET", "/workers/%s" % quote(worker_id, safe=""), ok=None)
        return answer.status, answer.body

    def _wait(self, worker_id, want, timeout, poll_interval):
        """Poll GET /workers/{id} until its state is ``want``; (state, words, last body). A failed job raises."""
        start = self.clock()
        deadline = start + timeout
        while True:
            status, body = self._get(worker_id)
            state, words = progress(status, body)
            if state == want:
                return words, body, self.clock() - start
            if state == "failed":
                raise RouterError("the router's job on worker %s failed: %s" % (worker_id, words),
                                  worker_id=worker_id, job_status=body.get("job_status"), elapsed=self.clock() - start)
            now = self.clock()
            if now >= deadline:
                raise RouterError("worker %s not %s after %.0f s (%s)" % (
                    worker_id, "removed" if want == "gone" else "added and healthy", timeout, words),
                    worker_id=worker_id, worker=shown(body) if status == 200 else None, elapsed=now - start)
            self.sleep(min(poll_interval, deadline - now))

    def absent(self, url, timeout, poll_interval, check_mode=False, min_healthy_others=0):
        """Take the worker at ``url`` out of the registry and wait until the router no longer lists it; refused while
        fewer than ``min_healthy_others`` other healthy workers are listed."""
        workers = self.listing()
        record = find(workers, url)
        if record is None:
            return dict(changed=False, worker_id=None, listed_urls=listed_urls(workers),
                        msg="worker %s is not in the router" % url)
        worker_id = record.get("id")
        if not worker_id:
            raise RouterError("the router lists %s without an id: %s" % (url, str(shown(record))[:300]))
        others = [w for w in workers if w is not record and w.get("is_healthy") is True]
        if len(others) < min_healthy_others:
            raise RouterError("worker %s stays in the router: it lists %d other healthy worker(s), fewer than the %d "
                              "that must keep serving (min_healthy_others; another rollout at the same time, or "
                              "replicas already down?)" % (url, len(others), min_healthy_others),
                              worker_id=worker_id, healthy_others=len(others))
        result = dict(changed=True, worker_id=worker_id, worker=shown(record))
        if check_mode:
            result["msg"] = "would remove worker %s (%s) from the router" % (url, worker_id)
            return result
        answer = self._call("DELETE", "/workers/%s" % quote(worker_id, safe=""), ok=(200, 202, 204, 404))
        elapsed = self._wait(worker_id, "gone", timeout, poll_interval)[2]
        result.update(elapsed=round(elapsed, 3), polls=self.polls,
                      msg="removed worker %s (%s) from the router%s" % (
                          url, worker_id, " (it was already going)" if answer.status == 404 else ""))
        return result

    def present(self, url, api_key=None, config=None, timeout=120, poll_interval=1.0, check_mode=False):
        """Put the worker at ``url`` into the registry (unless it is there) and wait until the router has added it
        and finds it healthy."""
        workers = self.listing()
        record = find(workers, url)
        changed = record is None
        if changed and check_mode:
            return dict(changed=True, worker_id=None, listed_urls=listed_urls(workers),
                        msg="would add worker %s to the router" % url)
        if changed:
            body = dict(config or {}, url=url)
            if api_key:
                body["api_key"] = api_key
            answer = self._call("POST", "/workers", body, ok=(200, 201, 202))
            worker_id = answer.body.get("worker_id") if isinstance(answer.body, dict) else None
            if not worker_id:
                raise RouterError("POST /workers answered %d without a worker_id: %s"
                                  % (answer.status, str(answer.body)[:300]))
        else:
            worker_id = record.get("id")
            if check_mode:
                words = progress(200, record)[1]
                return dict(changed=False, worker_id=worker_id, worker=shown(record),
                            msg="worker %s is in the router (%s)" % (url, words))
        words, body, elapsed = self._wait(worker_id, "ready", timeout, poll_interval)
        msg = "%s worker %s (%s): %s" % ("added" if changed else "kept", url, worker_id, words)
        return dict(changed=changed, worker_id=worker_id, worker=shown(body), elapsed=round(elapsed, 3),
                    polls=self.polls, msg=msg)
