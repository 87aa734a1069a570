# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fetch program of ``sglang_model``: lists a Hugging Face repo, and fetches, verifies and puts a model's files in
place, resumably. Installed by the role sglang_model (``tasks/program.yml``) with :mod:`sglang_weights` and
:mod:`sglang_proc` as the package ``eagle_deploy`` in ``<program_dir>`` (root's; sglang_program), and run as a program
by ``sglang_model`` (a module imports it only for its helpers, ``hub_env``):

``python -I -B <program_dir> list``
    The repo's file list at a revision, through ``huggingface_hub`` (``HfApi.model_info`` resolves the revision to its
    commit, ``HfApi.list_repo_tree(recursive=True)`` gives each file's size, LFS SHA-256 and git blob SHA-1). Reads
    ``{endpoint, repo, revision, token, allow_patterns, ignore_patterns}`` as JSON on stdin, prints the answer as JSON.
    Writes nothing.

``python -I -B <program_dir> run STATE_DIR NAME``
    The fetch of model NAME as its job file ``<NAME>.job.json`` (written by the module) says, started detached by the
    module; the token, if any, arrives on stdin (never in argv, the environment or a file). It holds ``<NAME>.lock``
    (flock) while it runs, writes ``<NAME>.status.json`` every second (bytes, files, rate, ETA, phase, verdict), and at
    the end the manifest ``<NAME>.manifest.json``. Per file, by its source:

    * **hub**: ``huggingface_hub``'s own ``get_hf_file_metadata`` (the size, ETag and commit checked against the list)
      and ``http_get`` into the file's part file ``<path>/.eagle-fetch/files/<file>``, opened for appending with
      ``resume_size`` = its length: a fetch killed halfway resumes at its last byte on the next run (``http_get`` asks
      ``Range: bytes=N-``; a server that ignores it sends the whole file, and ``http_get`` starts the part again).
    * **seed**: copied from the seed directory, resuming the part file likewise.
    * **peer**: ``rsync`` over SSH from the host that has it (``--append-verify``: a part resumes at its last byte),
      with the key and known host keys the role set up for this copy.

    Every file fetched or found is then hashed (SHA-256 and git blob SHA-1 in one read) and compared with the list;
    a wrong one is fetched again from zero once, and only that file; a right one gets its owner, group and mode and is
    renamed into place. Parts of files not yet complete stay for the next run.

Exit statuses: 0 done, 1 failed (the status file says why), 3 another fetch of NAME holds the lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from urllib.parse import urlsplit

# Relative imports only: the modules import this file as ansible.module_utils.sglang_hub_fetch, the installed
# program as eagle_deploy.sglang_hub_fetch (sglang_program), the same files either way.
from . import sglang_weights, sglang_proc

EXIT_DONE, EXIT_FAILED, EXIT_LOCKED = 0, 1, 3
ATTEMPTS = 2  # a file whose bytes are wrong is fetched once more from zero
RSYNC_ROUNDS = 3
STATUS_EVERY = 1.0
RATE_WINDOW = 10.0


# ------------------------------------------------------------------ list
def hub_env(endpoint, home):
    """The environment the program runs huggingface_hub in: the endpoint, no implicit token (only the one given), no
    telemetry, no progress bars, no Xet (the bytes come over HTTP, resumable), its caches under ``home``."""
    env = {
        "HF_ENDPOINT": endpoint,
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_OFFLINE": "0",
        "HF_HOME": home,
        "HF_HUB_DOWNLOAD_TIMEOUT": "60",
        "HF_HUB_ETAG_TIMEOUT": "30",
    }
    return env


def error_kind(exc):
    """What went wrong with the Hub, in the words an operator acts on: (kind, message)."""
    name = type(exc).__name__
    text = str(exc).strip().splitlines()
    first = " ".join(line.strip() for line in text[:3] if line.strip())[:400]
    if name == "GatedRepoError":
        return "gated", first
    if name == "RevisionNotFoundError":
        return "revision_not_found", first
    if name == "RepositoryNotFoundError":
        return "repo_not_found", first
    if name in ("RemoteEntryNotFoundError", "EntryNotFoundError"):
        return "entry_not_found", first
    if "401" in first or "403" in first:
        return "unauthorized", first
    return "error", "%s: %s" % (name, first)


def list_repo(req):
    """{commit, files: [{path, size, sha256, git_sha1, lfs}], hub_version} of the repo at the revision, or
    {error, msg}."""
    try:
        import huggingface_hub
        from huggingface_hub import HfApi
    except ImportError as e:
        return {"error": "no_huggingface_hub", "msg": "huggingface_hub is not importable by %s (%s)" % (
            sys.executable, e)}
    api = HfApi(endpoint=req["endpoint"], token=req.get("token") or False)
    try:
        info = api.model_info(req["repo"], revision=req["revision"])
        commit = info.sha
        files = []
        for entry in api.list_repo_tree(req["repo"], recursive=True, revision=commit):
            if not hasattr(entry, "blob_id") or not hasattr(entry, "size"):
                continue  # a folder
            lfs = getattr(entry, "lfs", None)
            files.append({"path": entry.path, "size": int(entry.size),
                          "sha256": getattr(lfs, "sha256", None) if lfs else None,
                          "git_sha1": None if lfs else entry.blob_id, "lfs": bool(lfs)})
    except Exception as e:  # every Hub error is answered in words
        kind, msg = error_kind(e)
        return {"error": kind, "msg": msg}
    keep = set(sglang_weights.selected([f["path"] for f in files], req.get("allow_patterns"),
                                       req.get("ignore_patterns")))
    return {"commit": commit, "files": [f for f in files if f["path"] in keep],
            "hub_version": getattr(huggingface_hub, "__version__", None)}


# ------------------------------------------------------------------ the fetch
class Status(object):
    """The job's counters, written to ``<name>.status.json`` by a thread every second and at every file's end."""

    def __init__(self, state_dir, name, job, clock=time.time):
        self.state_dir = state_dir
        self.name = name
        self.job = job
        self.clock = clock
        self.lock = threading.Lock()
        self.started = clock()
        tasks = job["tasks"]
        self.data = {
            "version": 1, "job_id": job["job_id"], "name": name, "pid": os.getpid(), "started_at": self.started,
            "phase": "starting", "verdict": None, "errors": [],
            "total": sum(t["size"] for t in tasks), "files_total": len(tasks), "files_done": 0,
            "fetch_total": sum(t["size"] - t.get("resume_from", 0) for t in tasks if t["action"] == "fetch"),
            "fetch_done": 0, "resumed_bytes": sum(t.get("resume_from", 0) for t in tasks if t["action"] == "fetch"),
            "hash_total": sum(t["size"] for t in tasks if t["action"] in ("fetch", "verify")), "hash_done": 0,
            "rate": None, "hash_rate": None, "eta": None, "summary": {},
        }
        self.samples = []  # (time, fetch_done, hash_done)
        self.part_bytes = {}  # rel -> bytes this job wrote to its part so far (from the part's size)
        self.base = dict((t["path"], t.get("resume_from", 0)) for t in tasks if t["action"] == "fetch")
        self.done_bytes = 0

    def set(self, **kw):
        with self.lock:
            self.data.update(kw)

    def add(self, key, n):
        with self.lock:
            self.data[key] += n

    def error(self, rel, why):
        with self.lock:
            self.data["errors"].append({"path": rel, "why": why})

    def sample_parts(self, path):
        """The bytes this job fetched: from each part file's size now (whatever writes it: http_get, a copy,
        rsync), plus the files already renamed into place."""
        fetched = self.done_bytes
        for rel, base in list(self.base.items()):
            try:
                fetched += max(0, os.lstat(sglang_weights.part_path(path, rel)).st_size - base)
            except OSError:
                pass
        with self.lock:
            self.data["fetch_done"] = min(fetched, self.data["fetch_total"])

    def part_done(self, rel, size):
        """A fetched file was renamed into place: its bytes count as fetched from now on."""
        with self.lock:
            base = self.base.pop(rel, None)
            if base is not None:
                self.done_bytes += max(0, size - base)

    def write(self):
        now = self.clock()
        with self.lock:
            d = self.data
            self.samples.append((now, d["fetch_done"], d["hash_done"]))
            self.samples = [s for s in self.samples if now - s[0] <= RATE_WINDOW] or self.samples[-1:]
            first = self.samples[0]
            span = now - first[0]
            if span >= 0.5:
                d["rate"] = max(0.0, (d["fetch_done"] - first[1]) / span)
                d["hash_rate"] = max(0.0, (d["hash_done"] - first[2]) / span)
            left_fetch = d["fetch_total"] - d["fetch_done"]
            left_hash = d["hash_total"] - d["hash_done"]
            eta = None
            if left_fetch <= 0 or d["rate"]:
                eta = (left_fetch / d["rate"]) if left_fetch > 0 else 0.0
                if left_hash > 0 and left_fetch <= 0:
                    eta = (left_hash / d["hash_rate"]) if d["hash_rate"] else None
            d["eta"] = eta
            d["elapsed"] = now - self.started
            d["updated_at"] = now
            text = json.dumps(d, sort_keys=True)
        sglang_proc.write_files(self.state_dir, [(sglang_weights.state_files(self.name)["status"], text)], mode=0o644)


class ModelDir(object):
    """The model's directory as a job leaves it: its places, the owner, group and mode of each file and directory,
    the record of each file in place, and at the end the manifest."""

    def staging(self):
        return os.path.join(self.path, sglang_weights.STAGING)

    def make_dir(self, path):
        """A directory of the model, made as the role wants it (managed) or as the umask makes it."""
        if os.path.isdir(path):
            return
        self.make_dir(os.path.dirname(path))
        try:
            os.mkdir(path, self.dmode if self.managed else 0o755)
        except FileExistsError:
            return
        if self.managed:
            os.chown(path, self.uid, self.gid)
            os.chmod(path, self.dmode)

    def settle(self, path):
        """Owner, group and mode of a file as the role wants them (a seed read in place keeps its own)."""
        if not self.managed:
            return
        st = os.lstat(path)
        if (st.st_uid, st.st_gid) != (self.uid, self.gid) or (st.st_mode & 0o7777) != self.fmode:
            os.chown(path, self.uid, self.gid)
            os.chmod(path, self.fmode)
            if "/%s/" % sglang_weights.STAGING not in path:  # a file in place, not a part about to be renamed
                with self.lock:
                    self.settled += 1

    def record(self, rel, digests):
        st = os.lstat(os.path.join(self.path, rel))
        with self.lock:
            self.entries[rel] = sglang_weights.entry_of(st, digests)
        self.status.add("files_done", 1)

    def put_in_place(self, rel, part):
        final = os.path.join(self.path, rel)
        self.make_dir(os.path.dirname(final))
        self.settle(part)
        os.rename(part, final)

    def finish(self):
        """Every file is in place: directories as wanted, the staging dir gone, the manifest written."""
        if self.managed:
            for rel in sglang_weights.model_dirs(self.entries):
                d = os.path.join(self.path, rel) if rel else self.path
                st = os.lstat(d)
                if (st.st_uid, st.st_gid) != (self.uid, self.gid) or (st.st_mode & 0o7777) != self.dmode:
                    os.chown(d, self.uid, self.gid)
                    os.chmod(d, self.dmode)
                    self.settled += 1
        staging = self.staging()
        if os.path.isdir(staging) and not os.path.islink(staging):
            shutil.rmtree(staging)
        manifest = {
            "version": sglang_weights.MANIFEST_VERSION, "name": self.name, "path": self.path,
            "source": self.job["record_source"], "files": dict(sorted(self.entries.items())),
            "verified_at": time.time(), "owner": self.job.get("owner"), "group": self.job.get("group"),
        }
        old = self.old_manifest or {}
        self.manifest_changed = any(old.get(k) != manifest[k] for k in ("path", "source", "files", "owner", "group"))
        sglang_proc.write_files(self.state_dir, [(sglang_weights.state_files(self.name)["manifest"],
                                                  json.dumps(manifest, indent=0, sort_keys=True))], mode=0o644)


class SourceTransfer(object):
    """One file's bytes from the Hub or the seed into its part file, from where the part ends."""

    def transfer(self, task, part, have):
        source = self.job["source"]["kind"]
        if source == "hub":
            self.hub_transfer(task, part, have)
        elif source == "seed":
            self.seed_transfer(task, part, have)
        else:
            raise RuntimeError("source %s is fetched by rsync, not per file" % source)

    def hub_transfer(self, task, part, have):
        hub = self.hub
        url = hub["hf_hub_url"](self.job["repo"], task["path"], revision=self.job["commit"],
                                endpoint=self.job["endpoint"])
        meta = hub["get_hf_file_metadata"](url, token=self.token or False)
        if meta.size is not None and meta.size != task["size"]:
            raise RuntimeError("the Hub says %s has %s bytes, its file list %d" % (task["path"], meta.size,
                                                                                   task["size"]))
        want_etag = task.get("sha256") or task.get("git_sha1")
        if meta.etag and want_etag and meta.etag != want_etag:
            raise RuntimeError("the Hub's ETag of %s is %s, its file list says %s" % (
                task["path"], meta.etag, want_etag))
        if meta.commit_hash and meta.commit_hash != self.job["commit"]:
            raise RuntimeError("the Hub answered for commit %s, not %s" % (meta.commit_hash, self.job["commit"]))
        headers = hub["build_hf_headers"](token=self.token or False)
        location = meta.location or url
        if urlsplit(location).netloc != urlsplit(url).netloc:
            # a signed CDN URL (an LFS file's redirect): the token stays with the Hub, as huggingface_hub does
            headers = dict((k, v) for k, v in headers.items() if k.lower() != "authorization")
        with open(part, "ab") as fh:
            hub["http_get"](location, fh, resume_size=have, headers=headers, expected_size=task["size"],
                            displayed_filename=task["path"])

    def seed_transfer(self, task, part, have):
        src = os.path.join(self.job["seed"], task["path"])
        with open(src, "rb") as fin, open(part, "ab") as fout:
            fin.seek(have)
            shutil.copyfileobj(fin, fout, 8 << 20)


class PeerCopy(object):
    """A peer copy: rsync of the files from the peer, each checked against the peer's manifest, and the files
    already here that are wrong copied again with the others."""

    def rsync_round(self, rels):
        """rsync the files ``rels`` from the peer into the staging dir (each resuming its part)."""
        peer = self.job["peer"]
        base = os.path.join(self.staging(), "files")
        os.makedirs(base, 0o700, exist_ok=True)
        listing = os.path.join(self.staging(), "rsync-files")
        with open(listing, "w") as fh:
            fh.write("".join(rel + "\n" for rel in rels))
        ssh = " ".join([
            "ssh", "-i", peer["key"], "-p", str(peer["port"]), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=%s" % peer["known_hosts"],
            "-o", "ConnectTimeout=30", "-o", "ServerAliveInterval=15"])
        argv = [peer.get("rsync") or "rsync", "--files-from=%s" % listing, "--append-verify", "--no-perms",
                "--no-owner", "--no-group", "--times", "--timeout=300", "-e", ssh,
                "%s@%s:" % (peer["user"], peer["address"]), base + "/"]
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              check=False)
        err = (proc.stderr or b"").decode("utf-8", "replace").strip()
        return proc.returncode, "; ".join(line.strip() for line in err.splitlines() if line.strip())[-800:]

    def peer_fetch(self, tasks):
        todo = dict((t["path"], t) for t in tasks)
        for dummy in range(RSYNC_ROUNDS):
            if not todo:
                return True
            rc, err = self.rsync_round(sorted(todo))
            if rc != 0:
                last = "rsync from %s:%s ended with %d: %s" % (self.job["peer"]["address"], self.job["peer"]["path"],
                                                               rc, err)
                time.sleep(2)
                continue
            last = None
            for rel, task in list(todo.items()):
                problem = self.accept_part(rel, task, sglang_weights.part_path(self.path, rel))
                if problem is None:
                    del todo[rel]
                else:
                    with self.status.lock:
                        self.status.base[rel] = 0
                    with self.lock:
                        self.refetched.append(rel)
                    self.status.add("fetch_total", task["size"])
                    self.status.add("hash_total", task["size"])
                    last = "%s: %s" % (rel, problem)
        if todo:
            self.status.error(None, "%d file(s) not copied (%s): %s" % (
                len(todo), ", ".join(sorted(todo)[:3]) + (", ..." if len(todo) > 3 else ""), last or "not copied"))
        return not todo

    def verify_local(self, task):
        """A peer copy's file already here: hash it; a wrong one is copied again with the others."""
        rel = task["path"]
        final = os.path.join(self.path, rel)
        digests = self.hash_counted(final)
        if sglang_weights.digest_problem(task, digests) is None:
            self.settle(final)
            self.record(rel, digests)
            return True
        os.unlink(final)
        with self.lock:
            self.refetched.append(rel)
        self.status.add("fetch_total", task["size"])
        self.status.add("hash_total", task["size"])
        with self.status.lock:
            self.status.base[rel] = 0
        self.peer_again.append(dict(task, action="fetch", resume_from=0))
        return True


class Fetch(ModelDir, SourceTransfer, PeerCopy):
    """One job: every task to its end, the manifest, the verdict."""

    def __init__(self, state_dir, name, job, token, status):
        self.state_dir = state_dir
        self.name = name
        self.job = job
        self.token = token
        self.status = status
        self.path = job["path"]
        self.managed = job["managed"]
        self.uid, self.gid = job["uid"], job["gid"]
        self.fmode, self.dmode = job["file_mode"], job["dir_mode"]
        self.entries = {}
        self.refetched = []
        self.settled = 0  # files and directories whose owner, group or mode was set
        self.old_manifest = sglang_weights.read_manifest(state_dir, name)[0]
        self.manifest_changed = True
        self.peer_again = []  # a peer copy's file found here with wrong bytes: copied again with the others
        self.lock = threading.Lock()
        self.hub = None

    # ---------------------------------------------------------------- one file
    def accept_part(self, rel, task, part):
        """A part fetched or copied: hashed, and put in place and recorded when its digests are the listed ones, else
        removed. The problem with it, or None."""
        digests = self.hash_counted(part)
        problem = sglang_weights.digest_problem(task, digests)
        if problem is None:
            self.put_in_place(rel, part)
            self.status.part_done(rel, task["size"])
            self.record(rel, digests)
        else:
            os.unlink(part)
        return problem

    def hash_counted(self, path):
        return sglang_weights.hash_file(path, on_bytes=lambda n: self.status.add("hash_done", n))

    def verify(self, task):
        rel = task["path"]
        final = os.path.join(self.path, rel)
        digests = self.hash_counted(final)
        problem = sglang_weights.digest_problem(task, digests)
        if problem is None:
            self.settle(final)
            self.record(rel, digests)
            return True
        if not self.managed:
            self.status.error(rel, "%s in the seed read in place (%s): it is never written here; put the right "
                                   "file into the seed" % (problem, final))
            return False
        os.unlink(final)  # wrong bytes from the source the manifest names: they are fetched again
        with self.lock:
            self.refetched.append(rel)
        fetch = dict(task, action="fetch", resume_from=0)
        self.status.add("fetch_total", task["size"])
        self.status.add("hash_total", task["size"])
        with self.status.lock:
            self.status.base[rel] = 0
        return self.fetch(fetch)

    def fetch(self, task):
        """Fetch one file into its part file (resuming it), hash it, put it in place. True when it is."""
        rel = task["path"]
        part = sglang_weights.part_path(self.path, rel)
        os.makedirs(os.path.dirname(part), 0o700, exist_ok=True)
        for attempt in range(ATTEMPTS):
            try:
                have = os.lstat(part).st_size
            except OSError:
                have = 0
            if have > task["size"]:
                os.truncate(part, 0)
                have = 0
            if have < task["size"] or task["size"] == 0:
                try:
                    self.transfer(task, part, have)
                except Exception as e:  # the file fails, the others go on
                    self.status.error(rel, "fetch failed: %s" % (error_kind(e)[1] if self.hub else e))
                    return False
            problem = self.accept_part(rel, task, part)
            if problem is None:
                return True
            with self.status.lock:
                self.status.base[rel] = 0
            if attempt + 1 < ATTEMPTS:
                with self.lock:
                    self.refetched.append(rel)
                self.status.add("fetch_total", task["size"])
                self.status.add("hash_total", task["size"])
                continue
            self.status.error(rel, "%s after %d fetches: the source serves other bytes than it lists" % (
                problem, ATTEMPTS))
        return False

    # ---------------------------------------------------------------- the job
    def run(self):
        tasks = self.job["tasks"]
        if self.managed:
            self.make_dir(self.path)
        if any(t["action"] == "fetch" for t in tasks):
            os.makedirs(os.path.join(self.staging(), "files"), 0o700, exist_ok=True)
            os.chmod(self.staging(), 0o700)
        if self.job["source"]["kind"] == "hub" and any(t["action"] in ("fetch", "verify") for t in tasks):
            from huggingface_hub import get_hf_file_metadata, hf_hub_url
            from huggingface_hub.file_download import http_get
            from huggingface_hub.utils import build_hf_headers
            self.hub = {"hf_hub_url": hf_hub_url, "get_hf_file_metadata": get_hf_file_metadata,
                        "http_get": http_get, "build_hf_headers": build_hf_headers}
        for t in tasks:
            if t["action"] == "keep":
                final = os.path.join(self.path, t["path"])
                self.settle(final)
                rec = t["recorded"]
                self.record(t["path"], (rec["size"], rec.get("sha256"), rec.get("git_sha1")))
        fetching = "copying" if self.job["source"]["kind"] == "peer" else "fetching"
        self.status.set(phase=fetching if any(t["action"] == "fetch" for t in tasks) else "verifying",
                        source=self.job["source"]["kind"])
        ok = True
        work = [t for t in tasks if t["action"] in ("fetch", "verify")]
        peer = self.job["source"]["kind"] == "peer"
        if peer:
            for t in [t for t in work if t["action"] == "verify"]:
                ok = self.verify_local(t) and ok
            ok = self.peer_fetch([t for t in work if t["action"] == "fetch"] + self.peer_again) and ok
        else:
            ok = self.parallel(work) and ok
        if not ok:
            return False
        self.status.set(phase="finishing")
        self.finish()
        return True

    def parallel(self, work):
        results = []
        queue = list(work)
        qlock = threading.Lock()

        def worker():
            while True:
                with qlock:
                    if not queue:
                        return
                    task = queue.pop(0)
                try:
                    res = self.verify(task) if task["action"] == "verify" else self.fetch(task)
                except Exception as e:  # one file fails, the others go on
                    self.status.error(task["path"], "%s: %s" % (type(e).__name__, e))
                    res = False
                with qlock:
                    results.append(res)

        threads = [threading.Thread(target=worker, name="fetch-%d" % i, daemon=True)
                   for i in range(max(1, min(int(self.job.get("parallel") or 1), len(work) or 1)))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return all(results)


def _terminated(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def run(state_dir, name):
    files = sglang_weights.state_files(name)
    dir_fd = sglang_proc.open_run_dir(state_dir)
    try:
        lock_fd = os.open(files["lock"], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.stderr.write("another fetch of %s holds %s/%s\n" % (name, state_dir, files["lock"]))
        return EXIT_LOCKED
    raw = sys.stdin.read()
    token = (json.loads(raw) if raw.strip() else {}).get("token")
    job = json.loads(sglang_proc.read_file(state_dir, files["job"], limit=64 << 20))
    status = Status(state_dir, name, job)
    status.write()
    fetch = Fetch(state_dir, name, job, token, status)
    stop = threading.Event()

    def ticker():
        while not stop.wait(STATUS_EVERY):
            try:
                status.sample_parts(job["path"])
                status.write()
            except Exception:  # a status write that failed is tried again
                traceback.print_exc()

    thread = threading.Thread(target=ticker, name="status", daemon=True)
    thread.start()
    signal.signal(signal.SIGTERM, _terminated)
    try:
        ok = fetch.run()
    except BaseException as e:  # the verdict says what ended the job
        traceback.print_exc()
        status.error(None, "%s: %s" % (type(e).__name__, e))
        ok = False
    stop.set()
    thread.join()
    status.sample_parts(job["path"])
    summary = {"fetched": sum(1 for t in job["tasks"] if t["action"] == "fetch") + len(fetch.refetched),
               "refetched": sorted(set(fetch.refetched)), "verified": sum(1 for t in job["tasks"]
                                                                          if t["action"] == "verify"),
               "kept": sum(1 for t in job["tasks"] if t["action"] == "keep"), "settled": fetch.settled,
               "source": job["source"]["kind"]}
    summary["changed"] = bool(summary["fetched"] or summary["settled"] or fetch.manifest_changed or not ok)
    status.set(phase="done" if ok else "failed", verdict="done" if ok else "failed", summary=summary,
               finished_at=time.time())
    status.write()
    return EXIT_DONE if ok else EXIT_FAILED


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["list"]:
        req = json.loads(sys.stdin.read() or "{}")
        sys.stdout.write(json.dumps(list_repo(req)))
        return 0
    if argv[:1] == ["run"] and len(argv) == 3:
        return run(argv[1], argv[2])
    sys.stderr.write("usage: python -I -B <program_dir> list | run STATE_DIR NAME\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
