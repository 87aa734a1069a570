"""What the fleet modules' unit tests share (sglang_router_worker, wait_for_drain): a fake clock, a fake sglang-router
and a fake server's /v1/loads, both answering through open_url's signature in-process (no socket, no process,
no sleep), and main() driven with module args."""
from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import uuid
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urlsplit

import pytest

from ansible.module_utils.testing import patch_module_args
from module_harness import ExitJson, FailJson

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def load_module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "library", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class FakeClock:
    def __init__(self):
        self.now = 500.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


class Response:
    def __init__(self, status, body):
        self.status = status
        self.raw = json.dumps(body).encode() if body is not None else b""

    def getcode(self):
        return self.status

    def read(self):
        return self.raw

    def close(self):
        pass


def answer(url, status, body):
    """What open_url does: a 2xx comes back, anything else is raised as HTTPError with its body."""
    if 200 <= status < 300:
        return Response(status, body)
    raise HTTPError(url, status, "status %d" % status, {}, io.BytesIO(json.dumps(body).encode()))


class FakeRouter:
    """sglang-router 0.3.2's worker API as it answered on this machine: adds and removals are background jobs that end
    ``add_seconds`` / ``remove_seconds`` after they were asked for (on the fake clock)."""

    def __init__(self, clock, admin_key=None, add_seconds=1.5, remove_seconds=0.5, add_fails=None):
        self.clock = clock
        self.admin_key = admin_key
        self.add_seconds = add_seconds
        self.remove_seconds = remove_seconds
        self.add_fails = add_fails  # a message: the add job fails with it
        self.workers = {}  # id -> record
        self.jobs = {}  # id -> (kind, ends_at)
        self.calls = []  # (method, path, body, headers)
        self.down = False

    def listed(self, url, healthy=True):
        worker_id = str(uuid.uuid4())
        self.workers[worker_id] = {"id": worker_id, "url": url, "model_id": "unknown", "priority": 50, "cost": 1.0,
                                   "worker_type": "regular", "is_healthy": healthy, "load": 0,
                                   "connection_mode": "HTTP", "disable_health_check": False}
        return worker_id

    def _settle(self):
        for worker_id, (kind, ends_at) in list(self.jobs.items()):
            if self.clock.now < ends_at:
                continue
            if kind == "AddWorker" and self.add_fails:
                continue  # a failed job stays reported as failed
            del self.jobs[worker_id]
            if kind == "RemoveWorker":
                self.workers.pop(worker_id, None)
            else:
                self.workers[worker_id].update(is_healthy=True, worker_type="regular", connection_mode="HTTP")

    def __call__(self, url, data=None, headers=None, method="GET", **kwargs):
        if self.down:
            raise URLError(ConnectionRefusedError(111, "Connection refused"))
        path = urlsplit(url).path
        body = json.loads(data.decode()) if data else None
        self.calls.append((method, path, body, dict(headers or {})))
        if self.admin_key and (headers or {}).get("Authorization") != "Bearer " + self.admin_key:
            raise HTTPError(url, 401, "Unauthorized", {}, io.BytesIO(b"Missing or invalid Authorization header"))
        self._settle()
        if path == "/workers" and method == "GET":
            # a worker whose add job still runs is not listed yet (as 0.3.2 answered)
            records = [r for worker_id, r in self.workers.items() if self.jobs.get(worker_id, ("",))[0] != "AddWorker"]
            return answer(url, 200, {"workers": records, "total": len(records), "stats": {}})
        if path == "/get_loads" and method == "GET":  # 0.3.2's answer: no version, a load per worker
            return answer(url, 200, {"workers": [{"worker": r["url"], "load": -1} for r in self.workers.values()]})
        if path == "/workers" and method == "POST":
            for worker_id, record in self.workers.items():
                if record["url"] == body["url"]:
                    return answer(url, 202, {"status": "accepted", "worker_id": worker_id})
            worker_id = str(uuid.uuid4())
            self.workers[worker_id] = {"id": worker_id, "url": body["url"], "is_healthy": False,
                                       "worker_type": "unknown", "connection_mode": "unknown"}
            self.jobs[worker_id] = ("AddWorker", self.clock.now + self.add_seconds)
            return answer(url, 202, {"status": "accepted", "worker_id": worker_id, "url": body["url"],
                                     "location": "/workers/" + worker_id,
                                     "message": "Worker addition queued for background processing"})
        if path.startswith("/workers/"):
            worker_id = unquote(path[len("/workers/"):])
            try:
                uuid.UUID(worker_id)
            except ValueError:
                return answer(url, 400, {"error": "Invalid worker_id %r (expected UUID)" % worker_id,
                                         "code": "BAD_REQUEST"})
            record = self.workers.get(worker_id)
            if record is None:
                return answer(url, 404, {"error": "Worker %s not found" % worker_id, "code": "WORKER_NOT_FOUND"})
            if method == "DELETE":
                self.jobs[worker_id] = ("RemoveWorker", self.clock.now + self.remove_seconds)
                return answer(url, 202, {"status": "accepted", "worker_id": worker_id,
                                         "message": "Worker removal queued for background processing"})
            shown = dict(record)
            if worker_id in self.jobs:
                kind, _ = self.jobs[worker_id]
                failed = kind == "AddWorker" and self.add_fails and self.clock.now >= self.jobs[worker_id][1]
                shown["job_status"] = {"job_type": kind, "worker_url": record["url"],
                                       "status": "failed" if failed else "processing",
                                       "message": self.add_fails if failed else None, "timestamp": 1}
            return answer(url, 200, shown)
        return answer(url, 404, {"error": "not found"})


class FakeServer:
    """A server's GET /v1/loads: each look answers the next of ``figures`` ((running, waiting) per rank, a status,
    "down" (refused), "silent" (timed out), "empty" (no rank published yet) or "bad" (not a count)); the last one
    repeats."""

    def __init__(self, figures, api_key=None):
        self.figures = list(figures)
        self.api_key = api_key
        self.looks = 0
        self.headers = []

    def __call__(self, url, data=None, headers=None, method="GET", **kwargs):
        assert method == "GET" and urlsplit(url).path == "/v1/loads", (method, url)
        self.headers.append(dict(headers or {}))
        figure = self.figures[min(self.looks, len(self.figures) - 1)]
        self.looks += 1
        if figure == "down":
            raise URLError(ConnectionRefusedError(111, "Connection refused"))
        if figure == "silent":
            raise URLError(TimeoutError("timed out"))
        if self.api_key and (headers or {}).get("Authorization") != "Bearer " + self.api_key:
            return answer(url, 401, {"error": "Unauthorized"})
        if isinstance(figure, int):
            return answer(url, figure, {"detail": "Not Found"})
        ranks = {"empty": [], "bad": [("1e400", 0)]}.get(figure, figure) if isinstance(figure, str) else figure
        ranks = ranks if isinstance(ranks, list) else [ranks]
        return answer(url, 200, {"timestamp": "2026-12-05T00:00:00+00:00", "version": "0.5.23", "accelerator": None,
                                 "num_accelerators": 8,
                                 "loads": [{"dp_rank": i, "num_running_reqs": r, "num_waiting_reqs": w}
                                           for i, (r, w) in enumerate(ranks)]})


def run(module, args, fake, clock, check=False):
    """main() of a fleet module with these args: ('exit', result) or ('fail', result)."""
    if check:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        try:
            module.main(clock=clock.clock, sleep=clock.sleep, opener=fake)
        except ExitJson as done:
            return "exit", done.args[0]
        except FailJson as failed:
            return "fail", failed.args[0]
    pytest.fail("main() returned without exit_json or fail_json")


SMG_ANSWERS = os.path.join(REPO, "tests", "data", "smg-1.13.0", "answers.json")


def smg_answers():
    """smg 1.13.0's recorded answers (tests/data/smg-1.13.0/answers.json: name -> method, path, request, status,
    body)."""
    with open(SMG_ANSWERS) as handle:
        return json.load(handle)


def _swap(value, old_id, new_id, old_url, new_url):
    """A recorded answer with another worker's id and URL in it."""
    text = json.dumps(value).replace(old_id, new_id).replace(old_url, new_url)
    return json.loads(text)


class FakeSmg(FakeRouter):
    """smg 1.13.0's worker API, replaying its recorded answers (smg_answers()) with their ids and URLs swapped: an add
    runs ``add_seconds`` (status ``pending``, job AddWorker processing; not listed meanwhile), then the worker's health
    state goes through ``after_add`` ((status, seconds) pairs, the last one stays: ``ready`` by default); a DELETE
    marks it ``draining`` (job RemoveWorker) for ``settle_seconds``, then it is gone; a second DELETE meanwhile removes
    it at once; a POST of a listed URL, or of one whose add runs, answers the recorded 409."""

    def __init__(self, clock, admin_key=None, add_seconds=0.5, settle_seconds=5.0, after_add=(("ready", None),)):
        super().__init__(clock, admin_key=admin_key, add_seconds=add_seconds, remove_seconds=settle_seconds)
        self.recorded = smg_answers()
        self.after_add = list(after_add)
        self.added_at = {}  # id -> when its add job ended

    def _record(self, name, worker_id, url):
        recorded = self.recorded[name]["body"]
        return _swap(recorded, recorded["id"], worker_id, recorded["url"], url)

    def listed(self, url, healthy=True):
        worker_id = str(uuid.uuid4())
        name = "get_worker_ready" if healthy else "get_worker_not_ready"
        self.workers[worker_id] = self._record(name, worker_id, url)
        return worker_id

    def _health(self, worker_id):
        """The health state the worker has now, by ``after_add``."""
        since = self.clock.now - self.added_at[worker_id]
        for status, seconds in self.after_add:
            if seconds is None or since < seconds:
                return status
            since -= seconds
        return self.after_add[-1][0]

    def _settle(self):
        for worker_id, (kind, ends_at) in list(self.jobs.items()):
            if self.clock.now < ends_at:
                continue
            del self.jobs[worker_id]
            if kind == "RemoveWorker":
                self.workers.pop(worker_id, None)
            else:
                self.added_at[worker_id] = ends_at
        for worker_id in self.added_at:
            if worker_id in self.workers and worker_id not in self.jobs:
                name = {"ready": "get_worker_ready", "not_ready": "get_worker_not_ready",
                        "failed": "get_worker_failed"}[self._health(worker_id)]
                self.workers[worker_id] = self._record(name, worker_id, self.workers[worker_id]["url"])

    def __call__(self, url, data=None, headers=None, method="GET", **kwargs):
        if self.down or (self.admin_key and (headers or {}).get("Authorization") != "Bearer " + self.admin_key):
            return super().__call__(url, data=data, headers=headers, method=method, **kwargs)
        path = urlsplit(url).path
        body = json.loads(data.decode()) if data else None
        self._settle()
        if path == "/get_loads" and method == "GET":
            self.calls.append((method, path, body, dict(headers or {})))
            return answer(url, 200, self.recorded["get_loads"]["body"])
        if path == "/workers" and method == "POST":
            self.calls.append((method, path, body, dict(headers or {})))
            for worker_id, record in self.workers.items():
                if record["url"] == body["url"]:
                    adding = self.jobs.get(worker_id, ("",))[0] == "AddWorker"
                    recorded = self.recorded["post_workers_already_listed"]["body"]
                    text = recorded["error"].replace("already exists at", "creation already in progress for") \
                        if adding else recorded["error"]
                    old_id = UUID.search(text).group(0)
                    return answer(url, 409, _swap(dict(recorded, error=text, code="WORKER_CREATE_IN_PROGRESS" if adding
                                                       else recorded["code"]), old_id, worker_id,
                                                  "http://127.0.0.1:31101", body["url"]))
            worker_id = str(uuid.uuid4())
            self.workers[worker_id] = self._record("get_worker_adding", worker_id, body["url"])
            self.jobs[worker_id] = ("AddWorker", self.clock.now + self.add_seconds)
            recorded = self.recorded["post_workers_accepted"]["body"]
            return answer(url, 202, _swap(recorded, recorded["worker_id"], worker_id, recorded["url"], body["url"]))
        if path.startswith("/workers/") and method == "DELETE":
            worker_id = unquote(path[len("/workers/"):])
            record = self.workers.get(worker_id)
            if record is not None and self.jobs.get(worker_id, ("",))[0] == "RemoveWorker":
                self.calls.append((method, path, body, dict(headers or {})))
                self.workers.pop(worker_id)  # a second DELETE while it drains: removed at once
                del self.jobs[worker_id]
                return answer(url, 202, {"status": "accepted", "worker_id": worker_id,
                                         "message": "Worker removal queued for background processing"})
            if record is not None:
                self.calls.append((method, path, body, dict(headers or {})))
                self.workers[worker_id] = self._record("get_worker_draining", worker_id, record["url"])
                self.workers[worker_id].pop("job_status", None)
                self.jobs[worker_id] = ("RemoveWorker", self.clock.now + self.remove_seconds)
                recorded = self.recorded["delete_worker_accepted"]["body"]
                return answer(url, 202, _swap(recorded, recorded["worker_id"], worker_id, "", ""))
        if path.startswith("/workers/") and method == "GET":
            worker_id = unquote(path[len("/workers/"):])
            record = self.workers.get(worker_id)
            if record is not None and worker_id in self.jobs:
                self.calls.append((method, path, body, dict(headers or {})))
                kind = self.jobs[worker_id][0]
                name = "get_worker_adding" if kind == "AddWorker" else "get_worker_draining"
                return answer(url, 200, self._record(name, worker_id, record["url"]))
        return super().__call__(url, data=data, headers=headers, method=method, **kwargs)
