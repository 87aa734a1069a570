# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The programs eagle-deploy leaves running on a host, installed by a role and run by a module (standard library
only): the supervisor (role sglang_server installs it, wait_for_model runs it, the systemd unit's ExecStart) and the
model fetch program (role sglang_model installs it, sglang_model runs it).

An installed program is a directory ``D``, root's (files 0644, directories 0755), which the role copies from its
``files/`` (roles/sglang_server/files/supervisor, roles/sglang_model/files/fetch)::

    D/__main__.py                 the launcher: runs eagle_deploy.<its main module>.main()
    D/eagle_deploy/__init__.py
    D/eagle_deploy/sglang_*.py    the very files of module_utils (links in the role's files/: one source)

and run as ``python -I -B D ARGS``: Python puts ``D`` (only) first on sys.path, ``-I`` keeps the environment, the
user's site and the working directory out, ``-B`` writes no bytecode next to it. The files import one another
relatively only (``from . import sglang_proc``), so the same files are ``ansible.module_utils.sglang_*`` in a module
and ``eagle_deploy.sglang_*`` in the program: one source, imported one way each.

A module runs a program only where nobody less privileged than itself could have written any of it
(:func:`check`), and tells whether the installed one is this eagle-deploy's (:func:`drift`, against the copies in its
own payload): it never writes one itself.
"""

from __future__ import annotations

import errno
import os
import stat

from . import sglang_proc

PACKAGE = "eagle_deploy"
LAUNCHER = "__main__.py"
# The module_utils each program imports (its main module first), as the role's files/ link them.
SUPERVISOR = ("sglang_supervisor", "sglang_contract", "sglang_verdict", "sglang_log", "sglang_proc", "sglang_redact",
              "sglang_progress", "sglang_probe")
FETCH = ("sglang_hub_fetch", "sglang_weights", "sglang_proc")
SUPERVISOR_DIR = "supervisor"  # wait_for_model's default program_dir: <run_dir>/supervisor
FETCH_DIR = "fetch-program"  # sglang_model's default program_dir: <state_dir>/fetch-program
MAX_ENTRIES = 256  # entries of an installed program looked at (it has a dozen)


class ProgramError(Exception):
    """The program is missing, or someone less privileged than this module could have written it."""


def argv(python, directory, *args):
    """How a module (and the unit's ExecStart) runs the program installed in ``directory``."""
    return [python, "-I", "-B", directory] + list(args)


def _owner_and_mode(st, path):
    if st.st_uid not in (0, os.geteuid()):
        return "%s is owned by uid %d, not by root or uid %d (the user running this module)" % (
            path, st.st_uid, os.geteuid())
    if st.st_mode & 0o022:
        return "%s is writable by its group or by others (mode %04o)" % (path, stat.S_IMODE(st.st_mode))
    return None


def _open_trusted(directory, what, fix):
    """A descriptor of ``directory``, opened from ``/`` one component at a time without following a symlink, each
    directory on the way root's (or this user's) and writable by no one else unless sticky and root's (``/tmp``)."""
    parts = [c for c in directory.split("/") if c not in ("", ".")]
    if ".." in parts:
        raise ProgramError("%s: program directory %s contains '..': give its real path" % (what, directory))
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    cur = "/"
    try:
        for comp in parts:
            st = os.fstat(fd)
            if st.st_uid not in (0, os.geteuid()) or (st.st_mode & 0o022 and not (
                    st.st_mode & stat.S_ISVTX and st.st_uid == 0)):
                raise ProgramError("%s in %s is not trusted: directory %s above it is owned by uid %d, mode %04o "
                                   "(root's or uid %d's, writable by no one else, or sticky and root's): %s" % (
                                       what, directory, cur, st.st_uid, stat.S_IMODE(st.st_mode), os.geteuid(), fix))
            try:
                nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ENOENT, errno.ENOTDIR) and not os.path.lexists(os.path.join(cur, comp)):
                    raise ProgramError("%s is not installed in %s: %s" % (what, directory, fix))
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ProgramError("%s in %s is not trusted: %s is a symlink or no directory: %s" % (
                        what, directory, os.path.join(cur, comp), fix))
                raise
            os.close(fd)
            fd, cur = nfd, os.path.join(cur, comp)
        reason = _owner_and_mode(os.fstat(fd), directory)
        if reason:
            raise ProgramError("%s is not trusted: %s: %s" % (what, reason, fix))
        return fd
    except BaseException:
        os.close(fd)
        raise


def _check_below(dir_fd, path, fix, budget):
    """Every entry below the opened directory ``path``: a regular file or a directory, no symlink, each root's (or
    this user's) and writable by no one else."""
    for name in sorted(os.listdir(dir_fd)):
        budget[0] -= 1
        if budget[0] < 0:
            raise ProgramError("%s holds more than %d entries: not a program of eagle-deploy; %s" % (
                path, MAX_ENTRIES, fix))
        here = os.path.join(path, name)
        st = os.lstat(name, dir_fd=dir_fd)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise ProgramError("%s is %s, not a file or directory: %s" % (
                here, "a symlink" if stat.S_ISLNK(st.st_mode) else "a special file", fix))
        reason = _owner_and_mode(st, here)
        if reason:
            raise ProgramError("%s: %s" % (reason, fix))
        if stat.S_ISDIR(st.st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                if _owner_and_mode(os.fstat(fd), here):
                    raise ProgramError("%s changed while it was checked: %s" % (here, fix))
                _check_below(fd, here, fix, budget)
            finally:
                os.close(fd)


def check(directory, what, installer):
    """Refuse (ProgramError, naming the fix) to run the program in ``directory`` unless only root (or this module's
    user) could have written it: the directory and every directory above it (a sticky root-owned one such as /tmp
    excepted, as for the run dir), reached without a symlink, and everything in it (no symlink, no special file)
    root's or this user's and writable by no one else; its launcher there.
    ``what``: the program in words; ``installer``: what installs it (the role's task)."""
    fix = ("it is run only from a directory nobody less privileged than this module can write: install it with %s "
           "(root-owned, files 0644, directories 0755, on a path without symlinks through directories only root "
           "can write)" % installer)
    if not os.path.isabs(directory):
        raise ProgramError("%s: program directory %s is not an absolute path" % (what, directory))
    fd = _open_trusted(directory, what, fix)
    try:
        try:
            st = os.lstat(LAUNCHER, dir_fd=fd)
        except FileNotFoundError:
            raise ProgramError("%s is not installed in %s (no %s there): %s" % (what, directory, LAUNCHER, fix))
        if not stat.S_ISREG(st.st_mode):
            raise ProgramError("%s in %s is not trusted: its %s is not a regular file: %s" % (
                what, directory, LAUNCHER, fix))
        try:
            _check_below(fd, directory, fix, [MAX_ENTRIES])
        except ProgramError as e:
            raise ProgramError("%s in %s is not trusted: %s" % (what, directory, e))
    finally:
        os.close(fd)


def drift(directory, sources):
    """The files of the program in ``directory`` that differ from this eagle-deploy's (``sources``: {module name:
    bytes}, the copies in the calling module's payload), missing ones included; [] when it is this tree's program.
    Reads only; a file it cannot read counts as different."""
    out = []
    for name in sorted(sources):
        path = os.path.join(directory, PACKAGE, name + ".py")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                want = sources[name]  # read no more than one byte past it: a grown file differs, whatever its size
                same = stat.S_ISREG(os.fstat(fh.fileno()).st_mode) and fh.read(len(want) + 1) == want
        except OSError:
            same = False
        if not same:
            out.append(name + ".py")
    return out


def sources(modules):
    """{module name: source bytes} of the module_utils ``modules`` (imported objects), also from inside an AnsiballZ
    payload: what :func:`drift` compares an installed program with."""
    return dict((m.__name__.rsplit(".", 1)[-1], sglang_proc.module_source(m)) for m in modules)
