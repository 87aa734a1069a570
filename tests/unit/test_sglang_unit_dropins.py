"""Drop-ins that reach our unit (sglang_unit_facts.unit_refusal, vendor_dropins): its own ``.d``, the ``sglang-.service.d``
prefix dir and anything in /etc or /run are refused, naming the file; a distribution's drop-in for every service
(``service.d`` in /usr/lib/systemd/system, as Fedora ships 10-timeout-abort.conf) is accepted when it sets only keys
that run no code and change nothing of the server's process, and named in a warning; else refused, naming it.
Real files under the test's tmp dir (``<root>/usr/lib/systemd/system`` stands for the vendor dir)."""
from __future__ import annotations

import os

import pytest

import test_wait_for_model_systemd as systemd_tests  # its fake systemctl and launch as the role makes it
from ansible.module_utils import sglang_proc, sglang_unit_facts
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.sglang_unit_facts import UNIT_MARK, unit_refusal
from module_harness import module_exits, world  # noqa: F401 - fixtures

UNIT = "sglang-m.service"
RUN_DIR = "/var/lib/eagle-deploy/run"
DEPLOYMENT = sglang_proc.deployment_name("m", RUN_DIR)
OUR_TEXT = "#\n# Ansible managed\n#\n%s x\n# eagle-deploy deployment: %s run_dir=%s\n[Unit]\n" % (
    UNIT_MARK, DEPLOYMENT, RUN_DIR)
# Fedora 39+'s /usr/lib/systemd/system/service.d/10-timeout-abort.conf, as the systemd package ships it.
FEDORA = ("# This file is part of the systemd package.\n"
          "# See https://fedoraproject.org/wiki/Changes/Shorter_Shutdown_Timer.\n#\n"
          "# To facilitate debugging when a service fails to stop cleanly,\n"
          "# TimeoutStopFailureMode=abort is set to \"crash\" services that fail to stop in\n"
          "# the time allotted. This will cause the service to be terminated with SIGABRT\n"
          "# and a coredump to be generated.\n#\n"
          "# To undo this configuration change, create a mask file:\n"
          "#   sudo mkdir -p /etc/systemd/system/service.d\n"
          "#   sudo ln -sv /dev/null /etc/systemd/system/service.d/10-timeout-abort.conf\n\n"
          "[Service]\nTimeoutStopFailureMode=abort\n")


def tree(tmp_path, files):
    """The unit dirs under tmp_path (etc: our unit_dir; run; the vendor dir) with ``files`` {relative path: text}
    written (0644) and our unit in etc; returns (dirs, our unit's path)."""
    dirs = [tmp_path / "etc/systemd/system", tmp_path / "run/systemd/system", tmp_path / "usr/lib/systemd/system"]
    for d in dirs:
        d.mkdir(parents=True)
    ours = dirs[0] / UNIT
    ours.write_text(OUR_TEXT)
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.chmod(path, 0o644)
    return [str(d) for d in dirs], str(ours)


def refusal(tmp_path, files, dropin_paths=()):
    dirs, ours = tree(tmp_path, files)
    found = sglang_unit_facts.unit_files_on_disk(UNIT, dirs)
    show = {"FragmentPath": ours, "LoadState": "loaded", "Transient": "no", "ActiveState": "active",
            "DropInPaths": " ".join(str(tmp_path / p) for p in dropin_paths)}
    return unit_refusal(UNIT, show, found, ours, DEPLOYMENT, RUN_DIR), sglang_unit_facts.vendor_dropins(UNIT, show, found)


def test_a_distributions_timeout_abort_drop_in_is_accepted_and_named(tmp_path):
    rel = "usr/lib/systemd/system/service.d/10-timeout-abort.conf"
    why, accepted = refusal(tmp_path, {rel: FEDORA}, dropin_paths=[rel])
    assert why is None
    assert accepted == [(str(tmp_path / rel), ["Service.TimeoutStopFailureMode"])]
    warning = sglang_unit_facts.accepted_words(*accepted[0])
    assert str(tmp_path / rel) in warning and "TimeoutStopFailureMode" in warning


@pytest.mark.parametrize("text", [
    "[Service]\nTimeoutAbortSec=5min\n[Unit]\nDocumentation=man:systemd.service(5)\n",
    "# nothing set\n",
    "[Service]\nTimeoutStartFailureMode = terminate\n",
], ids=["abort-sec and documentation", "comments only", "spaces around ="])
def test_a_distributions_drop_in_of_harmless_keys_only_is_accepted(tmp_path, text):
    rel = "usr/lib/systemd/system/service.d/20-x.conf"
    why, accepted = refusal(tmp_path, {rel: text})
    assert why is None and [p for p, _ in accepted] == [str(tmp_path / rel)]


@pytest.mark.parametrize("text", [
    "[Service]\nExecStartPre=/usr/bin/true\n",
    "[Service]\nEnvironment=LD_PRELOAD=/tmp/x.so\n",
    "[Service]\nUser=nobody\n",
    "[Service]\nTimeoutStopFailureMode=abort\nExecStopPost=/bin/sh -c id\n",
    "[Service]\nTimeoutStopFailureMode=abort \\\n  ExecStart=/bin/sh\n",
    "[Install]\nWantedBy=multi-user.target\n",
    "TimeoutStopFailureMode=abort\n",
    ".include /etc/x.conf\n",
], ids=["ExecStartPre", "Environment", "User", "a harmless key and an exec", "a continued line", "another section",
        "a key outside a section", ".include"])
def test_a_distributions_drop_in_that_sets_more_is_refused_naming_it(tmp_path, text):
    rel = "usr/lib/systemd/system/service.d/10-timeout-abort.conf"
    why, accepted = refusal(tmp_path, {rel: text}, dropin_paths=[rel])
    assert accepted == []
    assert why is not None and str(tmp_path / rel) in why and "not a distribution's that sets only" in why, why


@pytest.mark.parametrize("rel", [
    "etc/systemd/system/%s.d/override.conf" % UNIT,  # its own .d
    "usr/lib/systemd/system/%s.d/10-timeout-abort.conf" % UNIT,  # its own .d, even in the vendor dir
    "run/systemd/system/sglang-.service.d/10-timeout-abort.conf",  # the prefix dir
    "usr/lib/systemd/system/sglang-.service.d/10-timeout-abort.conf",  # the prefix dir, even in the vendor dir
    "etc/systemd/system/service.d/10-timeout-abort.conf",  # /etc: not the distribution's
    "run/systemd/system/service.d/10-timeout-abort.conf",  # /run: not the distribution's
], ids=["own .d", "own .d in the vendor dir", "prefix dir", "prefix dir in the vendor dir", "service.d in /etc",
        "service.d in /run"])
def test_a_harmless_drop_in_anywhere_else_that_reaches_our_unit_is_refused(tmp_path, rel):
    why, accepted = refusal(tmp_path, {rel: FEDORA}, dropin_paths=[rel])
    assert accepted == []
    assert why is not None and str(tmp_path / rel) in why and "drop-in" in why, why
    assert why.endswith("Nothing was stopped or launched.")


def test_a_distributions_drop_in_others_can_write_is_refused(tmp_path):
    rel = "usr/lib/systemd/system/service.d/10-timeout-abort.conf"
    dirs, _ours = tree(tmp_path, {rel: FEDORA})
    os.chmod(tmp_path / rel, 0o666)
    assert sglang_unit_facts.vendor_dropin(UNIT, str(tmp_path / rel)) is None


def test_a_distributions_drop_in_that_is_a_link_is_refused(tmp_path):
    rel = "usr/lib/systemd/system/service.d/10-timeout-abort.conf"
    tree(tmp_path, {"usr/lib/systemd/system/service.d/real.txt": FEDORA})
    os.symlink("real.txt", tmp_path / rel)
    assert sglang_unit_facts.vendor_dropin(UNIT, str(tmp_path / rel)) is None


def test_only_the_distributions_unit_dirs_are_vendor_dirs():
    assert sglang_unit_facts.vendor_dir("/usr/lib/systemd/system") and sglang_unit_facts.vendor_dir("/lib/systemd/system/")
    for d in ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/run/systemd/generator"):
        assert not sglang_unit_facts.vendor_dir(d), d


def test_wait_for_model_serves_beside_a_distributions_drop_in_and_names_it(world, monkeypatch,  # noqa: F811
                                                                            module_exits):  # noqa: F811
    """The whole launch (the role's unit tasks, then the start) with Fedora's drop-in in the vendor dir, which systemd
    applies (DropInPaths): it serves, and the warning names the file."""
    vendor = os.path.join(world.log_dir, "root", "usr", "lib", "systemd", "system")
    dropin = os.path.join(vendor, "service.d", "10-timeout-abort.conf")
    os.makedirs(os.path.dirname(dropin))
    with open(dropin, "w") as fh:
        fh.write(FEDORA)
    os.chmod(dropin, 0o644)
    stand_ins = systemd_tests.unit_dirs
    monkeypatch.setattr(systemd_tests, "unit_dirs", lambda w: stand_ins(w) + [vendor])
    fake = systemd_tests.FakeSystemd(world, systemd_tests.unit_dirs(world)[0], systemd_tests.READY)
    fake.props["DropInPaths"] = dropin
    status, r, fake = systemd_tests.systemd_run(world, systemd_tests.READY, fake=fake)
    assert status == "ok" and r["phase"] == "ready", r
    assert ("start", "--no-block", "sglang-sglang.service") in fake.touched()
    assert any(dropin in w and "TimeoutStopFailureMode" in w for w in ansible_warnings.get_warning_messages())


def test_wait_for_model_refuses_a_drop_in_planted_for_our_unit_and_touches_nothing(world, module_exits):  # noqa: F811
    dirs = systemd_tests.unit_dirs(world)
    planted = os.path.join(dirs[1], "sglang-.service.d", "10-timeout-abort.conf")  # the prefix dir, in /run
    os.makedirs(os.path.dirname(planted))
    with open(planted, "w") as fh:
        fh.write(FEDORA)
    status, r, fake = systemd_tests.systemd_run(world, systemd_tests.READY)
    assert status == "failed" and planted in r["msg"] and "Nothing was stopped or launched" in r["msg"], r
    assert fake.touched() == [] and not os.path.exists(os.path.join(dirs[0], "sglang-sglang.service"))
