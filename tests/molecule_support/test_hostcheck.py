"""Unit tests of the pure helpers the molecule scenarios' testinfra tests rely on."""

from __future__ import annotations

import pytest

from tests.molecule_support import hostcheck

PATCHED = '''
class EAGLEWorkerV2(BaseWorker):
    def __init__(self, server_args):
        """Docstring."""
        # BEGIN eagle-deploy early-init patch for EAGLEWorkerV2.__init__ (managed by Ansible)
        self.spec_disable_batch_threshold = 0
        # END eagle-deploy early-init patch for EAGLEWorkerV2.__init__ (managed by Ansible)
        super().__init__(server_args)
        self.spec_disable_batch_threshold = server_args.threshold
'''

UNPATCHED = '''
class EAGLEWorkerV2(BaseWorker):
    def __init__(self, server_args):
        super().__init__(server_args)
        self.spec_disable_batch_threshold = 0
'''


def proc(pid, ppid, sid):
    return {"pid": pid, "ppid": ppid, "sid": sid, "argv": [], "state": "S"}


def test_early_init_statements_skip_the_docstring_and_start_with_the_patch():
    body = hostcheck.early_init_statements(PATCHED)
    assert hostcheck.self_assignment(body[0]) == ("spec_disable_batch_threshold", 0)
    assert hostcheck.self_assignment(body[1]) is None


def test_unpatched_init_does_not_start_with_the_assignment():
    body = hostcheck.early_init_statements(UNPATCHED)
    assert hostcheck.self_assignment(body[0]) is None


def test_missing_class_is_an_error():
    with pytest.raises(AssertionError):
        hostcheck.early_init_statements("class Other:\n    pass\n")


def test_non_literal_assignment_is_reported_as_its_dump():
    body = hostcheck.early_init_statements(PATCHED)
    name, value = hostcheck.self_assignment(body[-1])
    assert name == "spec_disable_batch_threshold"
    assert isinstance(value, str) and "server_args" in value


def test_server_tree_is_leader_session_and_descendants():
    procs = [
        proc(1, 0, 1),
        proc(100, 1, 100),      # leader
        proc(101, 100, 100),    # scheduler
        proc(102, 100, 100),    # detokenizer
        proc(150, 101, 150),    # child that made its own session: still a descendant
        proc(151, 150, 150),
        proc(200, 1, 100),      # reparented to init, same session
        proc(300, 1, 300),      # unrelated
    ]
    assert sorted(p["pid"] for p in hostcheck.server_tree(procs, 100)) == [100, 101, 102, 150, 151, 200]
