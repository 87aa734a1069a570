"""The project's own playbooks (playbooks/, its tasks/ and vars/ included) use the roles as a user's play may: no role's
private variable (a name starting with _sglang_ or __sglang_), no path into a role (roles/...), and every role variable
they set or read documented in that role's meta/argument_specs.yml (an option, or a variable the role exposes, named
there as C(name))."""

from __future__ import annotations

import os
import re

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOKS = os.path.join(REPO, "playbooks")
ROLES = sorted(name for name in os.listdir(os.path.join(REPO, "roles"))
               if os.path.isfile(os.path.join(REPO, "roles", name, "meta", "argument_specs.yml")))
PRIVATE = re.compile(r"(?<![A-Za-z0-9_])_+sglang_[A-Za-z0-9_]*")
NAME = re.compile(r"(?<![A-Za-z0-9_.])sglang_[a-z0-9_]+")
ROLE_PATH = re.compile(r"(?<![A-Za-z0-9_])roles/")


def strings(node):
    """Every string of a loaded YAML document, keys included (comments are not in it)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)
    elif isinstance(node, str):
        yield node


def playbook_files():
    for root, _, files in os.walk(PLAYBOOKS):
        for name in sorted(files):
            if name.endswith((".yml", ".yaml")):
                yield os.path.join(root, name)


def documented(role):
    """The options of every entry point of ``role`` and the variables its argument_specs names as C(...) or O(...)."""
    path = os.path.join(REPO, "roles", role, "meta", "argument_specs.yml")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    names = {name for spec in yaml.safe_load(text)["argument_specs"].values() for name in (spec.get("options") or {})}
    return names | set(re.findall(r"[CO]\((%s_[a-z0-9_]+)\)" % role, text))


def role_of(name):
    found = [role for role in ROLES if name.startswith(role + "_")]
    return max(found, key=len) if found else None


def offences(text, specs):
    """What in one string of a playbook breaks the rule: private names, role paths, undocumented role variables."""
    found = ["private variable %s" % m for m in PRIVATE.findall(text)]
    found += ["path into a role: %r" % text for _ in ROLE_PATH.findall(text)[:1]]
    for name in NAME.findall(text):
        role = role_of(name)
        if role and name not in specs[role]:
            found.append("%s is not documented in roles/%s/meta/argument_specs.yml" % (name, role))
    return found


def test_the_playbooks_use_only_documented_role_variables_and_no_role_path():
    specs = {role: documented(role) for role in ROLES}
    files = list(playbook_files())
    assert len(files) >= 10, files  # playbooks/*.yml, tasks/*.yml, vars/*.yml
    bad = []
    for path in files:
        with open(path, encoding="utf-8") as handle:
            for text in strings(yaml.safe_load(handle)):
                bad += ["%s: %s" % (os.path.relpath(path, REPO), offence) for offence in offences(text, specs)]
    assert not bad, "\n".join(bad)


def test_the_scan_finds_what_it_must():
    specs = {role: documented(role) for role in ROLES}
    assert offences("{{ _sglang_patch_look_request }}", specs) == ["private variable _sglang_patch_look_request"]
    assert offences("{{ x if __sglang_server_service is defined }}", specs) == [
        "private variable __sglang_server_service"]
    assert offences("{{ playbook_dir }}/../roles/sglang_server/templates/sglang.service.j2", specs) == [
        "path into a role: '{{ playbook_dir }}/../roles/sglang_server/templates/sglang.service.j2'"]
    assert offences("{{ sglang_server_no_such_thing }}", specs) == [
        "sglang_server_no_such_thing is not documented in roles/sglang_server/meta/argument_specs.yml"]
    # Options, exposed variables, and names that are not a role's variable (a group, a module) pass.
    assert offences("{{ sglang_server_port }} {{ sglang_patch_look_request }} sglang_servers sglang_info", specs) == []
    # The longest role prefix decides (no role here is a prefix of another, but the rule holds if one comes).
    assert role_of("sglang_server_port") == "sglang_server" and role_of("sglang_servers") is None


def test_the_playbook_yaml_is_scanned_without_its_comments():
    assert list(strings(yaml.safe_load("# _sglang_x roles/y\na: [b, {c: d}]\n"))) == ["a", "b", "c", "d"]
