"""Shared test set-up: make the project's module_utils importable as ansible.module_utils.*, and the project as the
collection eagle.deploy (collections/, as ansible.cfg's collections_path shows it to the action plugins)."""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "library"))
sys.path.insert(1, os.path.join(ROOT, "collections"))  # ansible_collections.eagle.deploy.plugins.*

import ansible.module_utils  # noqa: E402 - the sys.path set-up above comes first

_MU = os.path.join(ROOT, "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)
