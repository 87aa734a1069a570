"""sglang_verdict.ProcView.children on a fake /proc (its raw reads replaced): which children count as alive."""
from __future__ import annotations

from ansible.module_utils import sglang_verdict


def stat(pid, state, flags=0x400000, start=111):
    """A /proc/<pid>/stat line: state, ppid, pgrp, session, tty_nr, tpgid, flags, ..., starttime (field 22)."""
    fields = [state, "4000", "4000", "4000", "0", "-1", str(flags)] + ["0"] * 12 + [str(start)]
    return ("%d (python3) %s 0 0\n" % (pid, " ".join(fields))).encode()


def fake_proc(monkeypatch, files):
    monkeypatch.setattr(sglang_verdict, "_read_bytes", lambda path: files.get(path))


def test_a_child_in_the_kernels_exit_counts_as_dead_before_it_is_a_zombie(monkeypatch):
    # A process that held much memory (a GPU context) spends a while in the kernel's exit, running, before it is a
    # zombie (its pidfd fires only then): PF_EXITING is already its death, and no process can undo or forge it.
    fake_proc(monkeypatch, {
        "/proc/4000/task/4000/children": b"4100 4101 4102 4103",
        "/proc/4100/stat": stat(4100, "S", start=7),
        "/proc/4101/stat": stat(4101, "R", flags=0x400000 | sglang_verdict.PF_EXITING),
        "/proc/4102/stat": stat(4102, "Z", flags=0x400000 | sglang_verdict.PF_EXITING),
        "/proc/4103/stat": stat(4103, "D", start=9),
    })
    assert sglang_verdict.ProcView().children(4000) == {4100: 7, 4103: 9}


def test_a_child_gone_between_the_two_reads_is_not_listed(monkeypatch):
    fake_proc(monkeypatch, {"/proc/4000/task/4000/children": b"4100"})
    assert sglang_verdict.ProcView().children(4000) == {}
