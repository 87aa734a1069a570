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

smg (the Shepherd Model Gateway, SGLang's gateway after sglang-router), as 1.13.0 answered on loopback
(tests/data/smg-1.13.0/answers.json), speaks the same worker API with these differences:

- ``GET /get_loads`` names it: ``{"version": "smg-1.13.0", "loads": [...], ...}`` (0.3.2: ``{"workers": [{"worker",
  "load"}]}``). That is how the gateway is told (``gateway_of``), with the admin key like every call here.
- A worker record has ``status``, the gateway's health state: ``pending`` (while its add job runs), ``ready``,
  ``not_ready`` (after --health-failure-threshold failed checks), ``failed`` (after more; it came back to ``ready``
  when its server answered again, without --remove-unhealthy-workers), ``draining`` (a removal settles). A worker is
  back only when the gateway says ``ready``.
- ``DELETE`` first marks the worker ``draining`` (is_healthy false, listed, routed no new request), waits the
  worker's ``health.drain_settle_secs`` (5 s by default; it does not wait for the requests it holds), then removes
  it. A second DELETE meanwhile removes it at once; a POST of the same URL meanwhile answers 409, and a re-add that
  slips in is removed by the pending removal. So a listed worker that is draining is waited on until it is gone,
  never deleted again nor posted.
- ``POST`` of a URL already listed answers 409 ``WORKER_ALREADY_EXISTS``, of one whose add still runs 409
  ``WORKER_CREATE_IN_PROGRESS``, both naming the id in their text: the module then waits on that id.
- ``PATCH /workers/{id}`` (202, a background job) changes priority, cost, labels, the key, health and resilience
  settings; it cannot take a worker out of routing (a ``status`` in its body is ignored), so it is not used.
"""

from __future__ import annotations

import re
import time
from urllib.parse import quote, urlsplit

from ansible.module_utils.sglang_json_http import without_userinfo

PENDING_JOB = ("pending", "processing", "queued", "running")
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
ALREADY_CODES = ("WORKER_ALREADY_EXISTS", "WORKER_CREATE_IN_PROGRESS")
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


def gateway_of(status, body):
    """Which gateway answered ``GET /get_loads``: ``{"name": "smg", "version": "1.13.0"}`` when the answer names smg's
    version, ``{"name": "sglang-router", "version": None}`` for sglang-router's ``{"workers": [{"worker", "load"}]}``,
    ``{"name": "unknown", ...}`` otherwise (the worker API is then read as sglang-router's, a ``status`` in the records
    as smg's)."""
    if status == 200 and isinstance(body, dict):
        version = body.get("version")
        if isinstance(version, str) and version.startswith("smg-"):
            return {"name": "smg", "version": version[len("smg-"):]}
        if isinstance(body.get("workers"), list) and "loads" not in body:
            return {"name": "sglang-router", "version": None}
    return {"name": "unknown", "version": None}


def going(record):
    """Whether the gateway is removing this listed worker (smg: ``draining``, or a removal job runs)."""
    job = record.get("job_status")
    removing = (isinstance(job, dict) and job.get("job_type") == "RemoveWorker"
                and str(job.get("status", "")).lower() in PENDING_JOB)
    return removing or record.get("status") == "draining"


def serving(record):
    """Whether the gateway routes to this listed worker: healthy, and (smg) ready."""
    return record.get("is_healthy") is True and record.get("status", "ready") == "ready" and not going(record)


def progress(status, body):
    """Where a worker stands, from ``GET /workers/{id}``: (state, words). States: ``ready`` (listed, healthy, no job
    running, and where the gateway says so, ``ready``), ``gone`` (404), ``failed`` (its job failed), ``pending`` (a job
    runs, or it is not healthy yet: smg's ``pending``, ``not_ready``, ``failed``, ``draining``)."""
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
    health = body.get("status")
    if isinstance(health, str):  # smg: the gateway's own health state
        if health == "ready" and body.get("is_healthy") is True:
            return "ready", "listed and ready"
        return "pending", "the gateway calls it %s" % health
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
        self.gateway = None  # {"name", "version"}, from GET /get_loads at the first listing

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
        workers = workers_of(self._call("GET", "/workers").body)
        if self.gateway is None:
            answer = self._call("GET", "/get_loads", ok=None)
            self.gateway = gateway_of(answer.status, answer.body)
        return workers

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
        fewer than ``min_healthy_others`` other healthy workers are listed. A worker the gateway is already removing
        (smg: ``draining``) is waited on, not deleted again (a second DELETE would cut its drain short)."""
        workers = self.listing()
        record = find(workers, url)
        if record is None:
            return dict(changed=False, worker_id=None, listed_urls=listed_urls(workers), gateway=self.gateway,
                        msg="worker %s is not in the router" % url)
        worker_id = record.get("id")
        if not worker_id:
            raise RouterError("the router lists %s without an id: %s" % (url, str(shown(record))[:300]))
        leaving = going(record)
        others = [w for w in workers if w is not record and serving(w)]
        if len(others) < min_healthy_others and not leaving:
            raise RouterError("worker %s stays in the router: it lists %d other healthy worker(s), fewer than the %d "
                              "that must keep serving (min_healthy_others; another rollout at the same time, or "
                              "replicas already down?)" % (url, len(others), min_healthy_others),
                              worker_id=worker_id, healthy_others=len(others))
        result = dict(changed=True, worker_id=worker_id, worker=shown(record), gateway=self.gateway)
        if check_mode:
            result["msg"] = "would remove worker %s (%s) from the router" % (url, worker_id)
            return result
        status = 404 if leaving else self._call("DELETE", "/workers/%s" % quote(worker_id, safe=""),
                                                ok=(200, 202, 204, 404)).status
        elapsed = self._wait(worker_id, "gone", timeout, poll_interval)[2]
        result.update(elapsed=round(elapsed, 3), polls=self.polls,
                      msg="removed worker %s (%s) from the router%s" % (
                          url, worker_id, " (it was already going)" if status == 404 else ""))
        return result

    def present(self, url, api_key=None, config=None, timeout=120, poll_interval=1.0, check_mode=False):
        """Put the worker at ``url`` into the registry (unless it is there) and wait until the router has added it
        and finds it healthy (smg: calls it ``ready``). A listed worker the gateway is removing is waited on until
        gone, then posted."""
        workers = self.listing()
        record = find(workers, url)
        start = self.clock()
        if record is not None and going(record) and not check_mode:
            self._wait(record.get("id"), "gone", timeout, poll_interval)
            record = None
        changed = record is None or going(record)
        if changed and check_mode:
            return dict(changed=True, worker_id=None if record is None else record.get("id"), gateway=self.gateway,
                        listed_urls=listed_urls(workers), msg="would add worker %s to the router" % url)
        if changed:
            body = dict(config or {}, url=url)
            if api_key:
                body["api_key"] = api_key
            answer = self._call("POST", "/workers", body, ok=(200, 201, 202, 409))
            worker_id = answer.body.get("worker_id") if isinstance(answer.body, dict) else None
            if answer.status == 409:
                worker_id = self._already(answer)
            if not worker_id:
                raise RouterError("POST /workers answered %d without a worker_id: %s"
                                  % (answer.status, str(answer.body)[:300]))
        else:
            worker_id = record.get("id")
            if check_mode:
                words = progress(200, record)[1]
                return dict(changed=False, worker_id=worker_id, worker=shown(record), gateway=self.gateway,
                            msg="worker %s is in the router (%s)" % (url, words))
        remaining = max(timeout - (self.clock() - start), poll_interval)
        words, body = self._wait(worker_id, "ready", remaining, poll_interval)[:2]
        msg = "%s worker %s (%s): %s" % ("added" if changed else "kept", url, worker_id, words)
        return dict(changed=changed, worker_id=worker_id, worker=shown(body), elapsed=round(self.clock() - start, 3),
                    polls=self.polls, gateway=self.gateway, msg=msg)

    @staticmethod
    def _already(answer):
        """The id named by smg's 409 to a POST (the URL is listed, or its add job runs): the one to wait on."""
        body = answer.body if isinstance(answer.body, dict) else {}
        found = UUID_RE.search(str(body.get("error", ""))) if body.get("code") in ALREADY_CODES else None
        if not found:
            raise RouterError("the router answered POST /workers with 409: %s" % (str(answer.body)[:300],),
                              http_status=409)
        return found.group(0)
