"""The rollback's restore (module_utils/sglang_good_record.py ``restore``): a recorded file is written back only into a
directory that nobody less privileged can write or swap (checked as the run dir is), relative to that directory's
descriptor, never through a symlink; otherwise nothing is restored and the error names the file and the fix. Files in
temporary directories (this suite runs as root, so another owner is a chown); no process is spawned."""
import os
import stat

import pytest

from ansible.module_utils import sglang_good_record as good
from ansible.module_utils import sglang_plan

NAME = "sglang"
GOOD = b"model-path: /m\n"
NEW = b"model-path: /m\nnew-option: 1\n"
SERVICE_UID = 65534  # the service user, less privileged than the module (root)


def _dir(path, mode=0o755):
    os.makedirs(path)
    os.chmod(path, mode)
    return path


def _write(path, data, mode=0o640):
    with open(path, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)


@pytest.fixture
def place(tmp_path):
    """A run dir and /etc/sglang-like config dir (root, group the service user's, 0750), a venv's python, a
    deployment recorded good with the config (root:service, 0640) and a second file in another trusted directory."""
    top = _dir(str(tmp_path / "top"))
    run_dir = _dir(os.path.join(top, "run"))
    python = os.path.join(_dir(os.path.join(top, "venv", "bin")), "python")
    _write(python, b"#!/bin/sh\n", 0o755)
    etc = _dir(os.path.join(top, "etc", "sglang"), 0o750)
    os.chown(etc, 0, SERVICE_UID)
    config = os.path.join(etc, "sglang.yaml")
    _write(config, GOOD)
    os.chown(config, 0, SERVICE_UID)
    worker = os.path.join(_dir(os.path.join(top, "site-packages")), "eagle_worker_v2.py")
    _write(worker, b"class EAGLEWorkerV2: pass\n", 0o644)
    files = [config, worker]
    data = {"sglang_version": "0.5.23"}
    argv = [python, "-m", "sglang.launch_server", "--config", config]
    fp = sglang_plan.fingerprint_of(sglang_plan.fingerprint_parts(argv, {}, files, data, "sglang"))
    inputs = {"argv": argv, "environment": {}, "run_as": "sglang", "fingerprint_files": files,
              "fingerprint_data": data, "fingerprint": fp}
    good.record(run_dir, NAME, {"pid": 4242, "fingerprint": fp, "run_token": "t1"}, inputs, 1, 1.0)
    # the next deployment overwrites the config and fails: the rollback chose the recorded one
    _write(config, NEW, 0o644)
    d, why = good.choose(run_dir, NAME, "f" * 64)
    assert why is None
    return {"top": top, "run_dir": run_dir, "etc": etc, "config": config, "worker": worker, "d": d}


def _read(path):
    with open(path, "rb") as fh:
        return fh.read()


def test_a_file_in_a_trusted_directory_is_put_back_with_its_recorded_owner_and_mode(place):
    assert good.restore(place["run_dir"], place["d"]) == [place["config"]]
    st = os.lstat(place["config"])
    assert _read(place["config"]) == GOOD and stat.S_ISREG(st.st_mode)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, SERVICE_UID, 0o640)
    assert sorted(os.listdir(place["etc"])) == ["sglang.yaml"]  # no temporary file left
    assert good.restore(place["run_dir"], place["d"]) == []


@pytest.mark.parametrize("spoil, needle", [
    (lambda p: os.chmod(p["etc"], 0o770), "is writable by its group or by others (mode 0770)"),
    (lambda p: os.chmod(p["etc"], 0o1777), "is writable by its group or by others (mode 1777)"),
    (lambda p: os.chown(p["etc"], SERVICE_UID, SERVICE_UID), "is owned by uid %d" % SERVICE_UID),
    (lambda p: os.chmod(os.path.dirname(p["etc"]), 0o775), "above it is writable by its group or by others"),
], ids=["group-writable", "sticky-and-world-writable", "another-owner", "a-directory-above-group-writable"])
def test_a_directory_someone_less_privileged_can_write_is_refused_and_nothing_is_touched(place, spoil, needle):
    _write(place["worker"], b"# re-patched\n", 0o644)  # a second changed file, in a trusted directory
    spoil(place)
    with pytest.raises(good.GoodRecordError) as e:
        good.restore(place["run_dir"], place["d"])
    msg = str(e.value)
    assert msg.startswith("%s was not restored, nor any other file of this rollback" % place["config"]), msg
    assert needle in msg and "chmod go-w" in msg, msg
    if "above it" not in needle:  # the fix keeps the directory's group (the service user's, which reads the config)
        assert "(chown root %s; chmod go-w %s)" % (place["etc"], place["etc"]) in msg, msg
    assert _read(place["config"]) == NEW and _read(place["worker"]) == b"# re-patched\n"
    assert sorted(os.listdir(place["etc"])) == ["sglang.yaml"]


def test_a_symlink_on_the_directory_path_is_refused(place):
    # the config's directory recorded through a symlink the service user could repoint (its own home, say)
    os.rename(place["etc"], place["etc"] + ".real")
    os.symlink(place["etc"] + ".real", place["etc"])
    with pytest.raises(good.GoodRecordError) as e:
        good.restore(place["run_dir"], place["d"])
    msg = str(e.value)
    assert "%s was not restored" % place["config"] in msg and "%s is a symlink" % place["etc"] in msg, msg
    assert _read(place["etc"] + ".real/sglang.yaml") == NEW and os.path.islink(place["etc"])


def test_a_symlink_at_the_files_path_is_never_followed(place):
    elsewhere = os.path.join(_dir(os.path.join(place["top"], "elsewhere")), "target")
    _write(elsewhere, b"not the config\n")
    os.unlink(place["config"])
    os.symlink(elsewhere, place["config"])
    with pytest.raises(good.GoodRecordError) as e:
        good.restore(place["run_dir"], place["d"])
    msg = str(e.value)
    assert "%s was not restored" % place["config"] in msg and "is a symlink (to %s)" % elsewhere in msg, msg
    assert os.readlink(place["config"]) == elsewhere and _read(elsewhere) == b"not the config\n"


def test_a_gone_file_is_put_back(place):
    os.unlink(place["config"])
    assert good.restore(place["run_dir"], place["d"]) == [place["config"]]
    assert _read(place["config"]) == GOOD


def test_an_unchanged_file_is_not_looked_at_in_its_directory(place):
    # nothing is written where a file is as recorded: its directory's trust does not matter
    os.chmod(os.path.dirname(place["worker"]), 0o777)
    assert good.restore(place["run_dir"], place["d"]) == [place["config"]]


def test_a_deployment_that_could_not_be_put_back_is_never_chosen(place):
    # the same check before the choice: a single node says why not, and a group's report marks it not intact, so
    # that no node of the group restores anything (sglang_good_group)
    os.chmod(place["etc"], 0o770)
    d, why = good.choose(place["run_dir"], NAME, "f" * 64)
    assert d is None
    assert "%s changed since it was good, and cannot be put back" % place["config"] in why, why
    assert "is writable by its group or by others (mode 0770)" in why, why
    (cand,) = good.candidates(place["run_dir"], NAME, "f" * 64)
    assert cand["intact"] is False and "cannot be put back" in cand["why_not"]
    assert _read(place["config"]) == NEW
    os.chmod(place["etc"], 0o750)
    assert good.choose(place["run_dir"], NAME, "f" * 64)[1] is None
