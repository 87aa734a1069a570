# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model weights on a host: what ``sglang_model`` (and ``sglang_info``'s ``models`` look) decide on, standard library
only. Shipped to the target with the modules that import it, and installed with the fetch program
(``sglang_hub_fetch.py``; role sglang_model, sglang_program), which imports it relatively, as the modules do.

* :data:`ARGUMENT_SPEC`: ``sglang_model``'s options (``sglang_info`` checks its ``models`` option against it).
* The **manifest** ``<state_dir>/<name>.manifest.json``: what was verified, per file its size, SHA-256 (and git blob
  SHA-1), mtime, inode, and the source (repo and commit, or seed). Trusted only as the run state is
  (``sglang_proc.open_run_dir``): a state dir reached without symlinks through directories only root can write, the
  file root's and writable by no one else.
* :func:`look`: whether each model is in place, by ``lstat`` alone (no hashing, no network): its manifest is trusted
  and names the wanted source, and every file it lists is there with the recorded size, mtime and inode, owner, group
  and mode. Cheap enough for every run (1,000 files: a few milliseconds).
* :func:`plan`: from the source's file list, what a fetch must do per file (keep, verify, fetch with the bytes
  already in its part file) and how many bytes it still needs; :func:`disk_shortfall` against the free space.
* :func:`hash_file`: size, SHA-256 and git blob SHA-1 in one read.
"""

from __future__ import annotations

import errno
import fnmatch
import grp
import hashlib
import json
import os
import pwd
import re
import stat
import subprocess

from . import sglang_proc

MANIFEST_VERSION = 1
# Inside the model dir, root's 0700: the part files of a fetch (same file system as the files, so a rename puts one in
# place), removed once the model is complete.
STAGING = ".eagle-fetch"
DEFAULT_ENDPOINT = "https://huggingface.co"
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")

PEER_OPTIONS = dict(
    address=dict(type="str", required=True),
    port=dict(type="int", default=22),
    user=dict(type="str", default="root"),
    path=dict(type="path", required=True),
    key=dict(type="path", required=True),
    host_keys=dict(type="list", elements="str", required=True, no_log=False),
    files=dict(type="list", elements="dict", required=True),
    source=dict(type="dict", required=True),
)

MODEL_OPTIONS = dict(
    name=dict(type="str", required=True),
    path=dict(type="path", required=True),
    repo=dict(type="str"),
    revision=dict(type="str", default="main"),
    seed=dict(type="path"),
    allow_patterns=dict(type="list", elements="str"),
    ignore_patterns=dict(type="list", elements="str"),
    peer=dict(type="dict", options=PEER_OPTIONS),
)

ARGUMENT_SPEC = dict(
    models=dict(type="list", elements="dict", required=True, options=MODEL_OPTIONS),
    state_dir=dict(type="path", default="/var/lib/eagle-deploy/models"),
    endpoint=dict(type="str", default=DEFAULT_ENDPOINT),
    token=dict(type="str", no_log=True),
    python=dict(type="path"),
    program_dir=dict(type="path"),
    owner=dict(type="str", default="root"),
    group=dict(type="str", default="root"),
    file_mode=dict(type="raw", default="0644"),
    dir_mode=dict(type="raw", default="0755"),
    verify=dict(type="str", default="auto", choices=["auto", "full"]),
    disk_margin_mib=dict(type="int", default=10240),
    parallel=dict(type="int", default=4),
    timeout=dict(type="int", default=0),
    _step_time=dict(type="float"),
    _jobs=dict(type="dict"),
)


class ModelError(Exception):
    """A model cannot be fetched or checked as asked; the message says what to fix."""

    def __init__(self, msg, **extra):
        super().__init__(msg)
        self.msg = msg
        self.extra = extra


# ------------------------------------------------------------------ names and inputs
def state_files(name):
    """The files of model ``name`` in the state dir."""
    return {"manifest": "%s.manifest.json" % name, "job": "%s.job.json" % name, "status": "%s.status.json" % name,
            "lock": "%s.lock" % name, "log": "%s.fetch.log" % name}


def mode_of(value, what):
    """An octal mode given as "0640", 0o640 or 416, as an int; ModelError when it is none."""
    if isinstance(value, int) and not isinstance(value, bool):
        mode = value
    else:
        text = str(value or "").strip()
        if not re.match(r"^0?[0-7]{3,4}$", text):
            raise ModelError("%s must be an octal mode such as \"0640\" (got %r)" % (what, value))
        mode = int(text, 8)
    if not 0 <= mode <= 0o7777:
        raise ModelError("%s must be an octal mode such as \"0640\" (got %r)" % (what, value))
    return mode


def safe_relpath(rel):
    """Whether ``rel`` is a file path a repo may hold: relative, no ``..``, no empty part, not our staging dir."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\0" in rel or "\\" in rel:
        return False
    parts = rel.split("/")
    return all(p not in ("", ".", "..") for p in parts) and parts[0] != STAGING


def is_commit(revision):
    return bool(_HEX40.match(revision or ""))


def selected(paths, allow=None, ignore=None):
    """``paths`` filtered as huggingface_hub's allow_patterns / ignore_patterns filter them (fnmatch; a pattern
    ending in ``/`` matches everything below)."""
    def norm(patterns):
        return [p + "*" if p.endswith("/") else p for p in (patterns or [])]
    allow, ignore = norm(allow), norm(ignore)
    out = []
    for rel in paths:
        if allow and not any(fnmatch.fnmatch(rel, p) for p in allow):
            continue
        if ignore and any(fnmatch.fnmatch(rel, p) for p in ignore):
            continue
        out.append(rel)
    return out


def check_models(models):
    """Refuse what no fetch can do, before anything is touched: names, paths, sources."""
    names, paths = set(), set()
    for m in models:
        name = m["name"]
        if not sglang_proc.safe_name(name):
            raise ModelError("model name %r: use letters, digits, '.', '_' and '-' only" % name)
        if name in names:
            raise ModelError("model name %r is given twice: each model needs a name of its own" % name)
        names.add(name)
        path = m["path"]
        if not os.path.isabs(path) or ".." in path.split("/") or os.path.normpath(path) == "/":
            raise ModelError("model %s: path must be an absolute directory path without '..' (got %r)" % (name, path))
        norm = os.path.normpath(path)
        for other in paths:
            if norm == other or norm.startswith(other + "/") or other.startswith(norm + "/"):
                raise ModelError("model %s: path %s overlaps another model's %s: give each model a directory of its "
                                 "own" % (name, path, other))
        paths.add(norm)
        if not m.get("repo") and not m.get("seed"):
            raise ModelError("model %s: give a source: repo (a Hugging Face repo id, with revision) or seed (a "
                             "directory that already holds the files)" % name)
        if m.get("repo") and not _REPO_ID.match(m["repo"]):
            raise ModelError("model %s: repo must be a Hugging Face repo id such as moonshotai/Kimi-K2.5 (got %r)"
                             % (name, m["repo"]))
        if m.get("repo") and not (m.get("revision") or "").strip():
            raise ModelError("model %s: revision is empty: pin a commit hash (or a branch, resolved once)" % name)
        if m.get("seed") and not os.path.isabs(m["seed"]):
            raise ModelError("model %s: seed must be an absolute path (got %r)" % (name, m["seed"]))
        if m.get("peer") and seed_in_place(m):
            raise ModelError("model %s: a model read from its seed in place is never copied from a peer" % name)


def seed_in_place(model):
    """Whether the server reads the model where it was seeded (``seed`` is ``path``): then it is checked, never
    written."""
    seed = model.get("seed")
    return bool(seed) and os.path.normpath(seed) == os.path.normpath(model["path"])


def ids(owner, group):
    """(uid, gid) of the owner and group; ModelError naming the one that does not exist."""
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise ModelError("owner %r does not exist on this host" % owner)
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise ModelError("group %r does not exist on this host (create the service group first: the install role "
                         "does)" % group)
    return uid, gid


def make_state_dir(path):
    """The state dir, created root's 0755 where missing, below a part of its path that is already trusted
    (``sglang_proc.open_run_dir``); UntrustedState where anyone but root could write it."""
    missing = []
    cur = path
    while not os.path.lexists(cur):
        missing.append(cur)
        cur = os.path.dirname(cur)
    os.close(sglang_proc.open_run_dir(cur))
    for d in reversed(missing):
        os.mkdir(d, 0o755)
        os.chmod(d, 0o755)
    os.close(sglang_proc.open_run_dir(path))


# ------------------------------------------------------------------ sources
def wanted_source(model):
    """What the manifest must name for ``model`` to be in place."""
    src = {"allow_patterns": sorted(model.get("allow_patterns") or []),
           "ignore_patterns": sorted(model.get("ignore_patterns") or [])}
    if model.get("repo"):
        src.update(kind="hub", repo=model["repo"], revision=model["revision"])
    if model.get("seed"):
        src["seed"] = os.path.normpath(model["seed"])
        src.setdefault("kind", "seed")
    return src


def source_matches(recorded, model):
    """(True, None) when the manifest's source is the one ``model`` asks for, else (False, why). A branch is resolved
    once: a manifest made for revision ``main`` stays in place (its commit recorded) until another revision is asked."""
    want = wanted_source(model)
    rec = recorded or {}
    for key in ("allow_patterns", "ignore_patterns"):
        if sorted(rec.get(key) or []) != want[key]:
            return False, "%s changed" % key
    if want.get("repo"):
        if rec.get("repo") != want["repo"]:
            return False, "repo %s was fetched, %s is asked" % (rec.get("repo"), want["repo"])
        if want["revision"] not in (rec.get("commit"), rec.get("revision")):
            return False, "revision %s was fetched (commit %s), %s is asked" % (
                rec.get("revision"), rec.get("commit"), want["revision"])
        return True, None
    if rec.get("kind") != "seed" or rec.get("seed") != want.get("seed"):
        return False, "the files were not recorded from seed %s" % want.get("seed")
    return True, None


# ------------------------------------------------------------------ manifest
def read_manifest(state_dir, name):
    """(manifest, None), or (None, why) when there is none or it is not trusted or not readable."""
    fname = state_files(name)["manifest"]
    try:
        text = sglang_proc.read_file(state_dir, fname, limit=64 << 20)
    except sglang_proc.UntrustedState as e:
        return None, "manifest not trusted: %s" % e
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None, "no manifest yet (%s/%s)" % (state_dir, fname)
        return None, "manifest not readable: %s" % e
    if text is None:
        return None, "no manifest yet (%s/%s)" % (state_dir, fname)
    try:
        data = json.loads(text)
    except ValueError:
        return None, "manifest %s/%s is not JSON" % (state_dir, fname)
    if not isinstance(data, dict) or data.get("version") != MANIFEST_VERSION or not isinstance(data.get("files"), dict):
        return None, "manifest %s/%s is not of version %d" % (state_dir, fname, MANIFEST_VERSION)
    return data, None


def entry_of(st, digests=None, extra=None):
    """A manifest entry for a file: its ``lstat`` identity and, when given, (size, sha256, git_sha1)."""
    e = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
    if digests:
        e.update(sha256=digests[1], git_sha1=digests[2])
    if extra:
        e.update(extra)
    return e


def access_problem(st, uid=None, gid=None, mode=None):
    """What differs in the owner, group and mode of ``st`` from those asked (None: not asked), or None."""
    if uid is not None and st.st_uid != uid:
        return "owner uid %d, want %d" % (st.st_uid, uid)
    if gid is not None and st.st_gid != gid:
        return "group gid %d, want %d" % (st.st_gid, gid)
    if mode is not None and stat.S_IMODE(st.st_mode) != mode:
        return "mode %04o, want %04o" % (stat.S_IMODE(st.st_mode), mode)
    return None


def file_problem(path, rec, uid=None, gid=None, mode=None):
    """Why the file at ``path`` is not as the manifest entry ``rec`` recorded it (and owned and moded as asked, when
    uid/gid/mode are given), or None. ``lstat`` only."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return "missing" if e.errno == errno.ENOENT else "not readable: %s" % e.strerror
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_size != rec.get("size"):
        return "size %d, want %s" % (st.st_size, rec.get("size"))
    if st.st_mtime_ns != rec.get("mtime_ns") or st.st_ino != rec.get("ino"):
        return "changed since it was verified (mtime or inode)"
    return access_problem(st, uid, gid, mode)


def dir_problem(path, uid=None, gid=None, mode=None):
    try:
        st = os.lstat(path)
    except OSError as e:
        return "missing" if e.errno == errno.ENOENT else "not readable: %s" % e.strerror
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    return access_problem(st, uid, gid, mode)


def model_dirs(files):
    """The directories below a model dir that its files need ("" is the model dir itself)."""
    dirs = {""}
    for rel in files:
        parts = rel.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return sorted(dirs)


# ------------------------------------------------------------------ the look
def look_model(model, state_dir, ownership, verify):
    """Whether one model is in place (``in_place``), and if not, why; its commit and size when known.
    ``ownership`` (uid, gid, file_mode, dir_mode), or None to not look at owners and modes."""
    name, path = model["name"], model["path"]
    out = {"name": name, "path": path, "in_place": False}
    manifest, why = read_manifest(state_dir, name)
    if manifest is None:
        out["why"] = why
        return out
    src = manifest.get("source") or {}
    out.update(commit=src.get("commit"), files=len(manifest["files"]),
               bytes=sum(int(e.get("size") or 0) for e in manifest["files"].values()))
    if os.path.normpath(manifest.get("path") or "") != os.path.normpath(path):
        out["why"] = "the manifest is for %s" % manifest.get("path")
        return out
    ok, why = source_matches(src, model)
    if not ok:
        out["why"] = why
        return out
    if verify == "full":
        out["why"] = "a full verification (SHA-256 of every file) is asked"
        return out
    uid = gid = fmode = dmode = None
    if ownership is not None and not seed_in_place(model):
        uid, gid, fmode, dmode = ownership
    for rel in model_dirs(manifest["files"]):
        problem = dir_problem(os.path.join(path, rel) if rel else path, uid, gid, dmode)
        if problem:
            out["why"] = "%s: %s" % (os.path.join(path, rel) if rel else path, problem)
            return out
    for rel in sorted(manifest["files"]):
        problem = file_problem(os.path.join(path, rel), manifest["files"][rel], uid, gid, fmode)
        if problem:
            out["why"] = "%s: %s" % (rel, problem)
            return out
    out["in_place"] = True
    return out


def ownership_of(params):
    """(uid, gid, file_mode, dir_mode) from the options; ModelError when an owner, group or mode is wrong."""
    uid, gid = ids(params["owner"], params["group"])
    return uid, gid, mode_of(params["file_mode"], "file_mode"), mode_of(params["dir_mode"], "dir_mode")


def look(params):
    """The look for every model of ``params`` (``sglang_model``'s options): ``{in_place, models: [...]}``. It never
    fails on what it finds: an owner or group that does not exist yet (the install role creates the group later in
    the play) makes every model not in place, with the reason."""
    try:
        check_models(params["models"])
        ownership = ownership_of(params)
    except ModelError as e:
        models = [{"name": m.get("name"), "path": m.get("path"), "in_place": False, "why": e.msg}
                  for m in params["models"]]
        return {"in_place": not models, "models": models}
    models = [look_model(m, params["state_dir"], ownership, params["verify"]) for m in params["models"]]
    return {"in_place": all(m["in_place"] for m in models), "models": models}


def unreadable(path, rels, gid):
    """The first file or directory of a seed read in place that a member of group ``gid`` (the service user) cannot
    read, with why, or None: each directory from the model dir down needs x (and r) for others or for that group, each
    file r."""
    def can(st, bit_other, bit_group):
        return bool(st.st_mode & bit_other) or (st.st_gid == gid and bool(st.st_mode & bit_group))

    for rel in model_dirs(rels):
        d = os.path.join(path, rel) if rel else path
        st = os.stat(d)
        if not (can(st, stat.S_IXOTH, stat.S_IXGRP) and can(st, stat.S_IROTH, stat.S_IRGRP)):
            return "%s (mode %04o, group %d)" % (d, stat.S_IMODE(st.st_mode), st.st_gid)
    for rel in rels:
        st = os.stat(os.path.join(path, rel))
        if not can(st, stat.S_IROTH, stat.S_IRGRP):
            return "%s (mode %04o, group %d)" % (os.path.join(path, rel), stat.S_IMODE(st.st_mode), st.st_gid)
    return None


def spawn_detached(argv, log_path, stdin_text, env):
    """The fetch program, detached: a session of its own, stdin a pipe that gets ``stdin_text`` (the token) and closes,
    stdout and stderr its log (0600), no descriptor of the caller's, so that the module's exit_json never waits on it."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=fd, stderr=fd, cwd="/", env=env, close_fds=True,
                                start_new_session=True)
    finally:
        os.close(fd)
    try:
        proc.stdin.write(stdin_text.encode("utf-8"))
    finally:
        proc.stdin.close()
    return proc.pid


# ------------------------------------------------------------------ hashing and disk
def hash_file(path, on_bytes=None, block=8 << 20):
    """(size, sha256, git blob sha1) of the file at ``path`` in one read; ``on_bytes(n)`` after each block."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        sha = hashlib.sha256()
        blob = hashlib.sha1(b"blob %d\0" % size)
        done = 0
        while True:
            chunk = fh.read(block)
            if not chunk:
                break
            sha.update(chunk)
            blob.update(chunk)
            done += len(chunk)
            if on_bytes:
                on_bytes(len(chunk))
    if done != size:
        raise OSError(errno.EIO, "%s changed size while it was read (%d of %d bytes)" % (path, done, size))
    return size, sha.hexdigest(), blob.hexdigest()


def digest_problem(want, digests):
    """Why (size, sha256, git_sha1) are not what the source listed for a file, or None. The SHA-256 decides where the
    source gives one (an LFS file: the Hub's ``lfs.sha256``); a small non-LFS file is checked by its git blob SHA-1
    (the Hub's ``oid``), the only hash the Hub lists for it."""
    size, sha256, git_sha1 = digests
    if size != want["size"]:
        return "size %d, the source lists %d" % (size, want["size"])
    if want.get("sha256"):
        if sha256 != want["sha256"]:
            return "SHA-256 %s, the source lists %s" % (sha256, want["sha256"])
    elif want.get("git_sha1"):
        if git_sha1 != want["git_sha1"]:
            return "git blob SHA-1 %s, the source lists %s" % (git_sha1, want["git_sha1"])
    return None


def existing_ancestor(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_bytes(path, statvfs=os.statvfs):
    """(the nearest existing directory of ``path``, bytes free for root there, its device)."""
    where = existing_ancestor(path)
    st = statvfs(where)
    return where, st.f_bavail * st.f_frsize, os.stat(where).st_dev


def gib(n):
    return "%.2f GiB" % (n / float(1 << 30))


def disk_shortfall(needs, margin, statvfs=os.statvfs):
    """``needs``: [(model name, path, bytes still to write)]. Models on one file system add up. Returns None when
    there is room for all plus ``margin`` bytes, else the message with the numbers."""
    by_dev = {}
    for name, path, need in needs:
        if need <= 0:
            continue
        where, free, dev = free_bytes(path, statvfs)
        slot = by_dev.setdefault(dev, {"where": where, "free": free, "need": 0, "names": []})
        slot["need"] += need
        slot["names"].append(name)
    for slot in by_dev.values():
        if slot["free"] < slot["need"] + margin:
            return ("not enough disk space for %s: %s still to fetch (%d bytes) + the margin %s = %s, but %s has "
                    "%s free (%d bytes); free %s there or lower disk_margin_mib. Nothing was fetched or changed"
                    % (", ".join(slot["names"]), gib(slot["need"]), slot["need"], gib(margin),
                       gib(slot["need"] + margin), slot["where"], gib(slot["free"]), slot["free"],
                       gib(slot["need"] + margin - slot["free"])))
    return None


# ------------------------------------------------------------------ the plan of a fetch
def part_path(path, rel):
    return os.path.join(path, STAGING, "files", rel)


def plan(model, listing, manifest, verify):
    """What a fetch of ``model`` does per file of the source's ``listing`` ([{path, size, sha256, git_sha1}]):
    ``keep`` (the manifest verified it for this same content and ``lstat`` shows it unchanged), ``verify`` (a file of
    the right size is there: hash it, fetch it again only if it is wrong), ``fetch`` (missing or of another size:
    resume from its part file). Returns (tasks, bytes still to write)."""
    path = model["path"]
    recorded = (manifest or {}).get("files") or {}
    tasks, need = [], 0
    for want in listing:
        rel = want["path"]
        final = os.path.join(path, rel)
        rec = recorded.get(rel)
        task = dict(want)
        try:
            st = os.lstat(final)
        except OSError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise ModelError("model %s: %s is not a regular file (%s): move it away; nothing is deleted that the "
                             "role did not write" % (model["name"], final, "symlink" if stat.S_ISLNK(st.st_mode)
                                                     else "directory" if stat.S_ISDIR(st.st_mode) else "special"))
        same = (rec is not None and st is not None and verify != "full" and file_problem(final, rec) is None
                and not digest_problem(want, (rec.get("size"), rec.get("sha256"), rec.get("git_sha1"))))
        if same:
            task["action"] = "keep"
            task["recorded"] = rec
        elif st is not None and st.st_size == want["size"]:
            task["action"] = "verify"
        else:
            task["action"] = "fetch"
            try:
                have = os.lstat(part_path(path, rel)).st_size
            except OSError:
                have = 0
            task["resume_from"] = have if have <= want["size"] else 0
            need += want["size"] - task["resume_from"]
        tasks.append(task)
    return tasks, need


def listing_of_manifest(manifest):
    """The manifest's files as a listing ([{path, size, sha256, git_sha1}]): what a peer copies against."""
    return [{"path": rel, "size": e["size"], "sha256": e.get("sha256"), "git_sha1": e.get("git_sha1")}
            for rel, e in sorted((manifest or {}).get("files", {}).items())]


def check_listing(name, listing):
    """Refuse a file list no fetch should write: unsafe paths, sizes that are not numbers, duplicate paths."""
    seen = set()
    for f in listing:
        rel = f.get("path")
        if not safe_relpath(rel):
            raise ModelError("model %s: the source lists a file path that cannot be written safely: %r" % (name, rel))
        if rel in seen:
            raise ModelError("model %s: the source lists %s twice" % (name, rel))
        seen.add(rel)
        if not isinstance(f.get("size"), int) or isinstance(f.get("size"), bool) or f["size"] < 0:
            raise ModelError("model %s: the source lists no size for %s" % (name, rel))
    return listing
