"""TEST-ONLY stub of torchvision.transforms: a real InterpolationMode, stubs for the rest."""

from __future__ import annotations

import enum

from torchvision import _module_getattr


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


__getattr__ = _module_getattr(__name__)
