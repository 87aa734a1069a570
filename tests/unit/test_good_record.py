"""The good-deployment record and the smoke test's verdict (module_utils/sglang_good_record.py): what a rollback may
launch again, trusted only as the run state is. Files in a temporary run dir; no process is spawned."""
import json
import os
import stat

import pytest

from ansible.module_utils import sglang_good_record as good
from ansible.module_utils import sglang_plan

NAME = "sglang"


@pytest.fixture
def place(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o755)
    os.chmod(run_dir, 0o755)
    venv = tmp_path / "venv-0.5.23" / "bin"
    venv.mkdir(parents=True)
    python = venv / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    conf = tmp_path / "etc"
    conf.mkdir()
    config = conf / "sglang.yaml"
    config.write_text("model-path: /m\napi-key: k3y-k3y-k3y-k3y-k3y\n")
    config.chmod(0o600)
    worker = tmp_path / "eagle_worker_v2.py"
    worker.write_text("class EAGLEWorkerV2: pass\n")
    return {"run_dir": str(run_dir), "python": str(python), "config": str(config), "worker": str(worker)}


def inputs(place, version="0.5.23", argv_extra=()):
    files = [place["config"], place["worker"]]
    data = {"sglang_version": version}
    argv = [place["python"], "-m", "sglang.launch_server", "--config", place["config"]] + list(argv_extra)
    parts = sglang_plan.fingerprint_parts(argv, {"A": "1"}, files, data, "sglang")
    return {"argv": argv, "environment": {"A": "1"}, "run_as": "sglang", "fingerprint_files": files,
            "fingerprint_data": data, "fingerprint": sglang_plan.fingerprint_of(parts)}


def running(fp, token="t1", pid=4242):
    return {"pid": pid, "fingerprint": fp, "run_token": token, "attempt": 3, "launcher": "detached"}


def test_a_recorded_deployment_is_chosen_and_its_overwritten_config_put_back(place):
    first = inputs(place)
    changed, report = good.record(place["run_dir"], NAME, running(first["fingerprint"]), first, 1, 1000.0,
                                  secrets=["k3y-k3y-k3y-k3y-k3y"])
    assert changed and report["good"]["sglang_version"] == "0.5.23"
    rec = os.path.join(place["run_dir"], "sglang.good.json")
    assert stat.S_IMODE(os.stat(rec).st_mode) == 0o600
    assert "api-key" not in open(rec).read()  # the config's copy is a file of its own, root-only
    # the config's one copy of the key stays the config: the kept copy holds a mark in its place
    for fname in os.listdir(place["run_dir"]):
        assert b"k3y-k3y-k3y-k3y-k3y" not in open(os.path.join(place["run_dir"], fname), "rb").read(), fname
    # recording the same server again writes nothing
    assert good.record(place["run_dir"], NAME, running(first["fingerprint"]), first, 1, 1001.0)[0] is False
    # the new deployment overwrites the config; its start fails
    with open(place["config"], "w") as fh:
        fh.write("model-path: /m\napi-key: k3y-k3y-k3y-k3y-k3y\nnew-option: 1\n")
    # the key is needed to put the copy back
    d, why = good.choose(place["run_dir"], NAME, "f" * 64)
    assert d is None and "holds a secret (the API key) that this run does not give" in why
    d, why = good.choose(place["run_dir"], NAME, "f" * 64, secrets=["k3y-k3y-k3y-k3y-k3y"])
    assert why is None and d["fingerprint"] == first["fingerprint"]
    assert good.describe(d) == first["fingerprint"][:16] + ", SGLang 0.5.23"
    assert d["argv"] == first["argv"] and d["environment"] == {"A": "1"} and d["run_as"] == "sglang"
    os.chmod(place["config"], 0o640)
    assert good.restore(place["run_dir"], d, ["k3y-k3y-k3y-k3y-k3y"]) == [place["config"]]
    assert open(place["config"]).read() == "model-path: /m\napi-key: k3y-k3y-k3y-k3y-k3y\n"
    assert stat.S_IMODE(os.stat(place["config"]).st_mode) == 0o600  # the recorded mode
    assert good.restore(place["run_dir"], d) == []  # intact now: nothing to do


def test_the_failed_deployment_is_never_chosen_and_a_gone_venv_is_said(place):
    first = inputs(place)
    good.record(place["run_dir"], NAME, running(first["fingerprint"]), first, 2, 1000.0)
    d, why = good.choose(place["run_dir"], NAME, first["fingerprint"])
    assert d is None and "other than the one that failed" in why
    os.unlink(place["python"])
    d, why = good.choose(place["run_dir"], NAME, "f" * 64)
    assert d is None and "its python %s is gone" % place["python"] in why


def test_a_changed_file_without_a_copy_is_not_rolled_back_to(place, monkeypatch):
    monkeypatch.setattr(good, "COPY_LIMIT", 10)  # the worker file is larger: hash only, no copy
    first = inputs(place)
    good.record(place["run_dir"], NAME, running(first["fingerprint"]), first, 1, 1000.0)
    with open(place["worker"], "a") as fh:
        fh.write("# re-patched\n")
    d, why = good.choose(place["run_dir"], NAME, "f" * 64)
    assert d is None and "%s changed since it was good" % place["worker"] in why and "no copy" in why


def test_keep_drops_the_oldest_and_its_copies(place):
    a = inputs(place, "0.5.21")
    good.record(place["run_dir"], NAME, running(a["fingerprint"], "t1"), a, 2, 1.0)
    b = inputs(place, "0.5.22", ["--x"])
    good.record(place["run_dir"], NAME, running(b["fingerprint"], "t2"), b, 2, 2.0)
    c = inputs(place, "0.5.23", ["--y"])
    changed, report = good.record(place["run_dir"], NAME, running(c["fingerprint"], "t3"), c, 2, 3.0)
    assert [k["sglang_version"] for k in report["good_kept"]] == ["0.5.23", "0.5.22"]
    left = sorted(f for f in os.listdir(place["run_dir"]) if ".good-" in f)
    assert left == sorted("sglang.good-%s-%d" % (x["fingerprint"][:16], i) for x in (b, c) for i in (0, 1))
    # the newest other than the failed one
    assert good.choose(place["run_dir"], NAME, c["fingerprint"])[0]["fingerprint"] == b["fingerprint"]


def test_a_record_for_another_server_is_refused(place):
    first = inputs(place)
    with pytest.raises(good.GoodRecordError, match="is not the deployment given"):
        good.record(place["run_dir"], NAME, running("0" * 64), first, 1, 1.0)


@pytest.mark.parametrize("forge", ["owner", "mode"])
def test_a_record_someone_less_privileged_could_have_written_is_refused(place, forge):
    first = inputs(place)
    good.record(place["run_dir"], NAME, running(first["fingerprint"]), first, 1, 1.0)
    rec = os.path.join(place["run_dir"], "sglang.good.json")
    forged = json.load(open(rec))
    forged["deployments"][0]["argv"] = ["/bin/sh", "-c", "evil"]
    with open(rec, "w") as fh:
        json.dump(forged, fh)
    if forge == "owner":
        os.chown(rec, 1000, 1000)  # the service user wrote it
    else:
        os.chmod(rec, 0o666)
    with pytest.raises(good.GoodRecordError, match="not trusted, nothing is rolled back"):
        good.choose(place["run_dir"], NAME, "f" * 64)


def test_a_copy_changed_behind_the_records_back_is_not_restored(place):
    first = inputs(place)
    good.record(place["run_dir"], NAME, running(first["fingerprint"]), first, 1, 1.0)
    with open(place["config"], "w") as fh:
        fh.write("changed\n")
    copy = os.path.join(place["run_dir"], "sglang.good-%s-0" % first["fingerprint"][:16])
    with open(copy, "w") as fh:
        fh.write("model-path: /elsewhere\n")
    d, why = good.choose(place["run_dir"], NAME, "f" * 64)
    assert d is None and "no longer matches the record" in why


def test_a_failed_smoke_test_is_judged_for_that_server_only(place):
    first = inputs(place)
    state = running(first["fingerprint"], "t1")
    assert good.judged_failed(place["run_dir"], NAME, state) is None
    good.judge(place["run_dir"], NAME, state, "failed", "at Check that speculative: spec_not_accepting", 1.0)
    assert good.judged_failed(place["run_dir"], NAME, state) == "at Check that speculative: spec_not_accepting"
    assert good.judged_failed(place["run_dir"], NAME, running(first["fingerprint"], "t2")) is None  # a new launch
    # a start that passes records it good, which clears the verdict
    good.record(place["run_dir"], NAME, state, first, 1, 2.0)
    assert good.judged_failed(place["run_dir"], NAME, state) is None


def test_a_forged_verdict_is_ignored(place):
    first = inputs(place)
    state = running(first["fingerprint"])
    good.judge(place["run_dir"], NAME, state, "failed", "x", 1.0)
    os.chown(os.path.join(place["run_dir"], "sglang.judged.json"), 1000, 1000)
    assert good.judged_failed(place["run_dir"], NAME, state) is None
