"""Helpers shared by the molecule scenarios' testinfra tests (run on the controller).

Every helper reads REAL state of a test host through a testinfra `host` (podman backend):
files, /proc, sockets, HTTP answers from inside the host. Nothing here is a fixture value.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import shlex

import yaml


REPO = pathlib.Path(__file__).resolve().parents[2]


def role_default(name: str):
    """A plain (untemplated) default of the sglang_install role: the paths the scenarios do not override."""
    defaults = yaml.safe_load((REPO / "roles" / "sglang_install" / "defaults" / "main.yml").read_text())
    return defaults[name]


LOG_DIR = role_default("sglang_install_log_dir")
RUN_DIR = role_default("sglang_install_run_dir")
CONFIG = role_default("sglang_install_config_dir") + "/sglang.yaml"


def scenario_vars(group: str = "sglang_servers") -> dict:
    """The group_vars of the running molecule scenario (its molecule.yml), so tests and inventory agree."""
    scenario_dir = pathlib.Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", pathlib.Path(__file__).parent))
    data = yaml.safe_load((scenario_dir / "molecule.yml").read_text())
    return data["provisioner"]["inventory"]["group_vars"][group]


# Runs inside the host as root: one JSON snapshot of every process (pid, ppid, sid, uid, user, argv).
PROCS_SCRIPT = r"""
import json, os, pwd
out = []
for d in os.listdir('/proc'):
    if not d.isdigit():
        continue
    try:
        with open('/proc/%s/stat' % d, 'rb') as fh:
            stat = fh.read().decode('utf-8', 'replace')
        with open('/proc/%s/cmdline' % d, 'rb') as fh:
            argv = [a.decode('utf-8', 'replace') for a in fh.read().split(b'\0') if a]
        uid = os.stat('/proc/%s' % d).st_uid
    except OSError:
        continue
    fields = stat[stat.rindex(')') + 2:].split()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    out.append({'pid': int(d), 'state': fields[0], 'ppid': int(fields[1]), 'sid': int(fields[3]),
                'start_time': int(fields[19]), 'uid': uid, 'user': user, 'argv': argv})
print(json.dumps(out))
"""


def processes(host) -> list[dict]:
    return json.loads(host.check_output("python3 -c %s", PROCS_SCRIPT))


# Runs inside the host as root: {fd: [link target, open flags (octal text of /proc/PID/fdinfo)]} of one process.
FDS_SCRIPT = r"""
import json, os, sys
pid = sys.argv[1]
out = {}
for fd in os.listdir('/proc/%s/fd' % pid):
    try:
        target = os.readlink('/proc/%s/fd/%s' % (pid, fd))
        with open('/proc/%s/fdinfo/%s' % (pid, fd)) as fh:
            flags = [l.split()[1] for l in fh if l.startswith('flags:')][0]
    except OSError:
        continue
    out[fd] = [target, flags]
print(json.dumps(out))
"""


def open_files(host, pid: int) -> dict:
    """{fd (str): (target, flags)} of a process on the host: a pipe reads ``pipe:[inode]``; flags & 3 is the
    access mode (0 read only, 1 write only)."""
    return {fd: (t, int(f, 8)) for fd, (t, f) in json.loads(host.check_output("python3 -c %s %s", FDS_SCRIPT, str(pid))).items()}


def holders(host, target: str) -> list[int]:
    """The PIDs of the host that have ``target`` (a path, or ``pipe:[inode]``) open, read as root."""
    script = ("import glob, os, sys\n"
              "for p in glob.glob('/proc/[0-9]*/fd/*'):\n"
              "    try:\n"
              "        if os.readlink(p) == sys.argv[1]:\n"
              "            print(p.split('/')[2])\n"
              "    except OSError:\n"
              "        pass\n")
    return sorted({int(pid) for pid in host.check_output("python3 -c %s %s", script, target).split()})


def environ_holders(host, needle: str) -> list[str]:
    """The /proc/PID/environ files of the host that hold ``needle`` (read as root; the needle via stdin, not argv)."""
    script = ("import glob, sys\n"
              "n = sys.stdin.buffer.read()\n"
              "for p in glob.glob('/proc/[0-9]*/environ'):\n"
              "    try:\n"
              "        data = open(p, 'rb').read()\n"
              "    except OSError:\n"
              "        continue\n"
              "    if n in data:\n"
              "        print(p)\n")
    out = host.check_output(f"printf %s {shlex.quote(needle)} | python3 -c {shlex.quote(script)}")
    return out.split()


def run_state(host, run_dir: str, name: str = "sglang") -> dict:
    return json.loads(host.file(f"{run_dir}/{name}.json").content_string)


def server_tree(procs: list[dict], leader: int) -> list[dict]:
    """The leader, its session, and every descendant of those (DESIGN.md's 'our process tree')."""
    members = {p["pid"] for p in procs if p["pid"] == leader or p["sid"] == leader}
    grew = True
    while grew:
        grew = False
        for p in procs:
            if p["pid"] not in members and p["ppid"] in members:
                members.add(p["pid"])
                grew = True
    return [p for p in procs if p["pid"] in members]


def http_status(host, url: str, api_key: str | None = None, method: str = "GET", body: dict | None = None) -> tuple[int, str]:
    """(status, body) of a request made from inside the host with its own python (key via stdin, not argv)."""
    script = (
        "import json, sys, urllib.request, urllib.error\n"
        "a = json.load(sys.stdin)\n"
        "h = {'Content-Type': 'application/json'}\n"
        "if a['key']: h['Authorization'] = 'Bearer ' + a['key']\n"
        "data = json.dumps(a['body']).encode() if a['body'] is not None else None\n"
        "req = urllib.request.Request(a['url'], data=data, headers=h, method=a['method'])\n"
        "try:\n"
        "    r = urllib.request.urlopen(req, timeout=60); code, text = r.status, r.read()\n"
        "except urllib.error.HTTPError as e:\n"
        "    code, text = e.code, e.read()\n"
        "print(json.dumps([code, text.decode('utf-8', 'replace')]))\n"
    )
    payload = json.dumps({"url": url, "key": api_key, "method": method, "body": body})
    out = host.check_output(f"printf %s {shlex.quote(payload)} | python3 -c {shlex.quote(script)}")
    code, text = json.loads(out)
    return code, text


def early_init_statements(source: str, class_name: str = "EAGLEWorkerV2", method: str = "__init__") -> list[ast.stmt]:
    """The body of CLASS.METHOD in SOURCE, docstring dropped."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == method:
                    body = list(item.body)
                    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                            and isinstance(body[0].value.value, str):
                        body = body[1:]
                    return body
    raise AssertionError(f"{class_name}.{method} not found")


def self_assignment(stmt: ast.stmt) -> tuple[str, object] | None:
    """('name', literal) for `self.name = <literal>`, else None."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            try:
                return target.attr, ast.literal_eval(stmt.value)
            except ValueError:
                return target.attr, ast.dump(stmt.value)
    return None
