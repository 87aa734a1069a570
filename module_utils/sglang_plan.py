# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""wait_for_model's plan: what the running server depends on (its fingerprint), and whether a run keeps it,
attaches to it or restarts it. Pure functions, module side only.
"""

from __future__ import annotations

import hashlib
import json

from ansible.module_utils.sglang_paths import file_sha256


def _h(value):
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def fingerprint_parts(argv, environment, files, data, run_as, secret_environment=None, redact=None):
    parts = {"argv": _h(argv), "environment": _h(environment), "run_as": _h(run_as or "")}
    if secret_environment:
        parts["secret_environment"] = _h(secret_environment)
    if redact:
        parts["redact"] = _h(sorted(redact))
    for path in files:
        parts["file " + path] = file_sha256(path)
    for key in sorted(data):
        parts["data " + key] = _h(data[key])
    return parts


def fingerprint_of(parts):
    return _h(parts)


def describe_change(old_parts, new_parts):
    if not old_parts:
        return "fingerprint changed"
    keys = sorted(set(old_parts) | set(new_parts))
    changed = [k for k in keys if old_parts.get(k) != new_parts.get(k)]
    return "fingerprint changed: " + ", ".join(changed)


