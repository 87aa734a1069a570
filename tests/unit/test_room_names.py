"""Rooms named for their job: no two module_utils files whose names differ only by a suffix (sglang_watch,
sglang_watcher and sglang_watched were three jobs), and none named like a module it is not (library/)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def stems(folder):
    return sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, folder)) if f.endswith(".py") and f != "__init__.py")


def clashes(names):
    """Pairs (a, b) where b is a with something added at its end."""
    return [(a, b) for a in names for b in names if a != b and b.startswith(a)]


def test_no_module_utils_name_is_another_with_a_suffix():
    assert clashes(stems("module_utils")) == []


def test_no_module_utils_name_is_a_module_name_with_or_without_a_suffix():
    utils, modules = stems("module_utils"), stems("library")
    assert [(m, u) for m in modules for u in utils if u.startswith(m) or m.startswith(u)] == []


def test_the_check_finds_a_suffix():
    assert clashes(["sglang_watch", "sglang_watcher", "sglang_proc", "sglang_probe"]) == [
        ("sglang_watch", "sglang_watcher")]
