# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of the ``sglang_info`` module: the one module call, its AnsiballZ payload kept between runs.

ansible-core builds a Python module's payload (the module and every module_utils file it imports, each found by
parsing the files that import it) once per run. The play's one look imports most of this project's module_utils (it
asks wait_for_model's own code whether the server would be kept), and building its payload costs about as much as
the rest of a re-run that changes nothing. This plugin keeps that payload in the controller user's
``~/.ansible/eagle-deploy/ansiballz/`` (a directory only that user can read or write), keyed by the SHA-256 of
everything that goes into it: ansible-core's version, the module's path and source, the source of every file of the
project's module_utils, the path, size and mtime of every file of ansible-core's module_utils, the compression and the
payload extensions (debugger, coverage). Before the module call, a payload kept under the same key is put where
ansible-core looks for this run's; after a call that built it, it is kept (the newest KEEP entries). A payload of
other sources is never used. When anything is not as this plugin expects (another ansible-core, a directory that is
not the user's own or that others can write), the call is made as without it. The module call itself (arguments,
check mode, result) is the module's alone.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat

from ansible import constants as C
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

display = Display()

CACHE_DIR = os.path.join("~", ".ansible", "eagle-deploy", "ansiballz")
# The project's module_utils: module_utils/ next to action_plugins/ here, plugins/module_utils/ next to
# plugins/action/ in the collection.
PROJECT_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
KEEP = 16  # entries kept (one per module source seen)
SUFFIX = ".payload"


def _sha256_file(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _tree_stats(root):
    """[(relative path, size, mtime_ns)] of every file under ``root``, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            out.append((os.path.relpath(path, root), st.st_size, st.st_mtime_ns))
    return out


def payload_key(module_path, project_module_utils, core_module_utils, version, compression, extensions):
    """The SHA-256 of everything a module's payload is built from (see the module docstring)."""
    ours = {}
    for name in sorted(os.listdir(project_module_utils)):
        if name.endswith(".py"):
            ours[name] = _sha256_file(os.path.join(project_module_utils, name))
    material = {"ansible": version, "module": [module_path, _sha256_file(module_path)], "module_utils": ours,
                "core_module_utils": _tree_stats(core_module_utils), "compression": compression,
                "extensions": list(extensions)}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode("utf-8")).hexdigest()


def own_dir(path, create=False):
    """``path`` when it is a directory (not a link) of this user's that no one else can read or write, else None;
    ``create``: made so when missing (its parents too, 0700)."""
    if create:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError:
            return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return path


def read_own_file(path):
    """The bytes of ``path`` when it is a regular file (not a link) of this user's that others cannot write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        return fh.read()


def write_atomic(path, data, mode=0o600):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def prune(cache, keep=KEEP):
    """The newest ``keep`` entries stay (another run may prune at the same time: what is gone is gone)."""
    entries = []
    for entry in os.scandir(cache):
        if entry.name.endswith(SUFFIX):
            try:
                entries.append((entry.stat().st_mtime_ns, entry.path))
            except OSError:
                continue
    for dummy, path in sorted(entries, reverse=True)[keep:]:
        try:
            os.unlink(path)
        except OSError:
            pass


class PayloadCache(object):
    """The kept payload of one module (``module_path``) for this run: ``restore()`` before the module call,
    ``keep()`` after it. Both do nothing (and say why at -vvv) where the key cannot be made."""

    def __init__(self, module_path, task_vars, cache_dir=CACHE_DIR, run_cache=None, project_module_utils=None):
        self.entry = None
        self.run_cache = run_cache or os.path.join(C.DEFAULT_LOCAL_TMP, "ansiballz_cache")
        self.leaf = os.path.splitext(os.path.basename(module_path))[0]
        try:
            from ansible.module_utils import basic
            from ansible.release import __version__
            from ansible._internal._ansiballz import _builder  # ansible-core 2.19: the payload's extensions

            extensions = _builder.ExtensionManager.create(task_vars=task_vars).extension_names
            key = payload_key(module_path, project_module_utils or PROJECT_MODULE_UTILS,
                              os.path.dirname(basic.__file__), __version__,
                              C.config.get_config_value("DEFAULT_MODULE_COMPRESSION", variables=task_vars), extensions)
        # Any surprise (another ansible-core): the call as without the cache.
        except Exception as exc:  # pylint: disable=broad-except
            display.vvv("sglang_info: AnsiballZ payload not kept between runs: %s" % exc)
            return
        cache = own_dir(os.path.expanduser(cache_dir), create=True)
        if cache is None:
            display.vvv("sglang_info: %s is not a directory of this user's alone: payload not kept" % cache_dir)
            return
        self.entry = os.path.join(cache, key + SUFFIX)
        self.cache = cache

    def restore(self):
        """A payload kept under this key, put where ansible-core looks for this run's: True when it was. Never a
        failure: another run's prune, a full disk, ... and ansible-core builds the payload as without the cache."""
        if self.entry is None:
            return False
        try:
            return self._restore()
        except OSError as exc:
            display.vvv("sglang_info: kept payload not used: %s" % exc)
            return False

    def _restore(self):
        data = read_own_file(self.entry)
        if data is None:
            return False
        name, dummy, payload = data.partition(b"\n")
        name = name.decode("utf-8", "replace")
        if not name or os.sep in name or name.startswith("."):
            return False
        target = os.path.join(self.run_cache, name)
        if os.path.exists(target):
            return True
        os.makedirs(self.run_cache, mode=0o700, exist_ok=True)
        try:
            write_atomic(target, payload)
        except FileExistsError:
            pass
        os.utime(self.entry)  # the newest entries are the ones kept
        return True

    def keep(self):
        """After the call: this run's payload of the module, kept under the key (when it was not already). Never a
        failure: the module's result is what the task returns."""
        if self.entry is None:
            return
        try:
            self._keep()
        except OSError as exc:
            display.vvv("sglang_info: payload not kept: %s" % exc)

    def _keep(self):
        if os.path.exists(self.entry):
            return
        names = [n for n in os.listdir(self.run_cache)
                 if n.split("-", 1)[0].rsplit(".", 1)[-1] == self.leaf and not n.endswith((".lock", "-part"))
                 and ".tmp" not in n]
        if len(names) != 1:
            return
        data = read_own_file(os.path.join(self.run_cache, names[0]))
        if data is None:
            return
        write_atomic(self.entry, names[0].encode("utf-8") + b"\n" + data)
        prune(self.cache)


class ActionModule(ActionBase):
    """ansible-core's normal action (one module call, check mode and async as the module has them), the payload kept."""

    _supports_check_mode = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        found = self._shared_loader_obj.module_loader.find_plugin_with_context(
            self._task.action, collection_list=self._task.collections)
        cache = PayloadCache(found.plugin_resolved_path, task_vars or {}) if found.resolved else None
        if cache is not None:
            cache.restore()
        wrap_async = self._task.async_val and not self._connection.has_native_async
        result = merge_hash(result, self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
        if cache is not None:
            cache.keep()
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
