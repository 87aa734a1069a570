#!/usr/bin/python
# -*- coding: utf-8 -*-

# Copyright: eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_model
short_description: Put model weights on the host from the Hugging Face Hub, a seed directory or a peer, verified and resumable
description:
  - Makes each model of O(models) complete in its O(models[].path), every file checked against the size and hash its
    source lists, owned as asked (by default root's, readable by O(group), writable by no one else), and records what
    it verified in a manifest in O(state_dir).
  - A model is in place when its manifest is trusted (root's, in a directory only root can write), names the source
    asked for, and every file it lists is there with the recorded size, mtime, inode, owner, group and mode (C(lstat)
    only - no hashing, no network). Then nothing is done (C(changed=false)).
  - Otherwise, before any byte is fetched, the source is listed (a Hub repo through C(huggingface_hub) in the
    O(python) given - the revision resolved to its commit, every file's size, LFS SHA-256 and git blob SHA-1), each file
    is planned (keep, verify, fetch resuming its part file), and the free disk space is checked against the bytes
    still to fetch plus O(disk_margin_mib); a shortfall fails with the numbers, nothing changed.
  - The fetch runs in a program of its own (C(python -I -B <program_dir> run ...)), detached, one per model,
    which the module waits on by its status file. A lost connection loses nothing, and a re-run attaches to a fetch
    still running. A fetch killed halfway resumes on the next run where it stopped; a complete file is never fetched
    again.
  - Every file fetched or found is hashed once (SHA-256, and git blob SHA-1 for the small non-LFS files the Hub lists
    only by it); later runs check sizes and C(lstat) identity, and O(verify=full) hashes everything again. A wrong
    file is fetched again, only that file.
  - With the action plugin of the same name the task calls the module in steps and prints a progress line per host
    (bytes done and total, MB/s, ETA) at least every 30 s.
version_added: "1.0.0"
author:
  - eagle-deploy contributors (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  models:
    description:
      - The models. Each needs a source - O(models[].repo) (with O(models[].revision)), or O(models[].seed), or both
        (copy from the seed, check against the repo) - and may be copied from a peer (O(models[].peer)).
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: A name of its own on this host (letters, digits, C(.), C(_), C(-)); its state files are named after it.
        type: str
        required: true
      path:
        description: Where the server reads the model (an absolute directory path).
        type: path
        required: true
      repo:
        description: A Hugging Face repo id, for example C(moonshotai/Kimi-K2.5), on O(endpoint).
        type: str
      revision:
        description:
          - The repo's commit hash to pin; a branch or tag is resolved once, the commit is recorded in the manifest and
            kept until another revision is asked (the result warns with the hash to pin).
        type: str
        default: main
      seed:
        description:
          - A directory (local or a network mount) that already holds the files. When it is O(models[].path) itself the
            model is checked there and never written (owner and mode are left as they are); otherwise the files are
            copied from it.
        type: path
      allow_patterns:
        description: Only the repo's files that match one of these (fnmatch; C(dir/) for a whole directory).
        type: list
        elements: str
      ignore_patterns:
        description: Leave out the repo's files that match one of these.
        type: list
        elements: str
      peer:
        description:
          - Copy the files from another host that has the model (fan-out), with C(rsync) over SSH, instead of from the
            source; the copy is checked against the peer's manifest (O(models[].peer.files)), the same checksums the
            peer verified. The role sets this up (M(ansible.legacy.sglang_model_peer)).
        type: dict
        suboptions:
          address:
            description: The peer's address as this host reaches it.
            type: str
            required: true
          port:
            description: Its SSH port.
            type: int
            default: 22
          user:
            description: The SSH user on the peer.
            type: str
            default: root
          path:
            description: The model's directory on the peer.
            type: path
            required: true
          key:
            description: The private key of this copy (from M(ansible.legacy.sglang_model_peer)).
            type: path
            required: true
          host_keys:
            description: The peer's SSH host keys (C(type base64) lines); the only ones accepted for this copy.
            type: list
            elements: str
            required: true
          files:
            description: The files the peer verified (its manifest), each C({path, size, sha256, git_sha1}).
            type: list
            elements: dict
            required: true
          source:
            description: The source the peer's manifest names (repo, revision, commit); it must be the one asked here.
            type: dict
            required: true
  state_dir:
    description:
      - Where the manifests, status, job and log files live. Trusted only as the run state of
        M(ansible.legacy.wait_for_model) is - root's, writable by no one else, reached without symlinks through
        directories only root can write; created so when missing.
    type: path
    default: /var/lib/eagle-deploy/models
  endpoint:
    description: The Hub (or a site mirror of it), as C(HF_ENDPOINT) takes it.
    type: str
    default: https://huggingface.co
  token:
    description:
      - A Hub token for gated or private repos (keep it in Ansible Vault). It reaches the fetch program on its stdin
        only - never its argv, environment, a log or a file. Without it no token is used, not even one stored on the
        host.
    type: str
  python:
    description:
      - The Python that runs the fetch program - for a Hub source one with C(huggingface_hub) (the SGLang virtualenv's).
        Without it, the module's own interpreter (enough for a seed or a peer).
    type: path
  program_dir:
    description:
      - Where the model fetch program is installed - a directory C(__main__.py) + C(eagle_deploy/) that the role
        C(sglang_model) copies from its C(files/fetch) (C(tasks/program.yml), variable C(sglang_model_program_dir)),
        root-owned, files 0644, directories 0755; run as C(python -I -B <program_dir> list) (the listing of a Hub
        source) and C(... run STATE_DIR NAME) (a fetch). This module never writes it.
      - Before it runs the program the module refuses, saying what to fix, one that someone less privileged could
        have written - the directory or anything in it owned by another user than root or the module's, writable by
        its group or others, a symlink in it or on its path, or a directory above it writable by others (a sticky
        root-owned one such as C(/tmp) excepted) - and one not installed.
      - Default C(<state_dir>/fetch-program).
    type: path
  owner:
    description: Owner of the model's files and directories.
    type: str
    default: root
  group:
    description: Group of the model's files and directories (the service user's group, which reads them).
    type: str
    default: root
  file_mode:
    description: Mode of the files (a string such as C("0640")).
    type: raw
    default: "0644"
  dir_mode:
    description: Mode of the directories.
    type: raw
    default: "0755"
  verify:
    description: V(auto) hashes a file when it is fetched or first found; V(full) hashes every file again now.
    type: str
    choices: [auto, full]
    default: auto
  disk_margin_mib:
    description: Free space that must remain after the fetch, in MiB.
    type: int
    default: 10240
  parallel:
    description: Files fetched at the same time per model (Hub or seed; a peer copy is one rsync).
    type: int
    default: 4
  timeout:
    description:
      - Seconds a call waits for the fetch at most (V(0) - until it ends). With the action plugin, the steps end after
        it; the fetch goes on, and a re-run attaches to it.
    type: int
    default: 0
notes:
  - The fetch program uses C(huggingface_hub)'s own C(get_hf_file_metadata) and C(http_get) (its C(Range) resume),
    with a part file of a stable name. C(hf_hub_download) and C(snapshot_download) cannot resume a file across runs
    (their incomplete file is unique to the process and removed on failure), and C(hf_xet) is not used.
  - A file larger than C(huggingface_hub)'s C(MAX_HTTP_DOWNLOAD_SIZE) (50 GB in 2.4.0) cannot be fetched over HTTP.
attributes:
  check_mode:
    support: full
    details: Looks at the manifests and files only; reports what would be fetched. The source is not asked.
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Put Kimi-K2.5 and its EAGLE-3 draft on the host
  ansible.legacy.sglang_model:
    models:
      - name: Kimi-K2.5-INT4
        repo: moonshotai/Kimi-K2.5
        revision: 0123456789abcdef0123456789abcdef01234567
        path: /data/models/Kimi-K2.5-INT4
      - name: Kimi-K2.5-EAGLE3
        repo: lightseekorg/kimi-k2.5-eagle3
        revision: 89abcdef0123456789abcdef0123456789abcdef
        path: /data/models/Kimi-K2.5-EAGLE3
    python: /opt/sglang/venv/bin/python
    token: "{{ vault_hf_token }}"
    group: sglang
    file_mode: "0640"
    dir_mode: "0750"

- name: Check a model already on a network mount where the server reads it
  ansible.legacy.sglang_model:
    models:
      - name: Kimi-K2.5-INT4
        seed: /mnt/models/Kimi-K2.5-INT4
        path: /mnt/models/Kimi-K2.5-INT4
"""

RETURN = r"""
models:
  description: One entry per model - C(in_place) before this run, C(action) (V(kept), V(fetched), V(copied),
    V(attached), V(would_fetch)), C(why) it was not in place, C(commit), C(files), C(bytes), and for a fetch its
    C(summary) (C(fetched), C(refetched), C(verified), C(kept) file counts).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "Kimi-K2.5-INT4", "path": "/data/models/Kimi-K2.5-INT4", "in_place": true, "action": "kept",
            "commit": "0123456789abcdef0123456789abcdef01234567", "files": 72, "bytes": 547000000000}]
pending:
  description: True when the call's O(timeout) (or the action plugin's step) ended while a fetch still runs.
  returned: always
  type: bool
  sample: false
progress:
  description: The fetch as the action plugin prints it - C(phase), C(models), C(total), C(present) (bytes of the models
    on disk), C(files_done), C(files_total), C(rate) and C(hash_rate) (bytes/s), C(eta) (s), C(elapsed) (s).
  returned: when a fetch ran or runs
  type: dict
  sample: {"phase": "fetching", "models": ["Kimi-K2.5-INT4"], "total": 547000000000, "present": 312400000000,
           "files_done": 31, "files_total": 72, "rate": 210300000.0, "eta": 1120.0, "elapsed": 724.0}
jobs:
  description: The fetch jobs this call started or attached to, name to job id (the action plugin's steps carry them).
  returned: always
  type: dict
  sample: {"Kimi-K2.5-INT4": "5f1c0e9a2b7d4c31"}
"""

import json
import os
import secrets
import shutil
import sys
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils import sglang_weights, sglang_hub_fetch, sglang_proc, sglang_program
from ansible.module_utils.sglang_weights import ARGUMENT_SPEC, ModelError, state_files
from ansible.module_utils.sglang_progress import operator_text

POLL = 0.5
START_GRACE = 10.0  # seconds a fetch program started may take to take its lock


INSTALLER = "the role sglang_model (tasks/program.yml)"


def fetch_program(params):
    """The fetch program's directory (O(program_dir), default ``<state_dir>/fetch-program``), once checked: installed
    by the role, and nothing in it or above it writable by anyone less privileged than this module
    (sglang_program.check). The module runs it; it never writes it."""
    directory = params.get("program_dir") or os.path.join(params["state_dir"], sglang_program.FETCH_DIR)
    try:
        sglang_program.check(directory, "the model fetch program", INSTALLER)
    except (sglang_program.ProgramError, OSError) as e:
        raise ModelError(str(e))
    return directory


def known_hosts_text(address, port, host_keys):
    host = address if port == 22 else "[%s]:%d" % (address, port)
    lines = []
    for key in host_keys:
        parts = str(key).split()
        if len(parts) >= 2:
            lines.append("%s %s %s\n" % (host, parts[0], parts[1]))
    return "".join(lines)


class Host(object):
    """What the module does to the host besides reading files: run the lister, start a fetch program, ask whether one
    runs. Injectable, so that unit tests spawn nothing."""

    def __init__(self, module):
        self.module = module

    def list_repo(self, python, request, env):
        """The lister's answer: the installed fetch program (``list``), its huggingface_hub home in a private
        temporary directory (0700, removed after), so that listing leaves nothing on the host."""
        program = fetch_program(self.module.params)
        tmp = tempfile.mkdtemp(prefix="eagle-deploy-model-list-")
        try:
            env = dict(env, HF_HOME=os.path.join(tmp, "hf-home"))
            rc, out, err = self.module.run_command(sglang_program.argv(python, program, "list"),
                                                   data=json.dumps(request), environ_update=env, binary_data=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if rc != 0:
            return {"error": "lister_failed", "msg": "the file lister ended with %d: %s" % (
                rc, (err or out or "").strip()[-600:])}
        try:
            return json.loads(out)
        except ValueError:
            return {"error": "lister_failed", "msg": "the file lister printed no JSON: %s" % (out or "")[-300:]}

    def spawn(self, argv, log_path, stdin_text, env):
        return sglang_weights.spawn_detached(argv, log_path, stdin_text, env)

    @staticmethod
    def running(state_dir, name):
        """Whether a fetch program of ``name`` holds its lock (never creates the lock file)."""
        import fcntl
        try:
            fd = os.open(os.path.join(state_dir, state_files(name)["lock"]), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False


class SourceListing(object):
    """What a model's source lists: a Hub repo (through the lister), a seed directory, a peer's manifest."""

    def hub_request(self, model):
        return {"endpoint": self.p["endpoint"], "repo": model["repo"], "revision": model["revision"],
                "token": self.p["token"], "allow_patterns": model.get("allow_patterns"),
                "ignore_patterns": model.get("ignore_patterns")}

    def python_for(self, model):
        """The Python that lists and fetches from the Hub: the one given (with huggingface_hub)."""
        python = self.p["python"]
        if not python:
            raise ModelError("model %s: a Hub source needs python: the SGLang virtualenv's python, which has "
                             "huggingface_hub" % model["name"])
        if not os.path.isfile(python) or not os.access(python, os.X_OK):
            raise ModelError("model %s: python %s is not an executable file: give the SGLang virtualenv's python "
                             "(the install role makes it)" % (model["name"], python))
        return python

    def list_hub(self, model):
        env = sglang_hub_fetch.hub_env(self.p["endpoint"], "")
        answer = self.host.list_repo(self.python_for(model), self.hub_request(model), env)
        err = answer.get("error")
        if err:
            raise ModelError(self.hub_words(model, err, answer.get("msg", "")), hub_error=err)
        if not sglang_weights.is_commit(answer.get("commit")):
            raise ModelError("model %s: the Hub answered no commit hash for %s@%s" % (
                model["name"], model["repo"], model["revision"]))
        if model["revision"] != answer["commit"]:
            self.warnings.append("model %s: revision %s of %s is commit %s; pin it (revision: %s) so that every host "
                                 "and every run fetches the same files" % (model["name"], model["revision"],
                                                                           model["repo"], answer["commit"],
                                                                           answer["commit"]))
        return answer["commit"], sglang_weights.check_listing(model["name"], answer["files"])

    def hub_words(self, model, err, msg):
        where = "%s@%s on %s" % (model["repo"], model["revision"], self.p["endpoint"])
        if err == "revision_not_found":
            return ("model %s: revision %s not found in %s (%s): pin an existing commit hash or branch. Nothing was "
                    "fetched or changed" % (model["name"], model["revision"], model["repo"], self.p["endpoint"]))
        if err == "gated":
            why = "no token was given" if not self.p["token"] else "the token given has no access to it"
            return ("model %s: %s is a gated repo and %s: accept its terms on the Hub with the account of the token, "
                    "and give the token (sglang_model_hf_token, from Ansible Vault). Nothing was fetched or changed"
                    % (model["name"], model["repo"], why))
        if err in ("repo_not_found", "unauthorized"):
            return ("model %s: repo %s not found on %s, or not visible without a token (%s): check the repo id, or "
                    "give a token that can read it. Nothing was fetched or changed" % (
                        model["name"], model["repo"], self.p["endpoint"], msg))
        if err == "no_huggingface_hub":
            return ("model %s: %s; install it into that virtualenv (the role does with sglang_model_hf_packages). "
                    "Nothing was fetched or changed" % (model["name"], msg))
        return "model %s: listing %s failed: %s. Nothing was fetched or changed" % (model["name"], where, msg)

    def list_seed(self, model):
        """The seed's files (walked here, symlinks to files followed); their hashes come from the repo when one is
        given, else from the seed itself as it is now (recorded in the manifest)."""
        seed = model["seed"]
        if not os.path.isdir(seed):
            raise ModelError("model %s: seed %s is not a directory: mount or fill it, or drop seed" % (
                model["name"], seed))
        files = []
        for root, dirs, names in os.walk(seed):
            dirs[:] = sorted(d for d in dirs if not (root == seed and d == sglang_weights.STAGING) and not d.startswith("."))
            for fname in sorted(names):
                full = os.path.join(root, fname)
                rel = os.path.relpath(full, seed)
                if fname.startswith(".") or not os.path.isfile(full):
                    continue
                files.append({"path": rel, "size": os.path.getsize(full), "sha256": None, "git_sha1": None})
        keep = set(sglang_weights.selected([f["path"] for f in files], model.get("allow_patterns"),
                                           model.get("ignore_patterns")))
        return [f for f in files if f["path"] in keep]

    def listing(self, model):
        """(record_source, job source, listing) of a model not in place."""
        src = sglang_weights.wanted_source(model)
        peer = model.get("peer")
        if peer:
            rec = dict(peer["source"])
            rec["via"] = "%s:%s" % (peer["address"], peer["path"])
            files = [{"path": f["path"], "size": int(f["size"]), "sha256": f.get("sha256"),
                      "git_sha1": f.get("git_sha1")} for f in peer["files"]]
            return rec, {"kind": "peer"}, sglang_weights.check_listing(model["name"], files)
        if model.get("repo"):
            commit, files = self.list_hub(model)
            src["commit"] = commit
            if model.get("seed"):
                have = dict((f["path"], f) for f in self.list_seed(model))
                missing = [f["path"] for f in files if f["path"] not in have]
                if sglang_weights.seed_in_place(model) and missing:
                    raise ModelError("model %s: the seed %s lacks %d file(s) of %s@%s (%s): put them there, or fetch "
                                     "into another path" % (model["name"], model["seed"], len(missing), model["repo"],
                                                            commit, ", ".join(missing[:5])))
                return src, {"kind": "seed" if not missing else "hub"}, files
            return src, {"kind": "hub"}, files
        return src, {"kind": "seed"}, sglang_weights.check_listing(model["name"], self.list_seed(model))


class JobFiles(object):
    """A model's job and status files in the state dir, and whether its fetch program runs."""

    def read_status(self, name):
        try:
            return sglang_proc.read_json(self.state_dir, state_files(name)["status"])
        except (OSError, sglang_proc.UntrustedState):
            return None

    def starting_or_running(self, name, job, status):
        """Whether the fetch program of ``job`` holds its lock, or was started so lately that it may not have taken it
        yet (and has written no verdict)."""
        if self.host.running(self.state_dir, name):
            return True
        ours = status if status and status.get("job_id") == job.get("job_id") else None
        return bool(job.get("job_id")) and ours is None and 0 <= self.wall() - float(job.get("spawned_at") or 0) < START_GRACE

    def read_job(self, name):
        try:
            return sglang_proc.read_json(self.state_dir, state_files(name)["job"])
        except (OSError, sglang_proc.UntrustedState):
            return None


class FetchWait(object):
    """The wait on the fetch programs' status files, and the call's result."""

    def wait(self, results, jobs):
        """Wait on the status files of ``jobs`` until every one has a verdict, or the step (or timeout) ends."""
        step = self.p.get("_step_time")
        limit = self.p["timeout"] or None
        if step is not None:
            limit = step if limit is None else min(limit, step)
        started = self.clock()
        while True:
            statuses = {}
            for name, job_id in jobs.items():
                st = self.read_status(name)
                if st is not None and st.get("job_id") != job_id:
                    st = None
                statuses[name] = st
            pending = []
            for name, st in statuses.items():
                if st is not None and st.get("verdict"):
                    continue
                if not self.host.running(self.state_dir, name):
                    # The lock is free and no verdict: the program ended, or has not taken its lock yet (it writes
                    # its first status right after taking it, and was spawned at the job's spawned_at).
                    job = self.read_job(name) or {}
                    if st is not None or self.wall() - float(job.get("spawned_at") or 0) > START_GRACE:
                        st = self.read_status(name) or {}
                        if not (st.get("job_id") == jobs[name] and st.get("verdict")):
                            self.fail_dead(name, st, results, statuses)
                        statuses[name] = st
                        continue
                pending.append(name)
            if not pending:
                return self.done(results, jobs, statuses)
            if limit is not None and self.clock() - started >= limit:
                # In steps (the action plugin), the step that sees the verdicts says whether anything changed (a full
                # verification that finds everything right changes nothing); a call on its own that leaves a fetch
                # running has changed the host.
                stepped = self.p.get("_step_time") is not None
                out = self.finish(results, jobs, changed=not stepped and any(
                    r.get("action") in ("fetched", "copied") for r in results), statuses=statuses)
                out["pending"] = True
                return out
            self.sleep(POLL)

    def fail_dead(self, name, st, results, statuses):
        present = progress_of(results, statuses).get("present")
        raise ModelError("model %s: the fetch program (PID %s) ended without a verdict (killed?); what it fetched "
                         "stays: %s of the model are on disk, and the next run resumes there (read %s)" % (
                             name, (st or {}).get("pid"), sglang_weights.gib(present or 0),
                             os.path.join(self.state_dir, state_files(name)["log"])),
                         models=results, progress=progress_of(results, statuses))

    def done(self, results, jobs, statuses):
        failed = [(n, s) for n, s in statuses.items() if s and s.get("verdict") == "failed"]
        by_name = dict((r["name"], r) for r in results)
        for name, st in statuses.items():
            if st:
                by_name[name]["summary"] = st.get("summary")
                if st.get("verdict") == "done":
                    by_name[name]["action"] = action_of(st.get("summary"))
        if failed:
            errs = []
            for name, st in failed:
                for e in st.get("errors") or []:
                    errs.append("%s: %s%s" % (name, (e.get("path") + ": ") if e.get("path") else "", e.get("why")))
            raise ModelError("fetch failed: %s. Files already complete stay in place; the next run fetches only what "
                             "is missing" % "; ".join(errs[:10]), models=results,
                             progress=progress_of(results, statuses), errors=errs)
        changed = any(((s or {}).get("summary") or {}).get("changed", False) for s in statuses.values())
        return self.finish(results, jobs, changed=changed, statuses=statuses)

    def finish(self, results, jobs, changed, statuses=None):
        out = {"changed": changed, "models": results, "pending": False, "jobs": dict(jobs) if jobs else {}}
        if statuses:
            out["progress"] = progress_of(results, statuses)
        for w in self.warnings:
            self.module.warn(w)
        return out


class ModelFetch(SourceListing, JobFiles, FetchWait):
    """One call: the look, the plan and its checks, the fetch programs started or attached to, and the wait."""

    def __init__(self, module, host=None, clock=time.monotonic, sleep=time.sleep, wall=time.time):
        self.module = module
        self.wall = wall
        self.p = module.params
        self.host = host or Host(module)
        self.clock = clock
        self.sleep = sleep
        self.check = module.check_mode
        self.warnings = []
        self.state_dir = self.p["state_dir"]

    # ---------------------------------------------------------------- inputs
    def validate(self):
        p = self.p
        sglang_weights.check_models(p["models"])
        if not 1 <= p["parallel"] <= 64:
            raise ModelError("parallel must be 1-64 (got %d)" % p["parallel"])
        if p["disk_margin_mib"] < 0 or p["timeout"] < 0:
            raise ModelError("disk_margin_mib and timeout must be >= 0")
        if not p["endpoint"].startswith(("http://", "https://")):
            raise ModelError("endpoint must be an http(s) URL such as https://huggingface.co (got %r)" % p["endpoint"])
        for m in p["models"]:
            peer = m.get("peer")
            if peer:
                ok, why = sglang_weights.source_matches(peer["source"], m)
                if not ok:
                    raise ModelError("model %s: the peer %s holds another source (%s): fan-out copies only the model "
                                     "asked for" % (m["name"], peer["address"], why))
                sglang_weights.check_listing(m["name"], peer["files"])
        try:
            return sglang_weights.ownership_of(p)
        except ModelError as e:
            if not self.check:
                raise
            self.warnings.append("%s (check mode: the play may create it before the fetch)" % e.msg)
            return None

    def state_dir_ready(self):
        """Whether the state dir exists (and is trusted: UntrustedState when anyone else could write it). Nothing is
        created before a fetch has passed its checks."""
        if not os.path.lexists(self.state_dir):
            return False
        os.close(sglang_proc.open_run_dir(self.state_dir))
        return True

    # ---------------------------------------------------------------- program
    def installed_program(self):
        """The fetch program the role installed (fetch_program)."""
        return fetch_program(self.p)

    # ---------------------------------------------------------------- the call
    def run(self):
        ownership = self.validate()
        p = self.p
        if ownership is None:  # check mode on a host without the owner or group yet
            results = [{"name": m["name"], "path": m["path"], "in_place": False, "action": "would_fetch",
                        "why": "owner or group not on the host yet"} for m in p["models"]]
            return self.finish(results, [], changed=True)
        results, to_start, attached = self.look_all(ownership)
        if self.check:
            return self.finish(results, [], changed=any(r["action"] == "would_fetch" for r in results))
        plans = [self.plan_one(model, entry, ownership) for model, entry in to_start]
        shortfall = sglang_weights.disk_shortfall([(plan[0]["name"], plan[0]["path"], plan[5]) for plan in plans],
                                                  p["disk_margin_mib"] << 20)
        if shortfall:
            raise ModelError(shortfall, models=[plan[1] for plan in plans])
        jobs = self.start_all(plans, ownership, attached)
        for model, job_id in attached:
            jobs[model["name"]] = job_id
        return self.wait(results, jobs)

    def look_all(self, ownership):
        """(results, to_start, attached): each model looked at - kept, attached to its running fetch, would be
        fetched (check mode), or to start."""
        p = self.p
        state_dir_ok = self.state_dir_ready()
        jobs_seen = p.get("_jobs") or {}
        results, to_start, attached = [], [], []
        for model in p["models"]:
            look = sglang_weights.look_model(model, self.state_dir, ownership, p["verify"]) if state_dir_ok else {
                "name": model["name"], "path": model["path"], "in_place": False, "why": "no state dir yet"}
            entry = dict(look)
            results.append(entry)
            status = self.read_status(model["name"]) if state_dir_ok else None
            job = (self.read_job(model["name"]) or {}) if state_dir_ok else {}
            if job.get("job_id") and job.get("job_id") == jobs_seen.get(model["name"]):
                # This task's own fetch of the model (an earlier step started it): wait on it, never a second one
                # within one task (even with verify=full).
                entry["action"] = "attached"
                attached.append((model, job["job_id"]))
                continue
            if look["in_place"]:
                entry["action"] = "kept"
                continue
            if state_dir_ok and self.starting_or_running(model["name"], job, status):
                # A fetch an earlier run started (its connection was lost): attach to it.
                self.check_attachable(model, job, status)
                entry["action"] = "attached"
                attached.append((model, job.get("job_id")))
                continue
            if self.check:
                entry["action"] = "would_fetch"
                continue
            to_start.append((model, entry))
        return results, to_start, attached

    @staticmethod
    def check_attachable(model, job, status):
        """A running fetch of the model is attached to only when it fetches the source and path asked for."""
        ok, why = sglang_weights.source_matches(job.get("record_source"), model)
        if not ok or os.path.normpath(job.get("path") or "") != os.path.normpath(model["path"]):
            raise ModelError("model %s: a fetch of another source or path runs (PID %s; %s): let it end, or "
                             "stop it (kill %s), then run again" % (
                                 model["name"], (status or {}).get("pid"), why or "path %s" % job.get("path"),
                                 (status or {}).get("pid")))

    def plan_one(self, model, entry, ownership):
        """(model, entry, record_source, source, tasks, need) of a model to fetch: its source listed, each file
        planned against the manifest, a seed read in place checked readable and complete."""
        p = self.p
        record_source, source, listing = self.listing(model)
        manifest = sglang_weights.read_manifest(self.state_dir, model["name"])[0]
        if manifest and os.path.normpath(manifest.get("path") or "") != os.path.normpath(model["path"]):
            manifest = None
        if manifest and not sglang_weights.source_matches(manifest.get("source"), model)[0]:
            manifest = None
        tasks, need = sglang_weights.plan(model, listing, manifest, p["verify"])
        if source["kind"] == "seed" and sglang_weights.seed_in_place(model):
            need = 0
            cannot = sglang_weights.unreadable(model["path"], [t["path"] for t in tasks], ownership[1])
            if cannot:
                raise ModelError("model %s: the service group (%s) cannot read %s in the seed read in place: make "
                                 "it readable for that group or for others (it is never changed here)" % (
                                     model["name"], p["group"], cannot))
            for t in tasks:
                if t["action"] == "fetch":
                    raise ModelError("model %s: %s in the seed read in place is %s: it is never written here; "
                                     "put the file there" % (model["name"], t["path"], "missing" if not os.path.exists(
                                         os.path.join(model["path"], t["path"])) else "of another size than listed"))
        return model, entry, record_source, source, tasks, need

    def start_all(self, plans, ownership, attached):
        """{name: job id} of the fetches started, under the planning lock; a model whose fetch another run started
        meanwhile is attached to instead (added to ``attached``)."""
        jobs = {}
        if plans:
            sglang_weights.make_state_dir(self.state_dir)
            lock_fd = self.planning_lock()
            try:
                program = self.installed_program()
                for model, entry, record_source, source, tasks, need in plans:
                    job = self.read_job(model["name"]) or {}
                    if self.starting_or_running(model["name"], job, self.read_status(model["name"])):
                        # another run started it while this one listed the source
                        entry["action"] = "attached"
                        attached.append((model, job.get("job_id")))
                        continue
                    jobs[model["name"]] = self.start(program, model, entry, record_source, source, tasks, ownership)
            finally:
                os.close(lock_fd)
        return jobs

    def planning_lock(self):
        """The state dir's lock for starting fetches: two runs at once never start two fetches of one model."""
        import fcntl
        fd = os.open(os.path.join(self.state_dir, "models.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def start(self, program, model, entry, record_source, source, tasks, ownership):
        uid, gid, fmode, dmode = ownership
        name = model["name"]
        job_id = secrets.token_hex(8)
        job = {
            "job_id": job_id, "name": name, "path": os.path.normpath(model["path"]), "source": source,
            "record_source": record_source, "tasks": tasks, "managed": not sglang_weights.seed_in_place(model),
            "uid": uid, "gid": gid, "file_mode": fmode, "dir_mode": dmode, "owner": self.p["owner"],
            "group": self.p["group"], "parallel": self.p["parallel"], "endpoint": self.p["endpoint"],
            "repo": model.get("repo"), "commit": record_source.get("commit"), "seed": model.get("seed"),
        }
        peer = model.get("peer")
        if peer:
            rsync = self.module.get_bin_path("rsync")
            if not rsync:
                raise ModelError("model %s: rsync is needed to copy from the peer %s: install it on both hosts" % (
                    name, peer["address"]))
            known = os.path.join(self.state_dir, "%s.known_hosts" % name)
            sglang_proc.write_files(self.state_dir, [(os.path.basename(known), known_hosts_text(
                peer["address"], peer["port"], peer["host_keys"]))], mode=0o644)
            job["peer"] = {"address": peer["address"], "port": peer["port"], "user": peer["user"],
                           "path": peer["path"], "key": peer["key"], "known_hosts": known, "rsync": rsync}
        files = state_files(name)
        job["spawned_at"] = self.wall()
        sglang_proc.write_files(self.state_dir, [(files["job"], json.dumps(job))], mode=0o600)
        python = self.python_for(model) if source["kind"] == "hub" else (self.p["python"] or sys.executable)
        env = {"PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
               "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
        env.update(sglang_hub_fetch.hub_env(self.p["endpoint"], os.path.join(self.state_dir, "hf-home")))
        pid = self.host.spawn(sglang_program.argv(python, program, "run", self.state_dir, name),
                              os.path.join(self.state_dir, files["log"]),
                              json.dumps({"token": self.p["token"]} if self.p["token"] else {}), env)
        entry.update(action="copied" if peer else "fetched", pid=pid, commit=record_source.get("commit"),
                     files=len(tasks), bytes=sum(t["size"] for t in tasks))
        return job_id


def action_of(summary):
    """What a finished fetch did to a model, in the result's words: ``copied`` (from a peer), ``fetched`` (from the
    Hub or a seed), ``verified`` (every file was there already: hashed, owner and mode set, recorded)."""
    summary = summary or {}
    if not summary.get("fetched"):
        return "verified"
    return "copied" if summary.get("source") == "peer" else "fetched"


def progress_of(results, statuses):
    """The jobs' statuses as one progress for the action plugin's line."""
    live = [s for s in statuses.values() if s]
    if not live:
        return {"phase": "starting", "models": sorted(statuses)}
    phases = [s.get("phase") for s in live]
    phase = next((p for p in ("failed", "fetching", "copying", "verifying", "finishing", "starting") if p in phases),
                 "done")
    total = sum(s.get("total") or 0 for s in live)
    left = sum(max(0, (s.get("fetch_total") or 0) - (s.get("fetch_done") or 0)) for s in live)
    rates = [s.get("rate") for s in live if s.get("rate") is not None]
    hash_rates = [s.get("hash_rate") for s in live if s.get("hash_rate") is not None]
    etas = [s.get("eta") for s in live if s.get("verdict") is None]
    return {
        "phase": phase, "models": sorted(statuses), "total": total, "present": total - left,
        "files_done": sum(s.get("files_done") or 0 for s in live),
        "files_total": sum(s.get("files_total") or 0 for s in live),
        "hash_done": sum(s.get("hash_done") or 0 for s in live),
        "hash_total": sum(s.get("hash_total") or 0 for s in live),
        "rate": sum(rates) if rates else None, "hash_rate": sum(hash_rates) if hash_rates else None,
        "eta": (max(etas) if etas and None not in etas else None),
        "elapsed": max(s.get("elapsed") or 0 for s in live),
        "resumed_bytes": sum(s.get("resumed_bytes") or 0 for s in live),
        "copy": all(s.get("source") == "peer" for s in live),
    }


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    fetch = ModelFetch(module)
    try:
        result = fetch.run()
    except ModelError as e:
        for w in fetch.warnings:
            module.warn(w)
        module.fail_json(msg=operator_text(e.msg), **operator_text(e.extra))
    except sglang_proc.UntrustedState as e:
        module.fail_json(msg="state_dir %s: %s" % (module.params["state_dir"], e))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
