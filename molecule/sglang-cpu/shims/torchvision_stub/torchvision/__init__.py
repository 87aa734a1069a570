"""TEST-ONLY stub of torchvision (eagle-deploy molecule scenario sglang-cpu).

PyPI's torchvision is CUDA-linked and fails to import next to the CPU build of torch, while SGLang
and transformers import names from it at import time. Here every `torchvision.*` submodule exists
(created on demand), every name in it is a stub object, and calling a stub raises
NotImplementedError. Only `torchvision.transforms.InterpolationMode` is a real enum.
"""

from __future__ import annotations

from ._stub import install, module_getattr

__version__ = "0.28.0+eaglestub"
EAGLE_DEPLOY_TEST_STUB = True
LABEL = "torchvision (CPU test host)"


def _module_getattr(modname: str):
    """For submodules with a file of their own (transforms)."""
    return module_getattr(modname, LABEL)


__getattr__ = install(__name__, LABEL)
