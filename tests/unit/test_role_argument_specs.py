"""Every role's meta/argument_specs.yml mirrors its defaults/main.yml, in every entry point: the same variables, the
same defaults (house rule: a wrong type fails before anything runs, and the spec documents what the defaults are)."""

from __future__ import annotations

import os

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(name for name in os.listdir(os.path.join(REPO, "roles"))
               if os.path.isfile(os.path.join(REPO, "roles", name, "meta", "argument_specs.yml")))


def load(role, *path):
    with open(os.path.join(REPO, "roles", role, *path), encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def entry_points():
    for role in ROLES:
        for entry, spec in load(role, "meta", "argument_specs.yml")["argument_specs"].items():
            yield role, entry, spec


@pytest.mark.parametrize("role, entry, spec", list(entry_points()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_spec_has_every_default_and_nothing_else(role, entry, spec):
    defaults = load(role, "defaults", "main.yml")
    options = spec.get("options") or {}
    assert sorted(options) == sorted(defaults), (role, entry)
    assert {name: options[name].get("default") for name in options} == defaults, (role, entry)


def test_the_roles_are_found():
    assert {"sglang_install", "sglang_patch", "sglang_server", "sglang_fleet"} <= set(ROLES)
