"""TEST-ONLY stub of SGLang's kernel package sgl_kernel (eagle-deploy molecule scenario sglang-cpu).

The CPU build of sgl_kernel is not on PyPI, while SGLang imports names from it at import time.
Here every `sgl_kernel.*` submodule exists (created on demand), every name in it is a stub object,
and calling a stub raises NotImplementedError. Plain serving of a tiny Llama on CPU calls none.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+eaglestub"
EAGLE_DEPLOY_TEST_STUB = True


class _Stub:
    """Any attribute is another stub; calling one raises; usable as a base class."""

    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def __getattr__(self, name: str) -> _Stub:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub(f"{self._qualname}.{name}")

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self._qualname}: eagle-deploy test stub of sgl_kernel (CPU test host)")

    def __mro_entries__(self, bases):
        return (object,)

    def __repr__(self) -> str:
        return f"<eagle-deploy sgl_kernel stub {self._qualname}>"


def _module_getattr(modname: str):
    def __getattr__(name: str) -> _Stub:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub(f"{modname}.{name}")

    return __getattr__


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Creates any sgl_kernel submodule that has no file in this stub."""

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith(__name__ + "."):
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
        module.__getattr__ = _module_getattr(spec.name)
        return module

    def exec_module(self, module):
        return None


if not any(isinstance(finder, _StubFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _StubFinder())

__getattr__ = _module_getattr(__name__)
