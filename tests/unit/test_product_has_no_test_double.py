"""The deployment (roles, playbooks, modules, module_utils) knows nothing of the SGLang emulator: the emulator is
a test double that the rehearsal inventories and molecule put on their hosts through the roles' generic knobs
(sglang_install_extra_packages, sglang_server_command). A role's own tests/ directory may mention it."""

from __future__ import annotations

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRODUCT = ("roles", "playbooks", "library", "module_utils")
# The emulator by name, and the words a comment uses when it describes a test double without naming it.
WORD = re.compile(r"emulator|stand-in|test double", re.IGNORECASE)


def product_files():
    for top in PRODUCT:
        for folder, dirs, files in os.walk(os.path.join(REPO, top)):
            rel = os.path.relpath(folder, REPO).split(os.sep)
            if top == "roles" and "tests" in rel[2:3]:
                dirs[:] = []
                continue
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                yield os.path.join(folder, name)


def test_the_product_never_mentions_the_emulator_or_a_test_double():
    found = []
    for path in product_files():
        with open(path, encoding="utf-8", errors="replace") as handle:
            for lineno, line in enumerate(handle, 1):
                if WORD.search(line):
                    found.append("%s:%d: %s" % (os.path.relpath(path, REPO), lineno, line.strip()[:100]))
    for name in os.listdir(os.path.join(REPO, "roles")):
        if WORD.search(name):
            found.append("roles/%s" % name)
    assert not found, "the product mentions the emulator or a test double:\n" + "\n".join(found)


def test_the_walk_sees_the_product():
    files = {os.path.relpath(p, REPO) for p in product_files()}
    assert "library/wait_for_model.py" in files and "roles/sglang_server/tasks/main.yml" in files
