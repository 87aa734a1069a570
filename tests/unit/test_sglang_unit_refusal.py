"""sglang_unit_facts.unit_refusal, the pure check of whether the unit of our name may be this deployment's: tables of what
systemd says (systemctl show) and what lies on disk, and the refusal each must give (or none)."""
from __future__ import annotations

import pytest

from ansible.module_utils import sglang_proc, sglang_unit_facts
from ansible.module_utils.sglang_unit_facts import OLD_UNIT_MARK, UNIT_MARK, unit_refusal

UNIT = "sglang-m.service"
OURS = "/etc/systemd/system/" + UNIT
RUN_DIR = "/var/lib/eagle-deploy/run"
DEPLOYMENT = sglang_proc.deployment_name("m", RUN_DIR)
# The role's template: ansible_managed as comment lines, the mark, the deployment line.
OUR_TEXT = "#\n# Ansible managed\n#\n%s x\n# eagle-deploy deployment: %s run_dir=%s\n[Unit]\n" % (
    UNIT_MARK, DEPLOYMENT, RUN_DIR)
OTHER_TEXT = "#\n# Ansible managed\n#\n%s x\n# eagle-deploy deployment: m-ba9876543210 run_dir=/srv/run2\n[Unit]\n" % (
    UNIT_MARK)
# What the module wrote before the unit became the role's template: its mark first, then the deployment line ...
MODULE_TEXT = "%s x\n# eagle-deploy deployment: %s run_dir=%s\n[Unit]\n" % (OLD_UNIT_MARK, DEPLOYMENT, RUN_DIR)
# ... and before that, no deployment line: the run dir and name of its ExecStart.
LEGACY_TEXT = '%s x\n[Service]\nExecStart="/usr/bin/python3" "-I" "%s/watcher/sglang_watcher.py" "%s" "m"\n' % (
    OLD_UNIT_MARK, RUN_DIR, RUN_DIR)
FOREIGN_TEXT = "[Service]\nExecStart=/usr/bin/someone-elses\n"
LOADED = {"FragmentPath": OURS, "LoadState": "loaded", "Transient": "no", "DropInPaths": "", "ActiveState": "active"}
NOT_FOUND = {"FragmentPath": "", "LoadState": "not-found", "Transient": "no", "DropInPaths": "", "ActiveState": "inactive"}

ALLOWED = [
    ("nothing anywhere", NOT_FOUND, []),
    ("our own unit, loaded", LOADED, [(OURS, OUR_TEXT)]),
    ("our own unit, not loaded yet", NOT_FOUND, [(OURS, OUR_TEXT)]),
    ("our own unit as the module wrote it", LOADED, [(OURS, MODULE_TEXT)]),
    ("our own unit written before the deployment line", LOADED, [(OURS, LEGACY_TEXT)]),
    ("our unit gone, systemd still knows it stopped", dict(LOADED, ActiveState="inactive"), []),
]


@pytest.mark.parametrize("show,found", [(s, f) for _, s, f in ALLOWED], ids=[i for i, _, _ in ALLOWED])
def test_allowed(show, found):
    assert unit_refusal(UNIT, show, found, OURS, DEPLOYMENT, RUN_DIR) is None


REFUSED = [
    # (id, show, found, [what the message must name])
    ("another deployment of the name", LOADED, [(OURS, OTHER_TEXT)],
     [OURS, "another deployment", "/srv/run2", "choose another name", "playbooks/stop.yml"]),
    ("our path without the mark", LOADED, [(OURS, FOREIGN_TEXT)], [OURS, "was not written by eagle-deploy"]),
    ("our path, a symlink (masked or linked)", LOADED, [(OURS, None)], [OURS, "not a regular file"]),
    ("our mark, a mangled deployment line", LOADED, [(OURS, "%s\n# eagle-deploy deployment: \n" % UNIT_MARK)],
     [OURS, "was not written by eagle-deploy"]),
    ("the template's mark without a deployment line", LOADED, [(OURS, LEGACY_TEXT.replace(OLD_UNIT_MARK, UNIT_MARK))],
     [OURS, "was not written by eagle-deploy"]),
    ("two deployment lines", LOADED, [(OURS, OUR_TEXT.replace("[Unit]", OTHER_TEXT.splitlines()[4] + "\n[Unit]"))],
     [OURS, "was not written by eagle-deploy"]),
    ("our mark below the header", LOADED, [(OURS, "[Unit]\n" + OUR_TEXT)], [OURS, "was not written by eagle-deploy"]),
    ("the module's mark, another deployment", LOADED, [(OURS, MODULE_TEXT.replace(DEPLOYMENT, "m-ba9876543210")
                                                                   .replace(RUN_DIR, "/srv/run2"))],
     [OURS, "/srv/run2", "choose another name"]),
    ("a unit of the name in /run/systemd/system, loaded",
     dict(LOADED, FragmentPath="/run/systemd/system/" + UNIT), [("/run/systemd/system/" + UNIT, FOREIGN_TEXT)],
     ["/run/systemd/system/" + UNIT, "did not write"]),
    ("a unit of the name in /usr/lib/systemd/system, not loaded yet", NOT_FOUND,
     [("/usr/lib/systemd/system/" + UNIT, FOREIGN_TEXT)], ["/usr/lib/systemd/system/" + UNIT]),
    ("systemd loads it from elsewhere (nothing seen on disk)", dict(LOADED, FragmentPath="/opt/x/" + UNIT), [],
     ["/opt/x/" + UNIT, "systemd loads"]),
    ("ours on disk but shadowed by one in /run", dict(LOADED, FragmentPath="/run/systemd/system/" + UNIT),
     [(OURS, OUR_TEXT), ("/run/systemd/system/" + UNIT, FOREIGN_TEXT)], ["/run/systemd/system/" + UNIT]),
    ("a transient unit (systemd-run --unit)",
     dict(LOADED, FragmentPath="/run/systemd/transient/" + UNIT, Transient="yes"),
     [("/run/systemd/transient/" + UNIT, FOREIGN_TEXT)], ["/run/systemd/transient/" + UNIT, "transient unit"]),
    ("masked", dict(LOADED, FragmentPath="/dev/null", LoadState="masked"), [], ["masked", "/dev/null"]),
    ("a drop-in on disk next to our unit", LOADED,
     [(OURS, OUR_TEXT), (OURS + ".d/override.conf", None)], [OURS + ".d/override.conf", "drop-in", "daemon-reload"]),
    ("two drop-ins systemd applies", dict(LOADED, DropInPaths="/etc/systemd/system.control/%s.d/50-x.conf "
                                                             "/run/systemd/system/sglang-.service.d/y.conf" % UNIT),
     [(OURS, OUR_TEXT)], ["/etc/systemd/system.control/%s.d/50-x.conf" % UNIT,
                          "/run/systemd/system/sglang-.service.d/y.conf"]),
    ("a drop-in dir that cannot be read", LOADED, [(OURS, OUR_TEXT), ("/run/systemd/system/%s.d" % UNIT, None)],
     ["/run/systemd/system/%s.d" % UNIT, "drop-in"]),
    ("running without a file", dict(NOT_FOUND, ActiveState="active"), [], [UNIT, "is gone", "systemctl stop"]),
    ("a legacy unit of another run dir", LOADED,
     [(OURS, LEGACY_TEXT.replace(RUN_DIR, "/srv/run2"))], [OURS, "/srv/run2", "choose another name"]),
]


@pytest.mark.parametrize("show,found,named", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused(show, found, named):
    msg = unit_refusal(UNIT, show, found, OURS, DEPLOYMENT, RUN_DIR)
    assert msg is not None
    for what in named:
        assert what in msg, (what, msg)
    assert msg.endswith("Nothing was stopped or launched.")


def test_legacy_unit_owner_is_read_from_exec_start():
    assert sglang_unit_facts.unit_owner(LEGACY_TEXT) == (DEPLOYMENT, RUN_DIR)
    assert sglang_unit_facts.unit_owner(FOREIGN_TEXT) is None


@pytest.mark.parametrize("text", [OUR_TEXT, MODULE_TEXT, LEGACY_TEXT], ids=["template", "module", "legacy"])
def test_the_owner_of_each_kind_of_our_units(text):
    assert sglang_unit_facts.unit_owner(text) == (DEPLOYMENT, RUN_DIR)


SHOW = {"FragmentPath": OURS, "LoadState": "loaded", "NeedDaemonReload": "no"}


@pytest.mark.parametrize("text, show, needle", [
    (None, SHOW, "does not exist"),
    (OUR_TEXT, dict(SHOW, NeedDaemonReload="yes"), "NeedDaemonReload=yes"),
    (OUR_TEXT, dict(SHOW, LoadState="not-found", FragmentPath=""), "LoadState=not-found"),
    (OUR_TEXT, SHOW, None),
    (OUR_TEXT, dict(SHOW, NeedDaemonReload=None), None),  # (systemd older than the property: not asked)
])
def test_what_a_launch_needs_of_the_unit(text, show, needle):
    why = sglang_unit_facts.launch_problem(UNIT, OURS, text, show)
    if needle is None:
        assert why is None
    else:
        assert needle in why and OURS in why and why.endswith("Nothing was stopped or launched."), why
        assert "tasks/unit.yml" in why


def test_the_unit_dirs_cover_every_dir_systemd_reads_units_from():
    for d in ("/etc/systemd/system", "/run/systemd/system", "/run/systemd/transient", "/usr/lib/systemd/system",
              "/lib/systemd/system", "/usr/local/lib/systemd/system"):
        assert d in sglang_unit_facts.UNIT_DIRS


def test_drop_in_dirs_of_a_unit_name():
    assert sglang_unit_facts.dropin_dirs("sglang-a-b.service") == [
        "sglang-a-b.service.d", "sglang-a-.service.d", "sglang-.service.d", "service.d"]


def test_files_on_disk_finds_units_and_drop_ins_without_following_links(tmp_path):
    a, b = tmp_path / "etc", tmp_path / "run"
    (a / (UNIT + ".d")).mkdir(parents=True)
    b.mkdir()
    (a / UNIT).write_text(OUR_TEXT)
    (a / (UNIT + ".d") / "override.conf").write_text("[Service]\n")
    (a / (UNIT + ".d") / "README").write_text("not a drop-in\n")
    (b / UNIT).symlink_to("/dev/null")
    found = sglang_unit_facts.unit_files_on_disk(UNIT, [str(a), str(b), str(tmp_path / "absent")])
    assert found == [(str(a / UNIT), OUR_TEXT), (str(a / (UNIT + ".d") / "override.conf"), None), (str(b / UNIT), None)]


def test_a_launch_needs_the_unit_to_run_the_program_this_run_checks():
    """systemd runs the program the unit names: a unit naming another program (an older one's watcher/, another
    program_dir) is refused before a launch; another Python alone is not."""
    want = ["/usr/bin/python3", "-I", "-B", RUN_DIR + "/supervisor", RUN_DIR, "m"]
    unit = '%s x\n[Service]\nExecStart="/usr/bin/python3" "-I" "-B" "%s/supervisor" "%s" "m"\n' % (
        UNIT_MARK, RUN_DIR, RUN_DIR)
    assert sglang_unit_facts.launch_problem(UNIT, OURS, unit, SHOW, want) is None
    assert sglang_unit_facts.launch_problem(UNIT, OURS, unit, SHOW, ["/opt/py/bin/python3"] + want[1:]) is None
    why = sglang_unit_facts.launch_problem(UNIT, OURS, LEGACY_TEXT, SHOW, want)
    assert "watcher/sglang_watcher.py" in why and "not the supervisor program this run checks" in why, why
    assert why.endswith("Nothing was stopped or launched."), why
