"""sglang_info's models look: sglang_model's own look (manifest + lstat) in the play's one call, its option checked
against sglang_model's argument spec, the token masked. No process."""

from __future__ import annotations

import grp
import json
import os

from ansible.module_utils import sglang_weights

from test_sglang_info import make_venv, run_module

ROOT_GROUP = grp.getgrgid(0).gr_name


def _fetched(tmp_path):
    """A model dir with one file as a fetch leaves it, and its manifest."""
    path = tmp_path / "models" / "m"
    path.mkdir(parents=True)
    os.chmod(path, 0o750)
    (path / "config.json").write_bytes(b"{}\n")
    os.chmod(path / "config.json", 0o640)
    entry = sglang_weights.entry_of(os.lstat(path / "config.json"), sglang_weights.hash_file(str(path / "config.json")))
    state = tmp_path / "state"
    state.mkdir()
    (state / "m.manifest.json").write_text(json.dumps({
        "version": 1, "name": "m", "path": str(path), "files": {"config.json": entry},
        "source": {"kind": "hub", "repo": "o/m", "revision": "main", "commit": "c" * 40, "allow_patterns": [],
                   "ignore_patterns": []}}))
    return {"models": [{"name": "m", "path": str(path), "repo": "o/m"}], "state_dir": str(state),
            "group": ROOT_GROUP, "file_mode": "0640", "dir_mode": "0750", "token": "hf_lookedtoken_0123456789"}


def test_the_look_says_a_fetched_model_is_in_place_without_a_process(tmp_path, monkeypatch):
    make_venv(tmp_path / "venv")
    models = _fetched(tmp_path)
    result = run_module(monkeypatch, venv=str(tmp_path / "venv"), models=models)
    assert result["models"]["in_place"] is True and result["_calls"] == []
    assert result["models"]["models"][0]["commit"] == "c" * 40
    os.chmod(os.path.join(models["models"][0]["path"], "config.json"), 0o644)
    again = run_module(monkeypatch, venv=str(tmp_path / "venv"), models=models)
    assert again["models"]["in_place"] is False
    assert again["models"]["models"][0]["why"] == "config.json: mode 0644, want 0640"
    assert "hf_lookedtoken_0123456789" not in json.dumps(again)


def test_a_models_option_sglang_model_would_refuse_fails_the_look(tmp_path, monkeypatch):
    make_venv(tmp_path / "venv")
    result = run_module(monkeypatch, venv=str(tmp_path / "venv"), models={"models": [{"name": "m"}]})
    assert result["failed"] and result["msg"].startswith("models: ") and "(the options of sglang_model)" in result["msg"]
