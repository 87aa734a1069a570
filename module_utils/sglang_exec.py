# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Can this user run this program? The checks ``wait_for_model`` makes before it stops anything: argv[0] resolved as
exec resolves it, every directory on the way enterable, the file executable on a mount without ``noexec``, and a
script's ``#!`` interpreters (``env -S`` included) checked the same way, 4 levels deep.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat


def resolve_exec(argv0, env_path, cwd):
    """The file exec would run for argv[0] (PATH lookup when it has no slash), or None."""
    if "/" in argv0:
        path = argv0 if os.path.isabs(argv0) else os.path.join(cwd or os.getcwd(), argv0)
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(argv0, path=env_path)


def may_access(st, uid, gids, bits):
    """Whether uid (with gids) has ``bits`` (4 read, 1 execute) on a file with stat ``st``."""
    if uid == 0:
        return bits != 1 or bool(st.st_mode & 0o111)
    if st.st_uid == uid:
        return bool(st.st_mode & (bits << 6))
    if st.st_gid in gids:
        return bool(st.st_mode & (bits << 3))
    return bool(st.st_mode & bits)


def walk_as(path, ids):
    """(real path, None) of the absolute ``path`` resolved the way the kernel resolves it for a user with
    ``ids`` ((uid, gids)): symlinks followed, and every directory searched on the way must grant that user
    x. (None, what stops it) otherwise."""
    uid, gids = ids
    todo = [c for c in reversed(path.split("/")) if c]
    cur, links = "/", 0
    while todo:
        comp = todo.pop()
        try:
            st = os.stat(cur)
        except OSError as e:
            return None, "%s: %s" % (cur, e.strerror or e)
        if not stat.S_ISDIR(st.st_mode):
            return None, "%s is not a directory" % cur
        if uid != 0 and not may_access(st, uid, gids, 1):
            return None, "directory %s cannot be entered (no x permission for it)" % cur
        if comp == ".":
            continue
        if comp == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, comp)
        try:
            lst = os.lstat(nxt)
        except OSError as e:
            return None, "%s does not exist" % nxt if e.errno == errno.ENOENT else "%s: %s" % (nxt, e.strerror or e)
        if stat.S_ISLNK(lst.st_mode):
            links += 1
            if links > 40:
                return None, "%s: too many levels of symbolic links" % path
            target = os.readlink(nxt)
            if target.startswith("/"):
                cur = "/"
            todo.extend(reversed([c for c in target.split("/") if c]))
            continue
        cur = nxt
    return cur, None


def which_as(name, env_path, cwd, ids):
    """The first ``<dir>/<name>`` of ``env_path`` that the user with ``ids`` can exec (a regular file with x
    for them, reachable), the way execvp searches; None when there is none."""
    for d in env_path.split(os.pathsep):
        candidate = os.path.join(cwd, d or ".", name)
        real, why = walk_as(candidate, ids)
        if why is None:
            st = os.stat(real)
            if stat.S_ISREG(st.st_mode) and may_access(st, ids[0], ids[1], 1):
                return candidate
    return None


def _binfmt_misc_handlers():
    try:
        return [e for e in os.listdir("/proc/sys/fs/binfmt_misc") if e not in ("register", "status")]
    except OSError:
        return []


# Interpreters that prove_it_runs() starts once with ``-c ''`` (Python, POSIX shells); seconds it may take.
INTERPRETER_RX = re.compile(r"\A(python[0-9.]*|sh|bash|dash|ksh|zsh)\Z")
PROBE_TIMEOUT = 60
MAX_INTERPRETERS = 4  # nested #! interpreters the kernel follows


def exec_problem(path, ids, env_path, cwd, depth=0):
    """(None, program) when a user with ``ids`` can exec the absolute ``path``: every directory on the way
    enterable, a regular file with x for them on a file system not mounted noexec, and an ELF program or a
    script (readable by them) whose ``#!`` interpreter passes the same checks (``/usr/bin/env NAME``: NAME
    found on ``env_path`` as execvp finds it), 4 levels deep. ``program`` is what runs in the end, as named
    (argv[0] or the last interpreter). (what stops it, None) otherwise."""
    uid, gids = ids
    real, why = walk_as(path, ids)
    if why:
        return why, None
    st = os.stat(real)
    if not stat.S_ISREG(st.st_mode):
        return "%s is not a regular file" % real, None
    if not may_access(st, uid, gids, 1):
        return "%s is not executable by the user (mode %04o, owner uid %d)" % (real, stat.S_IMODE(st.st_mode), st.st_uid), None
    if os.statvfs(real).f_flag & getattr(os, "ST_NOEXEC", 8):
        return "%s is on a file system mounted noexec" % real, None
    try:
        with open(real, "rb") as fh:
            head = fh.read(256)
    except (IOError, OSError) as e:
        return "%s cannot be read: %s" % (real, e), None
    if not head.startswith(b"#!"):
        if head[:4] != b"\x7fELF" and not _binfmt_misc_handlers():
            return "%s is neither a program (ELF) nor a script with a #! line" % real, None
        return None, path
    if not may_access(st, uid, gids, 4):
        return "script %s is not readable by the user (its interpreter has to read it)" % real, None
    if depth >= MAX_INTERPRETERS:
        return "%s: more than %d nested #! interpreters" % (real, MAX_INTERPRETERS), None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return "%s has an empty #! line" % real, None
    interp = os.path.join(cwd, words[0])
    why, program = exec_problem(interp, ids, env_path, cwd, depth + 1)
    if why:
        return "its #! interpreter %s cannot be run: %s" % (words[0], why), None
    if os.path.basename(interp) == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        if names:
            found = which_as(names[0], env_path, cwd, ids) if "/" not in names[0] else os.path.join(cwd, names[0])
            if found is None:
                return "its #! line runs 'env %s', and no %s executable by the user is on PATH=%s" % (
                    names[0], names[0], env_path), None
            why, program = exec_problem(found, ids, env_path, cwd, depth + 1)
            if why:
                return "its #! line runs 'env %s' (%s), which cannot be run: %s" % (names[0], found, why), None
    return None, program
