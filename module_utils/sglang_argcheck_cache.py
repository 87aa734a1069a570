# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The argument check's verdict, kept: ``<cache_dir>/<name>.argcheck.json`` (standard library only).

``sglang_args_check`` imports SGLang's parser, and so torch, to check the server's arguments (27 s of a 36 s no-op
re-run on an H200 host). A passing verdict is kept in the deployment's trusted run dir, written atomically, 0600,
by the module's user (root), through :func:`sglang_proc.write_files`, and read through :func:`sglang_proc.read_file`,
which refuse a directory or a file that someone less privileged could have written (then the check runs fresh).

An entry holds the verdict and everything it was computed from:

- ``key``: the checker (the source of the module and of the module_utils it decides with, and the Python that runs
  it), the interpreter (its path, real path and the real file's identity, and its venv's ``pyvenv.cfg``), the SGLang
  found (version, dist-info and package dir, as :mod:`sglang_paths` finds them), a digest of each module option the
  verdict depends on (the model dirs and the config file's place, owner and mode are looked at fresh on every run),
  and, where a probe process imports SGLang, a digest of each environment variable that steers Python, SGLang, torch
  or CUDA in it (secrets left out: a name with TOKEN, SECRET, PASSW or KEY).
- ``files``, re-read on every look (no import, no process):
  ``sha256``: every file of the SGLang package the check read (the probe's imported ``sglang`` modules, the sources
  the ``ast`` method and the config rule read) and every other file the probe opened for reading (its content; over
  16 MiB its identity);
  ``stat``: every other module file the probe had imported and every file it had mapped (the standard library,
  torch, its shared objects), by identity;
  ``dirs``: every directory the probe listed or searched for an import (``sys.path``, package dirs), by its place,
  mode, owner and the names it holds (:func:`dir_identity`): a package installed or removed there (an entry added or
  removed) shows; a ``__pycache__`` that an import wrote there does not.
  A file's identity is its device, inode, size, mode, mtime and ctime (ns): writing a file or putting another in its
  place changes the ctime, which no program can set back.

:func:`look` uses the verdict only when every part of the key and every file is as recorded; :func:`keep` is called
only with a passing verdict. A look names the first difference it finds (``cache_miss``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat

from ansible.module_utils import sglang_proc

FORMAT = 2
SUFFIX = ".argcheck.json"
# Files read for the key up to this size are hashed; a bigger one (a shared object) is taken by its identity.
HASH_LIMIT = 16 << 20
# An entry is read whole up to this size (a probe that imported torch and transformers records some thousands of
# files, a few hundred KiB); a bigger one is not kept.
MAX_BYTES = 8 << 20
# What the kernel makes up as it is read: never part of a key.
VOLATILE = ("/proc/", "/sys/", "/dev/")
# Environment variables of the probe process that steer Python, SGLang, torch, CUDA, NCCL, Hugging Face.
ENV_PREFIXES = ("PYTHON", "SGLANG", "SGL_", "CUDA", "NVIDIA", "NCCL", "TORCH", "PYTORCH", "TRITON", "HF_",
                "HUGGINGFACE", "TRANSFORMERS", "FLASHINFER", "LD_", "OMP_", "MKL_")
ENV_NAMES = ("PATH", "HOME", "TMPDIR")
# ... but never a secret, not even as a digest (HF_TOKEN: the probe reads nothing from the hub it would not record).
ENV_SECRET = re.compile(r"TOKEN|SECRET|PASSW|KEY", re.I)

# Key parts in the order a look compares them, with the words of a miss.
KEY_PARTS = (
    ("format", "cache written by another eagle-deploy"),
    ("checker", "the checker changed (eagle-deploy's module, or the Python that runs it)"),
    ("python", "interpreter changed"),
    ("sglang_version", "sglang version changed"),
    ("sglang", "sglang install changed (dist-info or package dir)"),
    ("method", "method changed"),
    ("args", "args changed"),
    ("extra_args", "extra_args changed"),
    ("secret_args", "secret_args changed"),
    ("config_refused", "config_refused changed"),
    ("config_sha256", "config file content changed (config_file.sha256)"),
    ("sglang_root", "sglang_root changed"),
    ("allow_missing", "allow_missing changed"),
    ("timeout", "timeout changed"),
    ("environment_names", "environment names changed"),
    ("environment", None),
)

VERDICT_TYPES = {"method": str, "option_count": int, "values_checked": bool, "config_refused_args": list,
                 "config_argv": list}


def cache_file(name):
    return name + SUFFIX


def digest(value):
    """SHA-256 of a JSON value (keys sorted)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def identity(path):
    """A short digest of what ``stat`` says of ``path`` (device, inode, size, mode, mtime, ctime), or ``absent``."""
    try:
        st = os.stat(path)
    except OSError as e:
        return "absent" if e.errno in (errno.ENOENT, errno.ENOTDIR) else "error %d" % e.errno
    return digest([st.st_dev, st.st_ino, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns])[:16]


def dir_identity(path):
    """A short digest of a directory as an import sees it: device, inode, mode, owner, group and the names it holds
    (``__pycache__`` left out: Python writes bytecode there as it imports, which adds or removes no module), or
    ``absent``. Not its mtime: a bytecode cache written into it changes nothing an import finds."""
    try:
        st = os.stat(path)
        names = sorted(n for n in os.listdir(path) if n != "__pycache__") if stat.S_ISDIR(st.st_mode) else None
    except OSError as e:
        return "absent" if e.errno in (errno.ENOENT, errno.ENOTDIR) else "error %d" % e.errno
    return digest([st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid, names])[:16]


def content(path):
    """SHA-256 of a regular file's bytes (up to HASH_LIMIT), else ``id:<identity>`` or ``absent``. Decided on the
    opened descriptor (O_NONBLOCK: a FIFO put there cannot block the open), and never more than HASH_LIMIT bytes
    read: a path swapped for a device or a growing file costs nothing. Anything but a regular file is not opened."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "id:" + identity(path)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        return identity(path) if e.errno in (errno.ENOENT, errno.ENOTDIR) else "id:" + identity(path)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > HASH_LIMIT:
        os.close(fd)
        return "id:" + identity(path)
    with os.fdopen(fd, "rb") as handle:
        h = hashlib.sha256()
        left = HASH_LIMIT + 1
        for block in iter(lambda: handle.read(min(1 << 20, left)), b""):
            h.update(block)
            left -= len(block)
            if left <= 0:
                return "id:" + identity(path)
    return h.hexdigest()


def environment(environ=None):
    """Digest of each variable that steers the probe's import (never a value)."""
    environ = os.environ if environ is None else environ
    return dict((k, digest(v)[:16]) for k, v in environ.items()
                if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and not ENV_SECRET.search(k))


def volatile(path):
    return (not os.path.isabs(path) or path.startswith(VOLATILE) or path.rstrip("/") + "/" in VOLATILE
            or path.endswith(" (deleted)"))


def record(hashed=(), by_identity=(), dirs=()):
    """The ``files`` of an entry as they are now: content of ``hashed``, identity of ``by_identity`` (grouped by
    directory, it is the long list) and of ``dirs``."""
    grouped = {}
    for path in sorted(set(by_identity) - set(hashed)):
        head, tail = os.path.split(path)
        grouped.setdefault(head, {})[tail] = identity(path)
    return {"sha256": dict((p, content(p)) for p in sorted(set(hashed))), "stat": grouped,
            "dirs": dict((d, dir_identity(d)) for d in sorted(set(dirs)))}


def _moved(label, path, then, now):
    if now == "absent":
        return "%s is gone" % label(path)
    if then == "absent":
        return "%s appeared" % label(path)
    return "%s changed" % label(path)


def first_change(files, label=lambda p: p):
    """The first recorded file or directory that is not as recorded, in words; None when all are."""
    for path, then in files["dirs"].items():
        now = dir_identity(path)
        if now != then:
            return "directory " + _moved(label, path, then, now)
    for head, names in files["stat"].items():
        for tail, then in names.items():
            path = os.path.join(head, tail)
            now = identity(path)
            if now != then:
                return _moved(label, path, then, now)
    for path, then in files["sha256"].items():
        now = content(path)
        if now != then:
            return _moved(label, path, then, now)
    return None


def key_difference(then, now):
    """The first part of the key that differs, in words; None when none does."""
    for part, words in KEY_PARTS:
        if then.get(part) == now.get(part):
            continue
        if part == "environment":
            a, b = then.get(part) or {}, now.get(part) or {}
            names = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            return "environment changed: %s" % ", ".join(names)
        return words
    extra = sorted(set(then) ^ set(now))
    return "key changed: %s" % ", ".join(extra) if extra else None


def _valid_files(files):
    if not isinstance(files, dict) or set(files) != {"sha256", "stat", "dirs"}:
        return False
    grouped = list(files["stat"].values()) if isinstance(files["stat"], dict) else [None]
    flat = [files["sha256"], files["dirs"]] + grouped
    return all(isinstance(d, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in d.items())
               for d in flat)


def _valid_verdict(verdict):
    if not isinstance(verdict, dict) or verdict.get("passed") is not True:
        return False
    if any(not isinstance(verdict.get(k), t) for k, t in VERDICT_TYPES.items()):
        return False
    if verdict["method"] not in ("sglang_parser", "ast") or verdict["option_count"] < 1:
        return False
    if verdict.get("import_error") is not None and not isinstance(verdict["import_error"], str):
        return False
    unread = verdict.get("environment_unread", [])
    if not isinstance(unread, list):
        return False
    return all(isinstance(v, str) for v in verdict["config_refused_args"] + verdict["config_argv"] + unread)


def look(cache_dir, name, key, label=lambda p: p):
    """``(verdict, miss, warning)``: the kept verdict when the key and every recorded file match (miss None), else
    None and why (``warning`` when the cache is not trusted: it is not read, and not written either)."""
    try:
        text = sglang_proc.read_file(cache_dir, cache_file(name), MAX_BYTES + 1)
    except sglang_proc.UntrustedState as e:
        return None, "cache not trusted", "the kept argument check %s was not used: %s" % (
            os.path.join(cache_dir, cache_file(name)), e)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return None, "no cache dir (%s does not exist)" % cache_dir, None
        return None, "cache unreadable (%s)" % e, None
    if text is None:
        return None, "no cache", None
    try:
        entry = json.loads(text)
    except ValueError:
        return None, "cache unreadable (not JSON)", None
    if not (isinstance(entry, dict) and entry.get("format") == FORMAT and isinstance(entry.get("key"), dict)
            and _valid_files(entry.get("files")) and _valid_verdict(entry.get("verdict"))):
        return None, "cache unreadable (not an entry of this eagle-deploy)", None
    miss = key_difference(entry["key"], key) or first_change(entry["files"], label)
    if miss:
        return None, miss, None
    return entry["verdict"], None, None


def keep(cache_dir, name, key, files, verdict):
    """Write a passing verdict with its key and files; the reason it was not written, or None."""
    entry = {"format": FORMAT, "key": key, "files": files, "verdict": dict(verdict, passed=True)}
    text = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    if len(text.encode("utf-8")) > MAX_BYTES:
        return "the entry is %d bytes, more than the %d a look reads" % (len(text.encode("utf-8")), MAX_BYTES)
    try:
        sglang_proc.write_files(cache_dir, [(cache_file(name), text)], mode=0o600)
    except sglang_proc.UntrustedState as e:
        return str(e)
    except OSError as e:
        return "%s: %s" % (os.path.join(cache_dir, cache_file(name)), e)
    return None
