"""The role's unit tasks (roles/sglang_server/tasks/unit.yml) for unit tests of the module's systemd path: the real
template (roles/sglang_server/templates/sglang.service.j2) rendered with jinja2 and Ansible's own filters, as
ansible.builtin.template renders it (trim_blocks, the trailing newline kept), from the unit_facts that wait_for_model
returns in check mode; then what the handler and systemd_service do, on disk (the fake systemctl of the tests reads
a unit as loaded when its file is there)."""
from __future__ import annotations

import os

import jinja2
from ansible.plugins.filter.core import FilterModule

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE = os.path.join(REPO, "roles", "sglang_server", "templates", "sglang.service.j2")
MANAGED = "Ansible managed"  # ansible-core's default ansible_managed


def render(facts, name="sglang", stall_timeout=900, stop_timeout=30, managed=MANAGED):
    """The unit text tasks/unit.yml writes: its template with the role's variables and the module's unit_facts."""
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters.update(FilterModule().filters())
    with open(TEMPLATE, encoding="utf-8") as fh:
        template = env.from_string(fh.read())
    return template.render(ansible_managed=managed, sglang_server_name=name, sglang_server_stall_timeout=stall_timeout,
                           sglang_server_stop_timeout=stop_timeout, __sglang_server_unit_facts=facts)


def install(facts, **role_vars):
    """Write the unit (0644) where unit_facts says, and enable it (the wants link systemctl enable makes).
    Returns whether the file changed (the template task's `changed`)."""
    text = render(facts, **role_vars)
    path = facts["path"]
    try:
        with open(path, encoding="utf-8") as fh:
            changed = fh.read() != text
    except FileNotFoundError:
        changed = True
    if changed:
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(path, 0o644)
    wants = os.path.join(os.path.dirname(path), "multi-user.target.wants")
    os.makedirs(wants, exist_ok=True)
    link = os.path.join(wants, facts["name"])
    if not os.path.lexists(link):
        os.symlink(path, link)
    return changed
