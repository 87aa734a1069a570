"""TEST-ONLY machinery shared by the stub packages (eagle-deploy molecule scenario sglang-cpu).

build_wheels.py copies this file into each stub wheel as `<package>/_stub.py`. In the package's
`__init__.py`, `__getattr__ = install(__name__, label)` makes every `<package>.*` submodule exist
(created on demand) and every name in it a stub object; calling a stub raises NotImplementedError.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class Stub:
    """Any attribute is another stub; calling one raises; usable as a base class."""

    def __init__(self, qualname: str, label: str) -> None:
        self._qualname = qualname
        self._label = label

    def __getattr__(self, name: str) -> Stub:
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(f"{self._qualname}.{name}", self._label)

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self._qualname}: eagle-deploy test stub of {self._label}")

    def __mro_entries__(self, bases):
        return (object,)

    def __repr__(self) -> str:
        return f"<eagle-deploy stub {self._qualname}>"


def module_getattr(modname: str, label: str):
    """A module-level __getattr__ that answers every missing name with a stub."""

    def __getattr__(name: str) -> Stub:
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(f"{modname}.{name}", label)

    return __getattr__


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Creates any submodule of `package` that has no file in the stub."""

    def __init__(self, package: str, label: str) -> None:
        self.package = package
        self.label = label

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith(self.package + "."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = module_getattr(spec.name, self.label)
        return module

    def exec_module(self, module):
        return None


def install(package: str, label: str):
    """Put the finder for `package` on sys.meta_path (once); return the package's __getattr__."""
    if not any(getattr(f, "package", None) == package for f in sys.meta_path):
        sys.meta_path.insert(0, StubFinder(package, label))
    return module_getattr(package, label)
