# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The record of good deployments, and the judgement of the running one: module side, in the trusted run dir.

A deployment is *good* once a start of it passed its smoke test (and the speculation check, where there is one):
:func:`record` writes what launching it again needs into ``<run_dir>/<name>.good.json`` (root, 0600): the argv,
the environment (never the secret one: the play gives it again), the service user, the fingerprint and its data,
and every fingerprint file's path, SHA-256, owner and mode, with a copy of each small one
(``<name>.good-<fingerprint[:16]>-<i>``, root, 0600: the rendered config, which the next deployment overwrites),
with the secrets (the API key) kept out of them: the restore puts back the ones the play gives.
The last ``keep`` good deployments are kept, newest first; the copies of one dropped are removed.

:func:`choose` picks the deployment a failed start rolls back to: the newest good one other than the failed
fingerprint whose inputs are intact (each file as recorded, or restorable from an intact copy; the python still the
one recorded), with why the others are not. :func:`restore` puts the changed files back from their copies.

:func:`judge` records a verdict on the running server (``<name>.judged.json``): a smoke test that failed on a server
that still answers (a draft that never accepts) is kept as "failed", so that the next run does not keep that server
as it is (:func:`judged_failed`, read by the plan). Everything is read as the run state is read
(``sglang_proc.read_file``): a file someone less privileged could have written is refused, never used.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat

from ansible.module_utils import sglang_proc
from ansible.module_utils.sglang_paths import file_sha256

GOOD_FILE = "%s.good.json"
JUDGED_FILE = "%s.judged.json"
COPY_LIMIT = 1 << 20  # files up to this size are copied beside the record (a config); larger ones must stay intact
FORMAT = 1


class GoodRecordError(Exception):
    """The record cannot be read or written (untrusted, not ours): the message says what to fix."""


def _copy_name(name, fingerprint, index):
    return "%s.good-%s-%d" % (name, fingerprint[:16], index)


def read_good(run_dir, name):
    """The good deployments recorded for ``name``, newest first ([] when none). Raises :class:`GoodRecordError`
    when the record could have been written by someone less privileged, or is not ours to read."""
    try:
        text = sglang_proc.read_file(run_dir, GOOD_FILE % name)
    except sglang_proc.UntrustedState as e:
        raise GoodRecordError("the good-deployment record is not trusted, nothing is rolled back or recorded: %s" % e)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return []
        raise GoodRecordError("cannot read the good-deployment record in %s: %s" % (run_dir, e))
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        raise GoodRecordError("%s/%s is not JSON: remove it (the next start that passes its smoke test writes it "
                              "again)" % (run_dir, GOOD_FILE % name))
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("deployments"), list):
        raise GoodRecordError("%s/%s is not a good-deployment record of this eagle-deploy: remove it"
                              % (run_dir, GOOD_FILE % name))
    return [d for d in data["deployments"] if isinstance(d, dict) and isinstance(d.get("fingerprint"), str)]


def _file_entry(path, index, name, fingerprint):
    st = os.stat(path)
    entry = {"path": path, "sha256": file_sha256(path), "uid": st.st_uid, "gid": st.st_gid,
             "mode": stat.S_IMODE(st.st_mode), "copy": None}
    if stat.S_ISREG(st.st_mode) and st.st_size <= COPY_LIMIT:
        entry["copy"] = _copy_name(name, fingerprint, index)
    return entry


def record(run_dir, name, state, inputs, keep, wall, secrets=()):
    """Record the running server ``state`` (ours, alive: the caller proved it) as good. ``inputs``: argv,
    environment, run_as, fingerprint_files, fingerprint_data, fingerprint (the one the caller computed from them: it
    must be the running server's). ``secrets``: values (the API key) that no copy may hold: each is kept out of the
    copies as a numbered mark, and the restore puts the values it is given back in its place. Returns (changed,
    report)."""
    fp = inputs["fingerprint"]
    if state.get("fingerprint") != fp:
        raise GoodRecordError(
            "the running server (PID %s) is not the deployment given: its fingerprint is %s, these inputs make %s. "
            "Nothing was recorded; record a deployment right after the start that launched it."
            % (state.get("pid"), (state.get("fingerprint") or "none")[:16], fp[:16]))
    deployments = read_good(run_dir, name)
    if deployments and deployments[0].get("fingerprint") == fp and deployments[0].get("run_token") == state.get(
            "run_token") and deployments[0].get("group") == inputs.get("group"):
        return False, {"good": _summary(deployments[0]), "good_kept": [_summary(d) for d in deployments]}
    files = [_file_entry(path, i, name, fp) for i, path in enumerate(inputs["fingerprint_files"])]
    python = inputs["argv"][0] if inputs["argv"] else None
    entry = {
        "fingerprint": fp, "run_token": state.get("run_token"), "recorded_at": wall, "pid": state.get("pid"),
        "attempt": state.get("attempt"), "launcher": state.get("launcher"),
        "argv": list(inputs["argv"]), "environment": dict(inputs["environment"]), "run_as": inputs["run_as"],
        "fingerprint_data": inputs["fingerprint_data"], "fingerprint_files": files,
        "python": python, "python_realpath": os.path.realpath(python) if python else None,
    }
    if inputs.get("group"):  # a node of a multi-node server: its generation (sglang_good_group.group_id)
        entry["group"] = inputs["group"]
    kept = [entry] + [d for d in deployments if d.get("fingerprint") != fp][:max(keep, 1) - 1]
    writes = []
    for f in files:
        if f["copy"]:
            with open(f["path"], "rb") as fh:
                data = fh.read(COPY_LIMIT + 1)
            if hashlib.sha256(data).hexdigest() != f["sha256"]:
                raise GoodRecordError("%s changed while it was recorded: nothing was recorded; run again" % f["path"])
            data = redact(data, secrets)
            f["copy_sha256"] = hashlib.sha256(data).hexdigest()
            writes.append((f["copy"], data))
    writes.append((GOOD_FILE % name, json.dumps({"format": FORMAT, "deployments": kept}, indent=1,
                                                sort_keys=True).encode("utf-8")))
    # the copies first: a record never names a copy that is not there
    sglang_proc.write_files(run_dir, writes, mode=0o600, fsync=True)
    live = {f.get("copy") for d in kept for f in d.get("fingerprint_files") or [] if isinstance(f, dict)}
    for d in deployments:
        for f in d.get("fingerprint_files") or []:
            if isinstance(f, dict) and f.get("copy") and f["copy"] not in live:
                sglang_proc.remove_file(run_dir, f["copy"])
    judge(run_dir, name, state, "good", "its smoke test passed", wall)
    return True, {"good": _summary(entry), "good_kept": [_summary(d) for d in kept]}


def _mark(i):
    return ("<<eagle-deploy secret %d>>" % i).encode("ascii")


def redact(data, secrets):
    """``data`` with every (non-empty) value of ``secrets`` replaced by its numbered mark."""
    for i, value in enumerate(secrets):
        if value:
            data = data.replace(value.encode("utf-8"), _mark(i))
    return data


def unredact(data, secrets):
    """The copy ``data`` with each mark replaced by its value in ``secrets``. GoodRecordError when a mark's value is
    not given."""
    for i, value in enumerate(secrets):
        if value:
            data = data.replace(_mark(i), value.encode("utf-8"))
    if b"<<eagle-deploy secret " in data:
        raise GoodRecordError("a kept copy holds a secret (the API key) that this run does not give: give the server's "
                              "secrets (sglang_server_api_key) to the rollback")
    return data


def _summary(d):
    data = d.get("fingerprint_data") or {}
    return {"fingerprint": d.get("fingerprint"), "sglang_version": data.get("sglang_version"),
            "recorded_at": d.get("recorded_at"), "python": d.get("python")}


def describe(d):
    """``<fingerprint[:16]>, SGLang <version>``: how a good deployment is named in messages."""
    data = d.get("fingerprint_data") or {}
    version = data.get("sglang_version")
    return "%s%s" % ((d.get("fingerprint") or "?")[:16], (", SGLang %s" % version) if version else "")


def why_not_intact(run_dir, d, secrets=()):
    """None when the good deployment ``d`` can be launched again as recorded, else why not (a string)."""
    python, real = d.get("python"), d.get("python_realpath")
    if not python or not os.path.exists(python):
        return "its python %s is gone (its virtualenv was removed)" % (python or "(none recorded)")
    if real and os.path.realpath(python) != real:
        return "its python %s now resolves to %s, not %s as recorded" % (python, os.path.realpath(python), real)
    for f in d.get("fingerprint_files") or []:
        path, want = f.get("path"), f.get("sha256")
        try:
            have = file_sha256(path)
        except (OSError, TypeError):
            have = None
        if have == want:
            continue
        copy = f.get("copy")
        text = None
        if copy:
            try:
                text = sglang_proc.read_file(run_dir, copy, limit=COPY_LIMIT + 1, raw=True)
            except (sglang_proc.UntrustedState, OSError) as e:
                return "%s changed since it was good, and its copy is not trusted: %s" % (path, e)
        if text is None:
            return "%s %s since it was good (sha256 %s..., recorded %s...) and no copy of it is kept" % (
                path, "is gone" if have is None else "changed", (have or "-")[:12], (want or "-")[:12])
        if hashlib.sha256(text).hexdigest() != f.get("copy_sha256", want):
            return "%s changed since it was good, and its kept copy %s no longer matches the record" % (path, copy)
        try:
            unredact(text, secrets)
        except GoodRecordError as e:
            return "%s changed since it was good, and %s" % (path, e)
        # where it would be put back: a directory nobody less privileged can write or swap (restore's own check, made
        # here too, so that a deployment that could not be put back is never chosen: for a group, on no node)
        try:
            os.close(_open_dir_of(path, "%s changed since it was good, and cannot be put back" % path)[0])
        except GoodRecordError as e:
            return str(e)
    return None


def assess(run_dir, name, failed_fingerprint, secrets=()):
    """Each good deployment other than ``failed_fingerprint``, newest first, with why it is not intact (None when it
    is): ``[(deployment, why_not)]``, each looked at once (its files hashed, its copies and directories checked) for
    both :func:`candidates` and :func:`choose`."""
    return [(d, why_not_intact(run_dir, d, secrets)) for d in read_good(run_dir, name)
            if d.get("fingerprint") != failed_fingerprint]


def choose(run_dir, name, failed_fingerprint, secrets=(), group=None, assessed=None):
    """(deployment, why_not): the newest good deployment other than ``failed_fingerprint`` whose inputs are intact
    (why_not None), else (None, why none can be: each one's reason). ``group``: only that generation of a multi-node
    server (its ``group`` as recorded). ``assessed``: :func:`assess`'s list when the caller has it already."""
    reasons = []
    for d, why in assess(run_dir, name, failed_fingerprint, secrets) if assessed is None else assessed:
        if group is not None and d.get("group") != group:
            continue
        if why is None:
            return d, None
        reasons.append("%s: %s" % (describe(d), why))
    if not reasons:
        return None, ("no good deployment of %s is recorded in %s other than the one that failed (a start records "
                      "one when it passes its smoke test)" % (name, run_dir))
    return None, "no recorded good deployment is intact: " + "; ".join(reasons)


def candidates(run_dir, name, failed_fingerprint, secrets=(), assessed=None):
    """Each good deployment other than ``failed_fingerprint``, newest first, as a node reports it: its fingerprint,
    description, group (None for a single node's), recorded_at, and whether it is intact (``why_not`` when not).
    ``assessed``: :func:`assess`'s list when the caller has it already."""
    return [{"fingerprint": d.get("fingerprint"), "description": describe(d), "group": d.get("group"),
             "recorded_at": d.get("recorded_at"), "intact": why is None, "why_not": why}
            for d, why in (assess(run_dir, name, failed_fingerprint, secrets) if assessed is None else assessed)]


def restore(run_dir, d, secrets=()):
    """Put back each fingerprint file of ``d`` that changed, from its copy (owner and mode as recorded). Returns
    the paths restored. Call only after :func:`why_not_intact` said None.

    A file is written only into a directory that nobody less privileged can write or swap (checked as the run dir
    is: :func:`sglang_proc.open_trusted_dir`); the look at the file there, the write and the rename are relative to
    that directory's descriptor, and a symlink at the file's path is never followed. Every changed file's directory
    and copy are checked before anything is written: when one is not trusted (or its path is a symlink or not a
    regular file), nothing is restored, and :class:`GoodRecordError` says which file, why and what to fix."""
    targets = []
    try:
        for f in d.get("fingerprint_files") or []:
            path = f["path"]
            try:
                if file_sha256(path) == f["sha256"]:
                    continue  # as recorded: nothing is written there
            except (OSError, TypeError):
                pass
            dir_fd, base = _open_dir_of(path)
            targets.append((f, dir_fd, base))
        writes = []
        for f, dir_fd, base in targets:
            if _sha256_at(dir_fd, base, f["path"]) == f["sha256"]:
                continue
            data = sglang_proc.read_file(run_dir, f["copy"], limit=COPY_LIMIT + 1, raw=True)
            if data is None or hashlib.sha256(data).hexdigest() != f.get("copy_sha256", f["sha256"]):
                raise GoodRecordError("the kept copy %s of %s no longer matches the record: nothing was restored"
                                      % (f["copy"], f["path"]))
            writes.append((f, dir_fd, base, unredact(data, secrets)))
        for f, dir_fd, base, data in writes:
            _put_back(dir_fd, base, data, f)
        return [f["path"] for f, _fd, _base, _data in writes]
    finally:
        for _f, dir_fd, _base in targets:
            os.close(dir_fd)


def _refused(path):
    return "%s was not restored, nor any other file of this rollback (left as they are)" % path


def _open_dir_of(path, refused=None):
    """(descriptor of the directory of ``path``, the file's name in it), the directory checked as the run dir is.
    GoodRecordError, naming the fix, when someone less privileged could write or swap it (its text begins with
    ``refused``, by default that nothing was restored)."""
    refused = refused or _refused(path)
    directory, base = os.path.split(path)
    if not os.path.isabs(path) or not base:
        raise GoodRecordError("%s: the recorded path is not the absolute path of a file" % refused)
    fix = ("the rollback writes a file back only where nobody less privileged can swap it: keep it in a directory "
           "that is root's and not writable by its group or others, with every directory above it likewise, on a "
           "path without symlinks (group-readable is fine, e.g. root:sglang 0750), then run again")
    try:
        dir_fd = sglang_proc.open_trusted_dir(directory, "directory", fix, "restore %s by hand" % path,
                                              "chown root %s; chmod go-w %s" % (directory, directory))
    except sglang_proc.UntrustedState as e:
        raise GoodRecordError("%s: %s" % (refused, e))
    except OSError as e:
        raise GoodRecordError("%s: its directory %s cannot be opened: %s" % (refused, directory, e))
    return dir_fd, base


def _sha256_at(dir_fd, base, path):
    """SHA-256 of the regular file ``base`` in the opened directory, None when it is gone; never through a symlink
    (GoodRecordError, as for anything but a regular file)."""
    try:
        fd = os.open(base, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ENOENT:
            return None
        if e.errno == errno.ELOOP:
            raise GoodRecordError("%s: it is a symlink (to %s), and the rollback never writes through one: put the "
                                  "file itself there, or restore it by hand"
                                  % (_refused(path), os.readlink(base, dir_fd=dir_fd)))
        raise GoodRecordError("%s: %s" % (_refused(path), e))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise GoodRecordError("%s: it is not a regular file: remove it, or restore it by hand" % _refused(path))
        digest = hashlib.sha256()
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
        return digest.hexdigest()


def _put_back(dir_fd, base, data, f):
    """Write ``data`` as ``base`` in the opened directory: a new file under a temporary name (O_EXCL, never through
    a symlink) with the recorded owner and mode, renamed over ``base`` within that directory."""
    tmp = ".%s.eagle-rollback" % base
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
        os.fchown(fh.fileno(), f["uid"], f["gid"])
        os.fchmod(fh.fileno(), f["mode"])
    os.rename(tmp, base, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    os.fsync(dir_fd)


def judge(run_dir, name, state, verdict, reason, wall):
    """Record ``verdict`` ("good" or "failed") with ``reason`` on the running server ``state``."""
    text = json.dumps({"run_token": state.get("run_token"), "fingerprint": state.get("fingerprint"),
                       "pid": state.get("pid"), "verdict": verdict, "reason": reason, "at": wall},
                      indent=1, sort_keys=True)
    sglang_proc.write_files(run_dir, ((JUDGED_FILE % name, text),), mode=0o600)


def judged_failed(run_dir, name, state):
    """The reason recorded when the running server ``state`` was judged failed (its smoke test failed while it
    still answered), else None. An untrusted or unreadable judgement counts as none (it only ever adds a restart)."""
    if not state or not state.get("run_token"):
        return None
    try:
        j = sglang_proc.read_json(run_dir, JUDGED_FILE % name)
    except (sglang_proc.UntrustedState, OSError):
        return None
    if not j or j.get("verdict") != "failed":
        return None
    if j.get("run_token") != state.get("run_token") or j.get("fingerprint") != state.get("fingerprint"):
        return None
    return str(j.get("reason") or "failed")[:500]
