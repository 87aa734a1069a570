"""Unit tests for the sglang_info action plugin's payload cache (action_plugins/sglang_info.py): the AnsiballZ payload
of a module kept between runs under the SHA-256 of everything in it, used only from a directory of this user's alone,
never for other sources. Files in tmp_path only: no Ansible run, no process."""

from __future__ import annotations

import os

import pytest

from action_harness import REPO, load_plugin

plugin = load_plugin("sglang_info", "sglang_info_action_under_test")
NAME = "ansible.legacy.ansible.legacy.sglang_info-ZIP_DEFLATED-none"  # ansible-core's name for it in a run's cache


@pytest.fixture
def tree(tmp_path):
    """A module, a project module_utils dir, a cache dir and this run's ansiballz cache dir."""
    lib = tmp_path / "library"
    lib.mkdir()
    (lib / "sglang_info.py").write_text("from ansible.module_utils import sglang_a\n")
    mu = tmp_path / "module_utils"
    mu.mkdir()
    (mu / "sglang_a.py").write_text("A = 1\n")
    (mu / "sglang_b.py").write_text("B = 1\n")
    run = tmp_path / "run1" / "ansiballz_cache"
    return {"module": str(lib / "sglang_info.py"), "mu": str(mu), "cache": str(tmp_path / "home" / "ansiballz"),
            "run": str(run), "tmp": tmp_path}


def cache_for(tree, run=None):
    return plugin.PayloadCache(tree["module"], {}, cache_dir=tree["cache"], run_cache=run or tree["run"],
                               project_module_utils=tree["mu"])


def built(tree, run=None, data=b"payload-1"):
    """What ansible-core leaves in a run's cache after building the module's payload."""
    run = run or tree["run"]
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(run, NAME), "wb") as fh:
        fh.write(data)
    with open(os.path.join(run, NAME + ".lock"), "wb"):
        pass


def test_a_payload_built_in_one_run_is_put_where_the_next_run_looks(tree):
    first = cache_for(tree)
    assert first.restore() is False  # nothing kept yet: ansible-core builds it
    built(tree)
    first.keep()
    assert os.stat(tree["cache"]).st_mode & 0o777 == 0o700
    entries = os.listdir(tree["cache"])
    assert len(entries) == 1 and entries[0].endswith(plugin.SUFFIX)
    assert os.stat(os.path.join(tree["cache"], entries[0])).st_mode & 0o777 == 0o600
    run2 = str(tree["tmp"] / "run2" / "ansiballz_cache")
    second = cache_for(tree, run=run2)
    assert second.restore() is True
    with open(os.path.join(run2, NAME), "rb") as fh:
        assert fh.read() == b"payload-1"


@pytest.mark.parametrize("edit", [
    lambda t: open(os.path.join(t["mu"], "sglang_b.py"), "a").write("# edited\n"),  # a file the module may import
    lambda t: open(os.path.join(t["mu"], "sglang_c.py"), "w").write("C = 1\n"),  # a new one
    lambda t: open(t["module"], "a").write("# edited\n"),  # the module itself
])
def test_a_payload_of_other_sources_is_never_used(tree, edit):
    cache = cache_for(tree)
    built(tree)
    cache.keep()
    edit(tree)
    run2 = str(tree["tmp"] / "run2" / "ansiballz_cache")
    assert cache_for(tree, run=run2).restore() is False
    assert not os.path.exists(os.path.join(run2, NAME))


def test_the_key_covers_ansible_cores_version_files_compression_and_extensions(tree):
    core = tree["tmp"] / "core_mu"
    core.mkdir()
    (core / "basic.py").write_text("x = 1\n")
    args = [tree["module"], tree["mu"], str(core), "2.19.14", "ZIP_DEFLATED", []]
    key = plugin.payload_key(*args)
    assert key == plugin.payload_key(*args)
    for i, other in ((3, "2.19.15"), (4, "ZIP_STORED"), (5, ["debugger"])):
        changed = list(args)
        changed[i] = other
        assert plugin.payload_key(*changed) != key
    (core / "basic.py").write_text("x = 22\n")
    assert plugin.payload_key(*args) != key


def test_a_cache_dir_others_can_write_or_that_is_a_link_is_not_used(tree):
    os.makedirs(tree["cache"], mode=0o700)
    os.chmod(tree["cache"], 0o777)
    assert cache_for(tree).entry is None
    os.chmod(tree["cache"], 0o700)
    os.rename(tree["cache"], tree["cache"] + ".real")
    os.symlink(tree["cache"] + ".real", tree["cache"])
    assert cache_for(tree).entry is None


def test_an_entry_others_can_write_is_not_used(tree):
    cache = cache_for(tree)
    built(tree)
    cache.keep()
    os.chmod(cache.entry, 0o666)
    run2 = str(tree["tmp"] / "run2" / "ansiballz_cache")
    assert cache_for(tree, run=run2).restore() is False
    assert not os.path.exists(run2) or os.listdir(run2) == []


def test_an_entry_naming_a_path_outside_the_runs_cache_is_not_used(tree):
    cache = cache_for(tree)
    with open(cache.entry, "wb") as fh:
        fh.write(b"../../evil\npayload")
    os.chmod(cache.entry, 0o600)
    assert cache.restore() is False
    assert not os.path.exists(str(tree["tmp"] / "evil"))


def test_a_run_that_built_nothing_recognisable_keeps_nothing(tree):
    cache = cache_for(tree)
    os.makedirs(tree["run"])
    for name in ("ansible.legacy.other-ZIP_DEFLATED-none", NAME + "-part"):
        with open(os.path.join(tree["run"], name), "wb") as fh:
            fh.write(b"x")
    cache.keep()
    assert os.listdir(tree["cache"]) == []


def test_only_the_newest_entries_are_kept(tree):
    os.makedirs(tree["cache"], mode=0o700)
    for i in range(plugin.KEEP + 3):
        path = os.path.join(tree["cache"], "%064d%s" % (i, plugin.SUFFIX))
        with open(path, "wb") as fh:
            fh.write(b"x")
        os.utime(path, ns=(i * 10 ** 9, i * 10 ** 9))
    plugin.prune(tree["cache"])
    left = sorted(os.listdir(tree["cache"]))
    assert len(left) == plugin.KEEP and left[0] == "%064d%s" % (3, plugin.SUFFIX)


def test_the_project_module_utils_are_found_next_to_the_plugins_dir():
    assert plugin.PROJECT_MODULE_UTILS == os.path.join(REPO, "module_utils")


def test_an_entry_gone_while_it_is_put_back_is_no_failure(tree, monkeypatch):
    cache = cache_for(tree)
    built(tree)
    cache.keep()

    def gone(path, *args, **kwargs):
        raise FileNotFoundError(2, "pruned by another run", path)
    monkeypatch.setattr(plugin.os, "utime", gone)
    run2 = str(tree["tmp"] / "run2" / "ansiballz_cache")
    assert cache_for(tree, run=run2).restore() is False  # as without the cache: ansible-core builds or reads it


def test_pruning_skips_what_another_run_removed_meanwhile(tree):
    os.makedirs(tree["cache"], mode=0o700)
    os.symlink(os.path.join(tree["cache"], "nowhere"), os.path.join(tree["cache"], "%064d%s" % (0, plugin.SUFFIX)))
    for i in range(1, plugin.KEEP + 2):
        with open(os.path.join(tree["cache"], "%064d%s" % (i, plugin.SUFFIX)), "wb") as fh:
            fh.write(b"x")
    plugin.prune(tree["cache"])
    assert len([n for n in os.listdir(tree["cache"]) if os.path.exists(os.path.join(tree["cache"], n))]) == plugin.KEEP
