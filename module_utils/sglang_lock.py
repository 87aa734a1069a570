# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's per-deployment lock: ``<run_dir>/<name>.lock`` (flock), held for a whole run.

Module side only. Check mode takes it shared and only when the file exists (it creates nothing).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time

from ansible.module_utils import sglang_proc
from ansible.module_utils.sglang_input_checks import WaitError


class RunLock(object):
    """The held lock of one run: :meth:`lock` takes it (and reports how long it waited), :meth:`unlock` lets it go
    (also when it was never taken)."""

    def __init__(self):
        self.lock_fd = None  # the held lock file

    def lock(self, s, host):
        """Hold ``<run_dir>/<name>.lock`` (flock) for a wait_for_model run (its settings ``s``, its host port for
        the clock, sleep, flock and wall time); wait up to lock_timeout. Returns the report: ``lock_wait``."""
        return self.take(s.run_dir, s.p["name"], s.p["lock_timeout"], s.p["state"], s.check, host.clock,
                         host.sleep, host.locker, host.wall)

    def take(self, run_dir, name, lock_timeout, state, check=False, clock=time.monotonic, sleep=time.sleep,
             locker=fcntl.flock, wall=time.time):
        """Hold ``<run_dir>/<name>.lock`` (flock) for the whole operation, written as held by ``state``; wait up to
        ``lock_timeout`` seconds. Returns the report: ``lock_wait``.

        Check mode takes it shared and only when the file exists (it creates nothing)."""
        fname = "%s.lock" % name
        try:
            dir_fd = sglang_proc.open_run_dir(run_dir)
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))
        try:
            flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (0 if check else os.O_CREAT)
            fd = os.open(fname, flags, 0o644, dir_fd=dir_fd)
        except OSError as e:
            if e.errno == errno.ENOENT and check:
                return {}
            raise WaitError("cannot open the lock file %s/%s: %s" % (run_dir, fname, e.strerror or e))
        finally:
            os.close(dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            os.close(fd)
            raise WaitError("lock file %s/%s is not a root-owned file writable only by its owner: remove it" % (run_dir, fname))
        mode = fcntl.LOCK_SH if check else fcntl.LOCK_EX
        t0 = clock()
        while True:
            try:
                locker(fd, mode | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    os.close(fd)
                    raise
            if clock() - t0 >= lock_timeout:
                holder = {}
                try:
                    holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
                except ValueError:
                    pass
                os.close(fd)
                since = holder.get("since")
                raise WaitError(
                    "another run holds the lock for %s since %s (pid %s, state %s); waited %g s (lock_timeout). Nothing "
                    "was stopped or launched: wait for it to finish, or stop that run." % (
                        name, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float))
                        else "an unknown time", holder.get("pid", "?"), holder.get("state", "?"), lock_timeout))
            sleep(min(0.2, max(lock_timeout, 0.01)))
        self.lock_fd = fd
        report = {}
        report["lock_wait"] = round(clock() - t0, 3)
        if not check:
            text = json.dumps({"pid": os.getpid(), "since": wall(), "state": state}).encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, text + b"\n", 0)
        return report

    def unlock(self):
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # closing the descriptor releases the flock
            self.lock_fd = None
