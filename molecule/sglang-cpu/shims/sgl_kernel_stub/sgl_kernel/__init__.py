"""TEST-ONLY stub of SGLang's kernel package sgl_kernel (eagle-deploy molecule scenario sglang-cpu).

The CPU build of sgl_kernel is not on PyPI, while SGLang imports names from it at import time.
Here every `sgl_kernel.*` submodule exists (created on demand), every name in it is a stub object,
and calling a stub raises NotImplementedError. Plain serving of a tiny Llama on CPU calls none.
"""

from __future__ import annotations

from ._stub import install

__version__ = "0.0.0+eaglestub"
EAGLE_DEPLOY_TEST_STUB = True

__getattr__ = install(__name__, "sgl_kernel (CPU test host)")
