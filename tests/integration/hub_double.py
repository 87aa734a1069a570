#!/usr/bin/env python3
"""A test double of the Hugging Face Hub: the part of its HTTP API that ``huggingface_hub`` uses to list a repo and
fetch its files, serving small models from directories on disk. Standard library only. It is NOT the Hub and not part
of the deployment (the product takes an endpoint URL and knows nothing of it).

What it speaks (model repos only):

* ``GET /api/models/{repo}[/revision/{rev}]``: the repo's info at a revision (``sha`` = the commit), ``rev`` a branch
  or a commit hash; ``RevisionNotFound`` / ``RepoNotFound`` / ``GatedRepo`` errors as the Hub words them
  (``X-Error-Code``, ``X-Error-Message``).
* ``GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=true``: the file list, each file's ``size``, git ``oid``
  (the blob's SHA-1) and, for an LFS file, ``lfs: {oid: <sha256>, size, pointerSize}``; paged with a ``Link: <...>;
  rel="next"`` header (``--page-size`` entries a page, a ``cursor`` parameter).
* ``HEAD`` / ``GET /{repo}/resolve/{rev}/{path}``: the file, with ``X-Repo-Commit``, ``ETag`` (the blob SHA-1, or the
  SHA-256 for an LFS file), ``X-Linked-Etag`` / ``X-Linked-Size`` for LFS files, ``Content-Length``,
  ``Accept-Ranges: bytes`` and ``Range: bytes=N-`` / ``bytes=N-M`` answered 206. With ``--cdn URL`` an LFS file is
  redirected (302) there, as the Hub redirects to its CDN, the metadata on the redirect. No ``X-Xet-*`` header is ever
  sent, so ``hf_xet`` is not used.
* A gated repo answers 401 ``GatedRepo`` to any request without ``Authorization: Bearer <token>``.

For the tests: ``GET /_double/stats`` (every request: method, path, client address, range start, bytes sent), ``POST
/_double/reset``; ``--rate`` limits each response to that many bytes a second (a fetch that can be killed halfway).

A repo is a directory (``--repo org/name=DIR``, with ``:gated`` to require the token); its commit is a hash of its
file list and contents, branch ``main`` points at it. ``make_model()`` writes a small model (config.json, tokenizer
files, safetensors shards of pseudo-random bytes) for a test to serve.

    python3 tests/integration/hub_double.py --port 8089 --repo test-org/tiny=/srv/tiny --token hf_x --page-size 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".model")
CHUNK = 64 * 1024


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def file_digests(path):
    """(size, git blob sha1, sha256) of a file, read once."""
    size = os.path.getsize(path)
    blob = hashlib.sha1(b"blob %d\0" % size)
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            blob.update(chunk)
            sha.update(chunk)
    return size, blob.hexdigest(), sha.hexdigest()


def pseudo_random_bytes(size, seed):
    """``size`` bytes that depend only on ``seed`` (fast: a random 1 MiB block, repeated with the position mixed in)."""
    rng = random.Random(seed)
    block = rng.randbytes(min(size, 1 << 20)) if size else b""
    out = bytearray()
    i = 0
    while len(out) < size:
        out += hashlib.sha256(b"%s:%d" % (str(seed).encode(), i)).digest() + block
        i += 1
    return bytes(out[:size])


def make_model(directory, shards=3, shard_size=4 << 20, seed="tiny", extra_files=0):
    """A small model in ``directory``: config.json, tokenizer files, ``shards`` safetensors shards of ``shard_size``
    bytes, an index, and ``extra_files`` more small files under ``extra/`` (a many-file repo). Returns {path: size}."""
    files = {}
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": 64,
           "num_hidden_layers": 2, "vocab_size": 1024, "seed": str(seed)}
    weight_map = {}
    for i in range(1, shards + 1):
        name = "model-%05d-of-%05d.safetensors" % (i, shards)
        files[name] = pseudo_random_bytes(shard_size, "%s-%d" % (seed, i))
        weight_map["layers.%d.weight" % i] = name
    files["config.json"] = (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode()
    files["tokenizer_config.json"] = b'{"model_max_length": 4096}\n'
    files["tokenizer.json"] = json.dumps({"version": "1.0", "seed": str(seed), "vocab": list(range(200))}).encode()
    files["model.safetensors.index.json"] = json.dumps({"weight_map": weight_map}, sort_keys=True).encode()
    for i in range(extra_files):
        files["extra/part-%04d.json" % i] = b'{"part": %d, "seed": "%s"}\n' % (i, str(seed).encode())
    for rel, data in files.items():
        path = os.path.join(directory, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
    return dict((rel, len(data)) for rel, data in files.items())


class Repo(object):
    """A model repo served from a directory: one commit, branch ``main`` at it."""

    def __init__(self, repo_id, directory, gated=False):
        self.repo_id = repo_id
        self.directory = os.path.abspath(directory)
        self.gated = gated
        self.files = {}
        for root, dirs, names in os.walk(self.directory):
            dirs.sort()
            for name in sorted(names):
                full = os.path.join(root, name)
                rel = os.path.relpath(full, self.directory).replace(os.sep, "/")
                size, blob, sha = file_digests(full)
                lfs = rel.endswith(LFS_SUFFIXES) or size >= (1 << 20)
                self.files[rel] = {"size": size, "blob": blob, "sha256": sha, "lfs": lfs, "path": full}
        listing = "".join("%s %s\n" % (rel, f["sha256"]) for rel, f in sorted(self.files.items()))
        self.commit = hashlib.sha1(("%s\n%s" % (repo_id, listing)).encode()).hexdigest()
        self.branches = {"main": self.commit}

    def resolve(self, rev):
        """The commit for a branch name or commit hash, or None."""
        if rev in self.branches:
            return self.branches[rev]
        if rev == self.commit:
            return self.commit
        return None

    def tree(self, prefix=""):
        """Entries of the recursive tree under ``prefix``: directories, then files, sorted by path (as the Hub)."""
        prefix = prefix.strip("/")
        dirs = set()
        entries = []
        for rel, f in sorted(self.files.items()):
            if prefix and not rel.startswith(prefix + "/"):
                continue
            parts = rel.split("/")
            for i in range(1, len(parts)):
                dirs.add("/".join(parts[:i]))
            entry = {"type": "file", "oid": f["blob"], "size": f["size"], "path": rel}
            if f["lfs"]:
                entry["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": 134}
            entries.append(entry)
        folders = [{"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                   for d in sorted(dirs) if not prefix or d.startswith(prefix + "/")]
        return sorted(folders + entries, key=lambda e: e["path"])


class Double(object):
    """The served repos, the settings and the request log (shared by the handler threads)."""

    def __init__(self, repos, token=None, page_size=1000, rate=0, cdn=None):
        self.repos = dict((r.repo_id, r) for r in repos)
        self.token = token
        self.page_size = max(1, int(page_size))
        self.rate = float(rate or 0)
        self.cdn = cdn.rstrip("/") if cdn else None
        self.lock = threading.Lock()
        self.requests = []

    def log(self, entry, client=None):
        """Record a request; returns its handle for add_sent."""
        if client is not None:
            entry["client"] = client
        with self.lock:
            self.requests.append(entry)
            return entry

    def add_sent(self, entry, n):
        """Count bytes sent for a request (one logged before a reset counts in no log)."""
        with self.lock:
            entry["sent"] += n

    def stats(self):
        with self.lock:
            return [dict(r) for r in self.requests]

    def reset(self):
        with self.lock:
            self.requests = []


_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/(?P<kind>revision|tree)/(?P<rev>[^/]+)(?:/(?P<path>.*))?)?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_LFS = re.compile(r"^/_lfs/(?P<repo>[^/]+/[^/]+)/(?P<sha>[0-9a-f]{64})$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hub-double/1.0"
    double = None  # set on the class made per server

    def log_message(self, *args):
        pass

    # ------------------------------------------------------------------ plumbing
    def _send(self, status, body=b"", headers=None, ctype="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status, obj, headers=None):
        self._send(status, json.dumps(obj).encode(), headers)

    def _error(self, status, code, message):
        self._json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

    def _repo(self, repo_id):
        """The repo if it exists and this request may see it; else the error is sent and None returned."""
        repo = self.double.repos.get(repo_id)
        if repo is None:
            self._error(401 if not self._authorized() else 404, "RepoNotFound",
                        "Repository Not Found for url: %s." % self.path)
            return None
        if repo.gated and not self._authorized():
            self._error(401, "GatedRepo", "Access to model %s is restricted. You must have access to it and be "
                                          "authenticated to access it. Please log in." % repo_id)
            return None
        return repo

    def _authorized(self):
        token = self.double.token
        return bool(token) and self.headers.get("Authorization") == "Bearer %s" % token

    # ------------------------------------------------------------------ verbs
    def do_HEAD(self):
        self._route()

    def do_GET(self):
        self._route()

    def do_POST(self):
        if self.path == "/_double/reset":
            self.double.reset()
            self._json(200, {"ok": True})
        else:
            self._error(404, "EntryNotFound", "no such endpoint")

    def _route(self):
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query)
        if path == "/_double/stats":
            return self._json(200, self.double.stats())
        m = _API.match(path)
        if m:
            return self._api(m, query, url)
        m = _RESOLVE.match(path)
        if m:
            return self._resolve(m)
        m = _LFS.match(path)
        if m:
            return self._lfs(m)
        return self._error(404, "EntryNotFound", "no such endpoint: %s" % path)

    def _api(self, m, query, url):
        repo = self._repo(m.group("repo"))
        if repo is None:
            return None
        commit = repo.resolve(m.group("rev") or "main")
        if commit is None:
            return self._error(404, "RevisionNotFound", "Invalid rev id: %s" % m.group("rev"))
        self.double.log({"method": self.command, "path": url.path, "start": None, "sent": 0},
                        self.client_address[0])
        if m.group("kind") != "tree":
            return self._json(200, {
                "_id": repo.commit[:24], "id": repo.repo_id, "modelId": repo.repo_id, "sha": commit,
                "private": False, "gated": "manual" if repo.gated else False, "disabled": False,
                "lastModified": "2026-11-01T00:00:00.000Z", "tags": [], "library_name": "transformers",
                "siblings": [{"rfilename": rel} for rel in sorted(repo.files)]})
        entries = repo.tree(m.group("path") or "")
        cursor = int((query.get("cursor") or ["0"])[0] or 0)
        page = entries[cursor:cursor + self.double.page_size]
        headers = {}
        if cursor + self.double.page_size < len(entries):
            host = self.headers.get("Host") or "%s:%d" % self.server.server_address[:2]
            nxt = "http://%s%s?recursive=%s&expand=false&cursor=%d" % (
                host, quote(url.path), (query.get("recursive") or ["false"])[0], cursor + self.double.page_size)
            headers["Link"] = '<%s>; rel="next"' % nxt
        return self._json(200, page, headers)

    def _file_headers(self, repo, commit, f):
        headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
        if f["lfs"]:
            headers.update({"ETag": '"%s"' % f["sha256"], "X-Linked-Etag": '"%s"' % f["sha256"],
                            "X-Linked-Size": str(f["size"])})
        else:
            headers["ETag"] = '"%s"' % f["blob"]
        return headers

    def _resolve(self, m):
        repo = self._repo(m.group("repo"))
        if repo is None:
            return None
        commit = repo.resolve(m.group("rev"))
        if commit is None:
            return self._error(404, "RevisionNotFound", "Invalid rev id: %s" % m.group("rev"))
        f = repo.files.get(m.group("path"))
        if f is None:
            return self._error(404, "EntryNotFound", "Entry not found: %s" % m.group("path"))
        headers = self._file_headers(repo, commit, f)
        if f["lfs"] and self.double.cdn:
            headers["Location"] = "%s/_lfs/%s/%s" % (self.double.cdn, repo.repo_id, f["sha256"])
            self.double.log({"method": self.command, "path": self.path, "start": None, "sent": 0, "redirect": True},
                            self.client_address[0])
            return self._send(302, b"", headers)
        return self._content(f, headers)

    def _lfs(self, m):
        repo = self.double.repos.get(m.group("repo"))
        found = [f for f in (repo.files.values() if repo else ()) if f["lfs"] and f["sha256"] == m.group("sha")]
        if not found:
            return self._error(404, "EntryNotFound", "no such object")
        return self._content(found[0], {"ETag": '"%s"' % found[0]["sha256"], "Accept-Ranges": "bytes"})

    def _content(self, f, headers):
        size = f["size"]
        start, end = 0, size - 1
        status = 200
        rng = self.headers.get("Range")
        if rng:
            mr = _RANGE.match(rng.strip())
            if not mr or int(mr.group(1)) >= max(size, 1):
                return self._send(416, b"", {"Content-Range": "bytes */%d" % size})
            start = int(mr.group(1))
            end = min(int(mr.group(2)), size - 1) if mr.group(2) else size - 1
            status = 206
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, end, size)
        length = max(0, end - start + 1)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        entry = self.double.log({"method": self.command, "path": self.path, "file": f["path"], "start": start,
                                 "sent": 0, "status": status}, self.client_address[0])
        if self.command == "HEAD":
            return None
        rate = self.double.rate
        began = time.monotonic()
        done = 0
        with open(f["path"], "rb") as fh:
            fh.seek(start)
            while done < length:
                chunk = fh.read(min(CHUNK, length - done))
                if not chunk:
                    break
                try:
                    self.wfile.write(chunk)
                except OSError:
                    return None
                done += len(chunk)
                self.double.add_sent(entry, len(chunk))
                if rate:
                    ahead = done / rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)
        return None


def serve(double, host="127.0.0.1", port=0):
    """A started server (in a daemon thread) for ``double``; ``server.server_address[1]`` is its port;
    ``server.shutdown()`` stops it."""
    handler = type("BoundHandler", (Handler,), {"double": double})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="hub-double", daemon=True)
    thread.start()
    return server


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--repo", action="append", default=[], metavar="ORG/NAME=DIR[:gated]")
    ap.add_argument("--make", action="append", default=[], metavar="DIR:SHARDS:SHARD_BYTES[:EXTRA_FILES]",
                    help="write a model into DIR first (make_model)")
    ap.add_argument("--token", default=None)
    ap.add_argument("--page-size", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=0)
    ap.add_argument("--cdn", default=None)
    ap.add_argument("--port-file", default=None, help="write the port here once listening")
    args = ap.parse_args(argv)
    for spec in args.make:
        parts = spec.split(":")
        if not os.path.exists(os.path.join(parts[0], "config.json")):
            make_model(parts[0], shards=int(parts[1]), shard_size=int(parts[2]),
                       extra_files=int(parts[3]) if len(parts) > 3 else 0, seed=os.path.basename(parts[0]))
    repos = []
    for spec in args.repo:
        repo_id, _, rest = spec.partition("=")
        directory, _, flags = rest.partition(":")
        repos.append(Repo(repo_id, directory, gated="gated" in flags.split(",")))
    double = Double(repos, token=args.token, page_size=args.page_size, rate=args.rate, cdn=args.cdn)
    server = serve(double, args.host, args.port)
    port = server.server_address[1]
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as fh:
            fh.write("%d\n" % port)
        os.rename(args.port_file + ".tmp", args.port_file)
    sys.stdout.write("hub-double listening on %s:%d\n" % (args.host, port))
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
