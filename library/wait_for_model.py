#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: wait_for_model
short_description: Run an SGLang server (systemd unit or detached) and block until it is healthy or has crashed
description:
  - Starts an SGLang server (or anything shaped like one) under a systemd unit and the host watcher program
    (O(launcher=systemd)) or as a detached process tree (O(launcher=detached)), with its output in a per-attempt
    log file, and blocks until the health URL answers 200, a crash is seen, or the deadline passes.
  - What acts is evidence that no client can write - the launched process exiting, a long-lived child
    of it (a scheduler, the detokenizer) dying while the parent lives on, neither log growth nor any
    health answer for O(stall_timeout) seconds (a hang), not healthy by O(timeout); once it serves, the health
    URL failing O(unhealthy_after) requests in a row. The supervisor program decides; the module follows neither the
    log nor the processes itself (O(state=watched) waits on the supervisor's word).
  - The log explains and hurries; it never acts alone. Its crash signatures (C(module_utils/sglang_log.py),
    built against real SGLang logs) name the class, the hint, the deciding line and the traceback of a
    failure that evidence proved, and make the module ask the health URL at once. A crash the log shows
    while every process lives and the health URL answers 200 to a request sent after the line was read is
    returned as RV(log_crash) with a warning, and nothing is stopped or failed (a serving server's log also
    holds what clients wrote, in uvicorn's access lines and C(--log-requests) echoes). A crash is reported within a
    poll (0.1 s) of the evidence.
  - No secret reaches the log file. The server's output is a pipe to its supervisor program
    (C(module_utils/sglang_watcher.py), both launchers), which replaces each secret (O(api_key),
    O(secret_environment), O(redact)) with C(***) in every form a log line can show it (raw, Python repr, JSON,
    percent-encoded; C(module_utils/sglang_redact.py)) before it is written. SGLang logs its C(server_args), the
    API key included.
  - Idempotent. When our server is running and healthy and its fingerprint (argv, environment,
    the hashes of O(fingerprint_files) and O(fingerprint_data)) is unchanged, nothing is touched
    and C(changed=false). When it is running with the same fingerprint but did not answer the first
    health request (still loading after an interrupted run, or busy), the module attaches to it and waits on its
    supervisor's word instead of restarting a 10-minute load (a detached server whose supervisor program is gone
    and that does not answer is restarted, after the same checks as any restart).
  - Our previous server is stopped (its whole process tree, found from the run-state file and
    verified by start time, boot id and command line, so that a reused PID is never signalled;
    SIGTERM, then SIGKILL after O(stop_timeout)). A process that is not ours is never signalled.
version_added: "1.0.0"
author:
  - eagle-deploy contributors
options:
  name:
    description:
      - Base name of the log files (C(<name>_r<N>.log), C(<name>.log)), run-state files (C(<name>.pid),
        C(<name>.json)) and lock file (C(<name>.lock)).
      - Letters, digits, C(.), C(_) and C(-), at most 64 characters; no C(/) and no C(..).
    type: str
    default: sglang
  state:
    description:
      - C(started) launches (or keeps) the server and waits for it.
      - C(stopped) stops our server's process tree, only ours, and removes the run state.
      - C(watched) launches and watches nothing itself; it needs our server recorded and its supervisor running
        (the unit active, or the detached supervisor program alive), else it fails (nothing watches the server -
        run with C(started) to put a supervisor back). For O(watch_time) seconds it waits on the supervisor's status
        file and asks the health URL itself (every O(health_interval) s; the supervisor asks a serving server only
        every O(serve_health_interval) s). It fails with the supervisor's report (class, deciding line, traceback)
        when the supervisor decided a failure of the recorded attempt, before or during the window (a first decode
        request that killed the server, say), or when its own health requests failed O(unhealthy_after) in a row.
        It ends healthy only once the window is over, the supervisor has read the log to where it ended then with
        no crash line standing there (a crash line the supervisor neither proved nor cleared yet keeps the watch
        going), and its last health request answered 200. Crash lines the supervisor set aside (the server
        outlived them) at or after O(log_offset) are returned as RV(log_crash) with a warning. Use it after smoke
        requests.
    type: str
    choices: [started, stopped, watched]
    default: started
  argv:
    description:
      - The command to launch, as a list (never a shell string). Required with O(state=started).
      - Do not put secrets here, they would be visible in C(ps); use a config file (SGLang's C(--config)).
    type: list
    elements: str
  environment:
    description:
      - Variables added to a minimal environment (C(PATH), C(LANG), C(HOME), C(USER), C(LOGNAME)).
        Part of the fingerprint.
    type: dict
    default: {}
  secret_environment:
    description:
      - Variables for the server that are secrets (C(HF_TOKEN), say). Like O(environment), but masked in
        Ansible's output, only their hash enters the fingerprint, and their values are redacted from the log.
      - A value of 1 to 3 characters is refused (it could not be masked in the log without masking every such
        string; a value that short is no secret - put it in O(environment)).
      - With O(launcher=systemd) the values are in the watcher program's 0600 config C(<run_dir>/<name>.watcher.json)
        (they go into the server's environment); O(state=stopped) removes that file.
    type: dict
    default: {}
  redact:
    description:
      - More strings to redact from the server's log (with O(api_key) and the O(secret_environment) values,
        which always are). Each is replaced by C(***) in every form a log line can show it.
      - A string shorter than 4 characters is not redacted (it would mask every such string of the log); the
        module warns, naming the option, never the value. (A short O(api_key) or O(secret_environment) value is
        refused instead.)
      - Part of the fingerprint (by hash), so a change restarts the server, whose supervisor then knows the new list.
    type: list
    elements: str
    default: []
  chdir:
    description: Working directory of the server.
    type: path
  log_dir:
    description: Directory of the per-attempt log files. Must exist and be writable.
    type: path
    required: true
  run_dir:
    description:
      - Directory of the run-state files and the lock file. Defaults to O(log_dir).
      - It must be owned by root (or by the user running the module) and writable by no one else, and so
        must the run-state and lock files in it; otherwise the run state is not trusted and the module refuses to
        act on it (nothing is signalled). Keep it apart from the service user's O(log_dir) and home.
      - Its path must hold no symlink and no C(..), and every directory above it must be owned by root (or that
        user) and writable by no one else, except a root-owned sticky directory such as C(/tmp). So a run dir
        inside the service user's home is refused. Good places are C(/var/lib/eagle-deploy/run) or C(/run/eagle-deploy).
      - A deployment is O(run_dir) and O(name) - two deployments of one name in two run dirs have their own run
        state, lock and cgroup.
    type: path
  run_as:
    description:
      - User to run the server as (the module must run as root to switch). Its primary group and
        supplementary groups are applied. Defaults to the user running the module.
    type: str
  fingerprint_files:
    description:
      - Files the server depends on (its config file, patched sources). Their SHA-256 hashes are
        part of the fingerprint, so a change in any of them restarts the server.
    type: list
    elements: path
    default: []
  fingerprint_data:
    description: Other values the server depends on (the SGLang version, say); part of the fingerprint.
    type: dict
    default: {}
  health_url:
    description: URL that answers 200 when the server can serve. Must be http or https.
    type: str
    default: http://127.0.0.1:30000/health_generate
  api_key:
    description:
      - API key sent as C(Authorization Bearer) to the health URL. Never in Ansible's output, and redacted from
        the server's log (see O(redact)).
      - At least 16 characters (make one with C(openssl rand -hex 24)); a shorter key is refused before anything is
        stopped or launched (O(state=stopped) does not use it and never refuses). Empty is no key.
      - With O(launcher=systemd) the key must also be the C(api_key) (or C(api-key)) line of the server's C(--config)
        file in O(argv) (C(key<colon> <JSON value>)), its only copy on disk - the watcher program reads it from there.
    type: str
  port:
    description:
      - TCP port the server will listen on (1-65535). Before a launch, a port held by a process that is not
        ours fails the task (nothing stopped, nothing launched). Defaults to the port of O(health_url).
    type: int
  health_timeout:
    description:
      - Seconds one health request may take with O(state=watched), for the "already healthy?" check
        of O(state=started), and for the supervisor's requests to a serving server. A loaded server can answer
        C(/health_generate) slowly.
    type: float
    default: 10.0
  unhealthy_after:
    description:
      - A serving server (the supervisor's requests) or a watched one (O(state=watched), the watch's own
        requests) is declared unhealthy only after this many failed health requests in a row (no answer, or not
        200), at least 1 s apart; at the end of O(watch_time) the watch keeps asking until a request answers 200 or
        this many have failed.
    type: int
    default: 3
  serve_health_interval:
    description:
      - Seconds between two health requests the supervisor program sends to a serving server (each
        C(/health_generate) costs it a 1-token generation; both launchers). Each request is given O(health_timeout);
        O(unhealthy_after) failures in a row fail it (exit 69; under systemd restarted by C(Restart=on-failure)).
        While a crash line the log shows stands (neither proven nor cleared), it asks every O(health_interval) s
        instead (a failed request at least 1 s after the last).
      - Read by the watcher program when the unit starts; a change applies at the next (re)start of the server.
    type: float
    default: 10.0
  log_offset:
    description:
      - With O(state=watched), the byte offset of the attempt log where the watch starts; a crash line the
        supervisor set aside before it (an old one, a prompt echoed by C(--log-requests)) is not reported. C(0)
        reports those of the whole log of the current attempt; C(-1) starts at the current end of the log. Use
        RV(log_offset) of an earlier call, taken before the requests whose effect is watched. A failure the
        supervisor decided is reported whatever the offset.
      - An offset inside a line starts at the next line.
    type: int
    default: 0
  lock_timeout:
    description:
      - Every run holds an exclusive lock (C(flock) on C(<run_dir>/<name>.lock)) for the whole operation,
        so two runs never launch or stop the same server at once. Seconds to wait for it when another
        run holds it; then the task fails, naming the holder's PID and since when it holds the lock.
      - In check mode the lock is taken shared, and only when the lock file exists.
    type: float
    default: 60.0
  min_free_space_mib:
    description: Before a launch, O(log_dir) and O(run_dir) must have this many MiB free.
    type: int
    default: 64
  cgroup:
    description:
      - Run the server in a cgroup v2 of its own (C(eagle-deploy-<name>-<hash of the run_dir path>), one per
        deployment, below the module's own cgroup) where the host allows it (cgroup v2 mounted read-write, the
        module runs as root). Every process in
        it is then part of our server's tree, also one that left the session (double fork and C(setsid)),
        so a stop leaves nothing behind. Where it is not possible the tree is tracked by session, and
        RV(tree_tracking) says which.
      - A cgroup that is not our own (an ssh session's, a container's root) never makes a process ours.
      - Every launch also puts a random run token in the server's environment (C(EAGLE_DEPLOY_RUN=<name>:<hex>), no
        secret; recorded in the run state). After the leader died, a process of its old session is stopped only if
        it carries that token, runs as the recorded user and started after the leader, never by its session id alone.
    type: bool
    default: true
  timeout:
    description: Seconds to wait for health after the launch.
    type: int
    default: 1800
  stall_timeout:
    description:
      - Seconds without log growth and without any HTTP answer after which the server is declared
        hung. C(0) disables the check. CUDA-graph capture can be silent for 6+ minutes.
    type: int
    default: 900
  settle_time:
    description:
      - After a crash line, seconds to keep reading so that the traceback's last line (the exception)
        is in the report. The wait ends sooner once that line is seen.
    type: float
    default: 0.3
  poll_interval:
    description:
      - Seconds between two looks at the log, the process tree and the health URL where the wait cannot wake on
        events. Where it can (pidfds, Linux 5.3+, and inotify), it looks when the leader or a child it has seen
        exits, the log is written or a health answer comes in, and at the latest after 1 s (or this, if longer), at
        the next health request and at the deadline.
    type: float
    default: 0.1
  health_interval:
    description: Seconds between two health requests (each one may cost the server a 1-token generation).
    type: float
    default: 0.25
  child_grace:
    description:
      - A child of the server counts as a long-lived worker (whose death is a crash) once it has been
        seen alive for this many seconds; short-lived helpers (compilers, nvidia-smi) are ignored.
    type: float
    default: 2.0
  stop_timeout:
    description:
      - Seconds between SIGTERM and SIGKILL when stopping our server before a restart or with O(state=stopped).
      - The supervisor program ends a failed server's tree itself after it wrote the verdict; the module does not
        wait for it (under systemd a restartable failure is kept from restarting with C(systemctl stop --no-block)).
    type: int
    default: 30
  stop_on_failure:
    description: Stop our server when the wait of O(state=started) fails (it holds GPU memory and cannot serve). A
      wait fails only on evidence (see the description), never on a log line alone (RV(log_crash)). With
      O(state=watched) the module stops nothing; the supervisor ends a server whose failure it decided.
    type: bool
    default: true
  force_restart:
    description: Restart even when the server is healthy and its fingerprint is unchanged.
    type: bool
    default: false
  prove_launch:
    description:
      - With O(state=started) in check mode, prove the launch as a real run does before it stops anything (O(run_as)
        can run C(argv[0]) and its C(#!) interpreters, and that interpreter, a Python or a POSIX shell, starts once
        with C(-c '')), when the server would be (re)started. The task fails if the new server could not start.
      - For a check-mode plan made before our server is stopped on purpose (to free its GPUs for the new one). Outside
        check mode every launch is proven anyway; in check mode without it, nothing is run.
    type: bool
    default: false
  on_foreign_pid:
    description:
      - What to do when the pidfile points at a live process that is provably not the one we
        launched (a reused PID). C(fail) stops with an error naming the pidfile; C(ignore) discards
        the stale run state. The process is never signalled either way.
    type: str
    choices: [fail, ignore]
    default: fail
  watch_time:
    description: Seconds to watch with O(state=watched).
    type: float
    default: 3.0
  log_tail_lines:
    description: Lines of log returned in RV(log_tail) (0-10000).
    type: int
    default: 40
  keep_attempts:
    description: Per-attempt log files to keep; older ones are removed. C(0) keeps all.
    type: int
    default: 20
  launcher:
    description:
      - How the server runs. C(systemd) - a unit C(sglang-<name>.service) in O(unit_dir) (C(Type=notify), enabled at
        boot, C(KillMode=control-group), C(LimitMEMLOCK=infinity)) runs the host watcher program
        (C(module_utils/sglang_watcher.py), installed in C(<run_dir>/watcher/)), which starts SGLang as its child,
        writes its redacted log, sends C(STATUS=) per phase, C(EXTEND_TIMEOUT_USEC) while the log moves and
        C(READY=1) once the health URL answered 200, and exits 78 (not restarted) when a start failed or 69
        (C(Restart=on-failure), within a start limit) when a serving server died. The module waits on the
        watcher's status file C(<run_dir>/<name>.status.json) and the unit's state; stop is C(systemctl stop)
        (C(disable --now) for O(state=stopped)).
      - With C(systemd) the unit is one deployment's (O(name) + the real path of O(run_dir), recorded on the unit
        file's second line). Before anything is written or stopped (check mode too) the module asks
        C(systemctl show) (FragmentPath, DropInPaths, Transient, LoadState) and looks into every directory systemd
        reads units from, and refuses, naming the file - another deployment's unit of that name (choose another
        O(name)), a unit of that name eagle-deploy did not write (in any unit dir, masked, or transient from
        C(systemd-run --unit)), and any drop-in for it (eagle-deploy writes none). It also checks beforehand what
        C(systemctl enable) needs; when C(daemon-reload) or C(enable) still fails after the unit was written, what
        this run wrote is taken back. Stop and disable act only on a unit file with our mark and our deployment.
      - C(detached) - the module starts the same supervisor program (C(python3 -I <run_dir>/watcher/sglang_watcher.py))
        in a session (and, as root, a cgroup) of its own, its own lines in C(<run_dir>/<name>.supervisor.log), and
        waits on its status file as for a unit; stop is SIGTERM to the supervisor, then the recorded process tree.
        A serving server whose supervisor is gone gets one put back (C(--adopt)) without a restart. For hosts
        without systemd as PID 1 (containers).
      - C(auto) - C(systemd) where C(/run/systemd/system) exists and the module runs as root, else C(detached).
    type: str
    choices: [auto, systemd, detached]
    default: auto
  unit_dir:
    description: Where the unit file of O(launcher=systemd) is written. A unit of the same name that eagle-deploy
      did not write for this deployment, here or in any other unit directory of systemd, is refused (see O(launcher)).
    type: path
    default: /etc/systemd/system
  step_time:
    description:
      - With O(state=started), wait at most this many seconds in this call; a load still under way then returns
        RV(pending=true) (not a failure) with RV(progress). Call again with O(resume_attempt) to go on. The
        C(wait_for_model) action plugin does this and prints a progress line per host. C(0) waits for the verdict.
    type: float
    default: 0
  resume_attempt:
    description:
      - The RV(progress.attempt) a previous step returned. When it is still the recorded attempt, this call goes
        on with that launch's wait (log read from its start, O(timeout) counted from the launch) instead of
        attaching to a running server.
    type: int
attributes:
  check_mode:
    support: full
    details:
      - Reports whether the server would be (re)started or stopped; spawns, signals and writes nothing
        (the lock is taken shared, and only when its file exists). Only with O(prove_launch) it starts the new
        server's interpreter once (C(-c '')) as O(run_as), to prove that a restart could launch.
      - With O(state=started) and our server running with the same fingerprint but not healthy yet, it
        reports that it would wait, and does not wait (a detached server whose supervisor program is gone - that it
        would restart it).
      - With O(state=watched) it watches as usual (it reads the status file and the log's size and tail, and asks
        the health URL); it never stops anything in any mode.
  diff_mode:
    support: none
  platform:
    platforms: [linux]
    details: Reads C(/proc).
notes:
  - The supervisor starts the server as O(run_as) in a session of its own, stdin from C(/dev/null), stdout
    and stderr a pipe to the supervisor and no other inherited descriptor; with C(launcher=detached) the supervisor
    itself runs in a session of its own, so both outlive the module and Ansible's pipes. The supervisor copies the
    pipe into the log file until every server process has closed it, so the server's last lines are kept. No secret
    is in its argv or environment; it reads its config from the 0600 C(<run_dir>/<name>.watcher.json) and the API
    key from the server's 0600 C(--config) file.
  - Every input is checked before anything is stopped or launched - O(name) and variable names (matched as a whole),
    numeric ranges, O(port) and the port of O(health_url) (1-65535), writable O(log_dir) and O(run_dir) with
    O(min_free_space_mib) free, a trusted O(run_dir), and that the O(run_as) user can run C(argv[0]) the way exec finds
    it (every directory on the way enterable, the file executable, a script readable, its C(#!) interpreter and a
    C(/usr/bin/env NAME) on the server's PATH likewise, O(chdir) enterable) - so a bad value leaves a running server
    alone and creates no log file.
  - Before a launch stops the old server, the program that runs in the end (C(argv[0]) or its last C(#!)
    interpreter), when it is a Python or a POSIX shell, is run once as the O(run_as) user with C(-c ''), so a venv
    whose Python cannot start is refused while the old server still serves (not in check mode).
  - If the run state cannot be written after the launch, the server just started is killed and the task
    fails, because a server nobody recorded could never be stopped.
  - A log file is only read when it resolves to a regular file inside O(log_dir) (no symlink out of it)
    that the service user could read itself.
  - Use it without C(async); the module itself is the wait.
seealso:
  - module: ansible.builtin.wait_for
  - module: ansible.builtin.uri
"""

EXAMPLES = r"""
- name: Launch SGLang and wait until it can generate
  ansible.legacy.wait_for_model:
    name: sglang
    argv: [/opt/sglang/venv/bin/python, -m, sglang.launch_server, --config, /etc/sglang/server.yaml]
    environment:
      SGLANG_ENABLE_SPEC_V2: "1"
    log_dir: /var/log/sglang
    run_dir: /run/sglang
    run_as: sglang
    fingerprint_files: [/etc/sglang/server.yaml]
    fingerprint_data:
      sglang_version: 0.5.23
    health_url: http://127.0.0.1:30000/health_generate
    api_key: "{{ sglang_api_key }}"
    timeout: 1800
  register: server

- name: Show the load timeline
  ansible.builtin.debug:
    var: server.phases

- name: Stop our server (only ours)
  ansible.legacy.wait_for_model:
    name: sglang
    state: stopped
    log_dir: /var/log/sglang
    run_dir: /run/sglang
"""

RETURN = r"""
pid:
  description: PID of the server's leader process.
  returned: when a server runs
  type: int
  sample: 41235
log_path:
  description: Log file of this attempt.
  returned: always, with O(state=started) and O(state=watched)
  type: str
  sample: /var/log/sglang/sglang_r3.log
attempt:
  description: Attempt number N of C(<name>_r<N>.log).
  returned: with O(state=started)
  type: int
  sample: 3
elapsed:
  description: Seconds from the launch (or attach) to the verdict.
  returned: with O(state=started)
  type: float
  sample: 612.4
phases:
  description: Timeline of the load, each phase with the seconds after launch at which it began and its log line number.
  returned: with O(state=started)
  type: list
  elements: dict
  sample: [{"phase": "launching", "elapsed": 0.0, "lineno": 0}, {"phase": "loading_weights", "elapsed": 12.1, "lineno": 40}]
phase:
  description: Last phase reached.
  returned: with O(state=started)
  type: str
  sample: cuda_graph
shards:
  description: Weight shards loaded and total, where the log shows them.
  returned: with O(state=started)
  type: list
  elements: int
  sample: [64, 64]
fingerprint:
  description: SHA-256 of argv, environment, file hashes and fingerprint data.
  returned: with O(state=started)
  type: str
  sample: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
restart_reason:
  description: Why the server was (or would be) started; null when nothing changed.
  returned: with O(state=started)
  type: str
  sample: "fingerprint changed: argv, file /etc/sglang/server.yaml"
crash_class:
  description:
    - Class of the failure. From the log - python_exception, bad_config, warmup_failed,
      first_request_crash, cuda_graph_capture, cuda_oom, kv_pool_oom, cuda_error, nccl,
      compile_error, child_sigquit, killed, port_in_use, native_crash, watchdog_timeout. From the
      process or the clock - exited, child_died, stalled, timeout, unhealthy (a serving or watched server).
      C(stopped) when the server was stopped during the wait.
  returned: on failure
  type: str
  sample: cuda_oom
class_uncertain:
  description:
    - True when the log's crash that names the class lies after a raw request echo (an older SGLang's
      C(--log-requests) wrote prompts as they came, so a client can write any line there, a fake traceback included).
      The class is then that of the latest crash before the death, never an earlier one, and RV(hint) says why it is
      uncertain. Every string of the result, warnings included, has its control characters escaped (C(\x1b)).
  returned: on failure, when true
  type: bool
  sample: true
hint:
  description: One line for the operator, saying what to do.
  returned: on failure
  type: str
  sample: "CUDA out of memory: lower --mem-fraction-static or --cuda-graph-max-bs"
deciding_line:
  description: The log line that proved the crash, and its number in RV(deciding_lineno).
  returned: on failure
  type: str
  sample: "[2026-02-26 16:41:24 TP6] Scheduler hit an exception: Traceback (most recent call last):"
deciding_lineno:
  description: Line number of RV(deciding_line) in the log file.
  returned: on failure
  type: int
  sample: 539
crash_exception:
  description: Last line of the crash's traceback.
  returned: on failure, when the log has one
  type: str
  sample: "AttributeError: 'EAGLEWorkerV2' object has no attribute 'spec_disable_batch_threshold'"
traceback:
  description: The crash's traceback lines.
  returned: on failure, when the log has one
  type: list
  elements: str
log_tail:
  description: Last O(log_tail_lines) lines of the log.
  returned: with O(state=started) and O(state=watched)
  type: list
  elements: str
rc:
  description: Exit status of the leader (negative for a signal), if it exited.
  returned: on failure
  type: int
  sample: -9
stopped:
  description: What stopping our previous server did (PIDs sent SIGTERM, SIGKILL, left over).
  returned: when a server was stopped
  type: dict
  sample: {"signalled": [41235, 41240], "killed": [], "remaining": [], "seconds": 1.2}
stale_state:
  description: Why a pidfile / run-state record was discarded without signalling anything.
  returned: when one was found
  type: str
  sample: "PID 812 was reused by another process (start time differs)"
log_offset:
  description:
    - Byte offset of the end of the log (O(state=watched) - at the start of a line not finished yet, when the
      watch ended; O(state=started) - when the server was kept as it was). Pass it as O(log_offset) to a later
      O(state=watched) to report only the crash lines written after this call.
  returned: with O(state=started) when a server runs, and with O(state=watched)
  type: int
  sample: 183344
log_watched_from:
  description: Byte offset of the log where the O(state=watched) watch started (O(log_offset), moved to a line start).
  returned: with O(state=watched)
  type: int
  sample: 183344
health_polls:
  description: Health requests of the wait (O(state=watched) - the watch's own) - how many, how many failed in a row
    at the end, and the last status (null - no answer).
  returned: with O(state=started) after a wait, and with O(state=watched)
  type: dict
  sample: {"polls": 12, "failed_in_a_row": 0, "last": 200}
tree_tracking:
  description:
    - How our server's process tree is found - C(cgroup) (its own cgroup v2, plus its session) or
      C(session) (its session and descendants).
  returned: with O(state=started) when a server runs
  type: str
  sample: cgroup
tree_tracking_note:
  description: Why the server has no cgroup of its own.
  returned: when it was launched without one
  type: str
  sample: "no cgroup of its own (Read-only file system): process tree by session"
lock_wait:
  description: Seconds this run waited for the per-server lock.
  returned: when the lock was taken
  type: float
  sample: 0.0
would_stop:
  description: In check mode, a failure of O(state=started) that would have stopped our server (with
    O(stop_on_failure)); nothing was signalled.
  returned: on failure in check mode
  type: bool
  sample: true
log_crash:
  description:
    - The crash the log shows, next to what acted. With C(acted_on=false) the server stayed alive and its health
      URL answered 200 to a request sent after the line was read - the task succeeds with a warning and nothing
      was stopped (client text, a forged request echo, a crash SGLang recovered from). With C(acted_on=true) the
      failure was proved by RV(evidence) (a stall, a timeout) and the line explains it; a crash that a process
      death or failing health corroborated is reported in RV(crash_class) and RV(deciding_line) instead.
  returned: when the log shows a crash that is not the failure's own deciding line
  type: dict
  sample: {"class": "cuda_oom", "line": "[2026-12-03 10:00:07] ... OutOfMemoryError ...", "lineno": 212,
           "hint": "...", "exception": null, "acted_on": false,
           "why": "every server process stayed alive and the health URL answered 200 to a request sent after this line was read"}
evidence:
  description: What proved the failure, in words - a process death, failing health or the clock, never a log line.
  returned: on failure
  type: str
  sample: "worker PID 41290 of the server died"
stopped_after_failure:
  description: What stopping our server after a failure did (O(stop_on_failure)), or C(how) the supervisor ends it
    (C(the supervisor ends the failed tree)).
  returned: on failure, when something was stopped or the supervisor ends the server
  type: dict
  sample: {"signalled": [41235], "killed": [], "remaining": [], "seconds": 0.4}
pruned_logs:
  description: Per-attempt log files removed after the launch (beyond O(keep_attempts)).
  returned: with O(state=started) after a launch
  type: list
  elements: str
  sample: ["sglang_r1.log"]
supervisor_pid:
  description: PID of the supervisor program started (C(launcher=detached)) or put back (RV(supervisor=restored)).
  returned: with O(launcher=detached) when a supervisor was started
  type: int
  sample: 41234
supervisor:
  description: C(gone) when our detached server ran without its supervisor program (O(state=started) - put back
    with C(restored) when the server answers, else the server is restarted; O(state=watched) - the watch fails,
    nothing watches the server, a unit that is not active included); C(restored) when one was put back
    (C(--adopt)) without a restart.
  returned: when the server's supervisor was gone
  type: str
  sample: restored
log_writer_pid:
  description: PID of the separate log writer process of a server started by an eagle-deploy older than the
    supervisor program (kept as it is, and stopped cleanly); current versions have none.
  returned: with O(state=started) when a kept server of an older version still has its log writer
  type: int
  sample: 41234
dead_child_pid:
  description: PID of the long-lived child whose death failed the wait (RV(crash_class=child_died)).
  returned: on failure with RV(crash_class=child_died)
  type: int
  sample: 41240
launcher:
  description: The launcher used (O(launcher) with C(auto) resolved).
  returned: always, once the input was checked
  type: str
  sample: systemd
unit:
  description: The systemd unit that runs the server.
  returned: with O(launcher=systemd)
  type: str
  sample: sglang-sglang.service
unit_state:
  description: The unit's C(ActiveState), C(SubState), C(Result), C(NRestarts), C(ExecMainStatus) and C(StatusText)
    when a wait on it failed.
  returned: on failure with O(launcher=systemd)
  type: dict
  sample: {"ActiveState": "failed", "Result": "exit-code", "ExecMainStatus": "78", "NRestarts": "0"}
journal_tail:
  description: The unit's last journal lines, when it ended before its watcher named a cause.
  returned: on failure with RV(crash_class=unit_failed)
  type: list
  elements: str
pending:
  description: The step (O(step_time)) ended while the server is still loading; call again with O(resume_attempt).
  returned: with O(step_time) when the load goes on
  type: bool
  sample: true
progress:
  description:
    - Where the load is. C(phase) (launching, loading_weights, kv_cache, cuda_graph, warmup, ready), C(status) in
      words (C(loading weights 41/64 shards)), C(shards) [done, total], C(elapsed) seconds since the launch,
      C(eta) seconds still to go from the last successful load's phase durations (C(<run_dir>/<name>.loads.json);
      null before the first), C(last_load) seconds that load took, C(attempt), C(launcher), C(verdict) (null while
      the start is undecided, C(ready) once a generation answered, C(stopped), or the failure's class). The log's
      ready line alone is phase C(ready) with C(status) C(up, waiting for a generation to answer); only the verdict
      C(ready) is C(serving).
  returned: with O(state=started) after a launch or while waiting for one
  type: dict
  sample: {"phase": "loading_weights", "status": "loading weights 41/64 shards", "shards": [41, 64], "elapsed": 252.0,
           "eta": 170.0, "last_load": 598.0, "attempt": 7, "launcher": "systemd", "verdict": null}
"""

import errno
import fcntl
import hashlib
import json
import math
import os
import pwd
import re
import secrets
import signal
import stat
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlparse

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_log import tail_lines
from ansible.module_utils import sglang_proc
from ansible.module_utils import sglang_progress
from ansible.module_utils.sglang_progress import operator_text
from ansible.module_utils import sglang_redact
from ansible.module_utils import sglang_unit
from ansible.module_utils import sglang_watched
from ansible.module_utils import sglang_watcher
from ansible.module_utils.sglang_exec import (
    INTERPRETER_RX, PROBE_TIMEOUT, exec_problem, may_access, resolve_exec, walk_as, which_as,
)
from ansible.module_utils.sglang_unit import (
    CHECK_PROPS, SERVICE_TIMEOUT_MARGIN, SHOW_EVERY, UNIT_DIRS, UNIT_MARK, WATCHER_DIR, CallerWatch, Systemctl,
    module_source, parse_show, systemd_here, unit_files_on_disk, unit_name, unit_owner, unit_refusal, unit_text,
    watcher_files,
)
from ansible.module_utils.sglang_paths import file_sha256
from ansible.module_utils.sglang_watch import (
    ProcView, Waker, http_status, next_attempt, point_link, prune_attempts,
)


class WaitError(Exception):
    """Bad input or an unsafe situation: fail before anything is stopped or launched."""


class Orphaned(Exception):
    """The caller is gone (the SSH connection dropped mid-wait): nobody can read a result any more."""


# ------------------------------------------------------------------------------ helpers
def _h(value):
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def fingerprint_parts(argv, environment, files, data, run_as, secret_environment=None, redact=None):
    parts = {"argv": _h(argv), "environment": _h(environment), "run_as": _h(run_as or "")}
    if secret_environment:
        parts["secret_environment"] = _h(secret_environment)
    if redact:
        parts["redact"] = _h(sorted(redact))
    for path in files:
        parts["file " + path] = file_sha256(path)
    for key in sorted(data):
        parts["data " + key] = _h(data[key])
    return parts


def fingerprint_of(parts):
    return _h(parts)


def describe_change(old_parts, new_parts):
    if not old_parts:
        return "fingerprint changed"
    keys = sorted(set(old_parts) | set(new_parts))
    changed = [k for k in keys if old_parts.get(k) != new_parts.get(k)]
    return "fingerprint changed: " + ", ".join(changed)


class Popener(object):
    """Starts the supervisor program detached (``launcher: detached``). Injectable so unit tests need no processes."""

    def spawn_supervisor(self, argv, err_fd, cgroup_procs=None):
        """``argv`` (the supervisor program) in a session of its own, stdin and stdout /dev/null, stderr (its own
        lines) into ``err_fd``; joined to the deployment's cgroup (``cgroup_procs``) before exec, so that every
        process it starts, the server included, is born in it."""
        kwargs = {}
        cg_fd = None
        if cgroup_procs is not None:
            cg_fd = os.open(cgroup_procs, os.O_WRONLY | os.O_CLOEXEC)

            def join():
                try:
                    os.write(cg_fd, b"0\n")
                except OSError:
                    pass  # the supervisor records what it finds: tree tracking by session then
            kwargs["preexec_fn"] = join
        try:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_fd, cwd="/",
                                    env=supervisor_env(), close_fds=True, start_new_session=True, **kwargs)
        finally:
            if cg_fd is not None:
                os.close(cg_fd)


class Supervisors(object):
    """The detached supervisor recorded in a run state (``state["watcher"]``): alive (same PID, start time and
    command line) and, for a stop, SIGTERM (it ends its server's session and writes ``stopped``). Injectable."""

    def alive(self, state):
        return sglang_proc.recorded_process(state, "watcher") is not None

    def terminate(self, state):
        pid = sglang_proc.recorded_process(state, "watcher")
        if pid is not None:  # through a pidfd opened before the identity check: never a reused PID
            sglang_proc.signal_verified(pid, state["watcher"]["start_time"], signal.SIGTERM)

    def wait_gone(self, state, grace, clock, sleep, poll=0.05):
        """After its SIGTERM and the tree's stop: until the supervisor has ended (the server's last lines copied,
        ``stopped`` written), so that a stop leaves nothing of the deployment running; SIGKILL (verified identity)
        after ``grace`` s. Returns its PID when it had to be killed, else None."""
        deadline = clock() + grace
        while self.alive(state) and clock() < deadline:
            sleep(poll)
        if not self.alive(state):
            return None
        sup = state["watcher"]
        sglang_proc.signal_verified(sup["pid"], sup["start_time"], signal.SIGKILL)
        deadline = clock() + 10.0
        while self.alive(state) and clock() < deadline:
            sleep(poll)
        return sup["pid"]


def supervisor_env():
    """The supervisor's own environment: nothing of the module's (the server's comes from its config file)."""
    return {"PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            "LANG": os.environ.get("LANG", "C.UTF-8"), "PYTHONUNBUFFERED": "1"}


class Cgroups(object):
    """The server's own cgroup v2 (where the host allows one). Injectable for tests."""

    def create(self, name):
        """(mount, path) of a fresh, empty cgroup for the server; OSError when not possible."""
        if os.geteuid() != 0:
            raise OSError(errno.EPERM, "the module does not run as root")
        mount = sglang_proc.cgroup2_mount()
        return mount, sglang_proc.create_cgroup(name, mount=mount)

    def of(self, pid):
        return sglang_proc.proc_cgroup(pid)

    def remove(self, mount, path):
        return sglang_proc.remove_cgroup(mount, path)


class Prober(object):
    """Runs a short command as the service user and returns (rc, output); rc None when it could not run.
    Injectable so unit tests need no real processes."""

    def run(self, argv, env, cwd, user, timeout):
        kwargs = dict(user=user[0], group=user[1], extra_groups=user[2]) if user is not None else {}
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=env, cwd=cwd, timeout=timeout, close_fds=True, check=False, **kwargs)
        except subprocess.TimeoutExpired:
            return None, "did not finish within %d s" % timeout
        except (OSError, subprocess.SubprocessError) as e:
            return None, str(e)
        return proc.returncode, proc.stdout[-4000:].decode("utf-8", "replace")


# ------------------------------------------------------------------------------ input checks
# option: (lowest, highest, lowest excluded?). Checked for every state, before anything is touched.
RANGES = {
    "timeout": (0, 7 * 86400, True),
    "stall_timeout": (0, 7 * 86400, False),
    "settle_time": (0, 60, False),
    "poll_interval": (0, 10, True),
    "health_interval": (0, 600, True),
    "health_timeout": (0, 600, True),
    "unhealthy_after": (1, 1000, False),
    "serve_health_interval": (0, 86400, True),
    "child_grace": (0, 3600, False),
    "stop_timeout": (0, 3600, False),
    "lock_timeout": (0, 86400, False),
    "watch_time": (0, 86400, False),
    "log_tail_lines": (0, 10000, False),
    "keep_attempts": (0, 100000, False),
    "min_free_space_mib": (0, 1 << 30, False),
    "log_offset": (-1, None, False),
    "step_time": (0, 86400, False),
}

# Seconds a supervisor put back (--adopt) has to record itself before the run that started it lets the lock go.
ADOPT_RECORD_WAIT = 10

# The detached supervisor's own lines (its stderr; what the journal holds for a unit), in the run dir.
SUPERVISOR_LOG = "%s.supervisor.log"


def check_ranges(p):
    for key, (lo, hi, open_lo) in sorted(RANGES.items()):
        value = p.get(key)
        if value is None:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise WaitError("%s must be a finite number (got %s)" % (key, value))
        if (value <= lo if open_lo else value < lo) or (hi is not None and value > hi):
            raise WaitError("%s must be %s %s%s (got %s)" % (
                key, ">" if open_lo else ">=", lo, " and <= %s" % hi if hi is not None else "", value))


MIN_API_KEY_LENGTH = 16  # a key this long cannot be guessed, and SGLang masks it (it masks 4 characters and more)
MAKE_A_KEY = "openssl rand -hex 24"


def check_secret_lengths(p):
    """A secret too short to be one is refused before anything is stopped or launched: an ``api_key`` under
    MIN_API_KEY_LENGTH characters (a short key is guessed; one under 4 SGLang itself logs unmasked), a
    ``secret_environment`` value of 1 to 3 characters (sglang_redact.MIN_SECRET_LENGTH: the supervisor cannot mask
    it without masking every such string of the log; a value that short is no secret and belongs in
    ``environment``). The messages name the option, never the value. ``state: stopped`` uses neither and never
    refuses: a deployment with an old short key can always be stopped. ``redact`` strings are not secrets of the
    server's own: a short one is only warned about (see ModelWaiter.secrets)."""
    if p["state"] == "stopped":
        return
    key = p["api_key"]
    if key and len(key) < MIN_API_KEY_LENGTH:
        raise WaitError("api_key is %d characters long, shorter than %d: refused (SGLang logs a key under %d characters "
                        "unmasked, and a short key can be guessed). Make one with `%s` (48 hex characters) and put "
                        "it in the vault. Nothing was stopped or launched."
                        % (len(key), MIN_API_KEY_LENGTH, sglang_redact.MIN_SECRET_LENGTH, MAKE_A_KEY))


def check_secret_environment_lengths(p):
    """See check_secret_lengths: a secret_environment value of 1 to 3 characters (its name already checked)."""
    for name, value in sorted(p["secret_environment"].items()):
        value = "" if value is None else str(value)
        if 0 < len(value) < sglang_redact.MIN_SECRET_LENGTH:
            raise WaitError("secret_environment %s is %d characters long, shorter than %d: refused, since the "
                            "supervisor cannot mask it (it would mask every such string of the log). A value this short "
                            "is no secret: put it in environment; a real token is longer (e.g. `%s`). Nothing was "
                            "stopped or launched." % (name, len(value), sglang_redact.MIN_SECRET_LENGTH, MAKE_A_KEY))


def health_port(url):
    """(scheme, host, port) of the health URL; WaitError naming the problem (never ValueError)."""
    try:
        u = urlparse(url)
        port = u.port
    except ValueError as e:
        raise WaitError("health_url %r has an invalid port (%s): use a port 1-65535" % (url, e))
    if u.scheme not in ("http", "https") or not u.hostname:
        raise WaitError("health_url %r is not an http(s) URL" % url)
    if port is not None and not 1 <= port <= 65535:
        raise WaitError("health_url %r has port %d: use a port 1-65535" % (url, port))
    return u.scheme, u.hostname, port or (443 if u.scheme == "https" else 80)


def check_dir_writable(what, path, check_mode):
    if not os.path.isdir(path):
        raise WaitError("%s %s does not exist (or is not a directory): create it first" % (what, path))
    if check_mode:
        ok = os.access(path, os.W_OK | os.X_OK | os.R_OK)
    else:
        try:
            fd, tmp = tempfile.mkstemp(prefix=".wait_for_model-", dir=path)
            os.close(fd)
            os.unlink(tmp)
            ok = True
        except OSError as e:
            raise WaitError("%s %s is not writable (%s): nothing was stopped or launched" % (what, path, e.strerror or e))
    if not ok:
        raise WaitError("%s %s is not readable and writable by %s" % (what, path, pwd.getpwuid(os.geteuid()).pw_name))


def open_log(path, log_dir, reader):
    """A read descriptor of a server log: only a regular file inside ``log_dir`` (after resolving
    symlinks), opened without following a symlink, that ``reader`` ((uid, gids), the service user)
    could read itself. WaitError otherwise: the module never prints another file."""
    real, top = os.path.realpath(path), os.path.realpath(log_dir)
    if os.path.dirname(real) != top and not real.startswith(top + os.sep):
        raise WaitError("log_path %s is not under log_dir %s (it resolves to %s): not read" % (path, log_dir, real))
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise WaitError("log %s cannot be opened safely (%s): not read" % (path, e.strerror or e))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not may_access(st, reader[0], reader[1], 4):
        os.close(fd)
        raise WaitError("log %s is not a regular file that the service user can read: not read" % path)
    return fd


# ------------------------------------------------------------------------------ the work
class ModelWaiter(object):
    """Launch / attach / wait / stop. Clock, sleep, process launch, HTTP, /proc, cgroups and the lock are injectable."""

    def __init__(self, module, clock=time.monotonic, sleep=None, popener=None, http=http_status,
                 procs=None, wall=time.time, cgroups=None, locker=fcntl.flock, prober=None, background_health=True,
                 systemctl=None, booted=systemd_here, caller_gone=None, unit_dirs=None, events=True, supervisors=None):
        self.module = module
        self.events = events  # False: the wait polls every poll_interval (no Waker; the benches' baseline)
        self.supervisors = supervisors or Supervisors()
        self._status_waker = None  # the Waker of wait_service (None: not made yet; False: none to be had)
        self.unit_dirs = unit_dirs  # where systemd reads units (default: unit_dir + UNIT_DIRS), see check_unit
        self.unit_before = None  # our unit file's text before this run (None: there was none), set by check_unit
        self.caller_gone = caller_gone or CallerWatch()
        self.systemctl = systemctl or Systemctl(module)
        self.booted = booted  # () -> (systemd runs this host?, why not)
        self.launcher = None  # "systemd" | "detached", set by validate()
        self.p = module.params
        self.background_health = background_health  # False: health requests run inline (unit tests' fake clock)
        self.clock = clock
        # time.sleep looked up when called (not bound at import): the unit-test guard that forbids sleeping sees it
        self.sleep = sleep or (lambda seconds: time.sleep(seconds))
        self.real_sleep = sleep is None  # the real clock: a wait may end early on an event (see wait())
        self.popener = popener or Popener()
        self.http = http
        self.procs = procs or ProcView()
        self.wall = wall
        self.cgroups = cgroups or Cgroups()
        self.locker = locker
        self.lock_fd = None
        self.user = None
        self.user_pw = pwd.getpwuid(os.geteuid())
        self.missing_files = []
        self.prober = prober or Prober()
        self.exec_program = None  # what runs in the end (argv[0] or its last #! interpreter), set by validate()
        self._secrets = None
        self.key_source = None  # systemd launcher with api_key: {"path", "key"} of the --config file that holds it
        self.port = None  # the rest is set by validate()
        self.run_dir = None
        self.fresh = False
        self.result = {"changed": False}

    # ---------------------------------------------------------------- validation
    def validate(self):
        """Every input, before anything is stopped or launched (and before the lock is taken)."""
        p = self.p
        check = self.module.check_mode
        if not sglang_proc.safe_name(p["name"]):
            raise WaitError("name %r is not allowed: letters, digits, '.', '_', '-' (no '/', no '..'), at most 64" % p["name"])
        check_ranges(p)
        check_secret_lengths(p)
        self.launcher = self.pick_launcher()
        self.result["launcher"] = self.launcher
        if p["port"] is not None and not 1 <= p["port"] <= 65535:
            raise WaitError("port %d is out of range: use a port 1-65535. Nothing was stopped or launched." % p["port"])
        scheme, _host, url_port = health_port(p["health_url"])
        self.port = p["port"] or url_port
        log_dir = p["log_dir"]
        self.run_dir = p["run_dir"] or log_dir
        # Nothing can be recorded where there is no directory: a fresh host. Stopping is then a no-op,
        # and in check mode (the tasks that create the directories did not run) a start is reported.
        self.fresh = not os.path.isdir(log_dir) or not os.path.isdir(self.run_dir)
        if self.launcher == "systemd" and not (self.fresh and p["state"] == "stopped"):
            self.check_unit()  # check mode and a fresh host too: a unit of our name that is not ours is refused
        if self.fresh and (p["state"] == "stopped" or check):
            self.missing_files = [f for f in p["fingerprint_files"] if not os.path.isfile(f)]
            return
        if not os.path.isdir(log_dir):
            raise WaitError("log_dir %s does not exist (or is not a directory): create it first" % log_dir)
        if not os.path.isdir(self.run_dir):
            raise WaitError("run_dir %s does not exist: create it first" % self.run_dir)
        try:
            os.close(sglang_proc.open_run_dir(self.run_dir))
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))
        check_dir_writable("run_dir", self.run_dir, check)
        if p["state"] != "started":
            if not os.access(log_dir, os.R_OK | os.X_OK):
                raise WaitError("log_dir %s is not readable" % log_dir)
            return
        check_dir_writable("log_dir", log_dir, check)
        link = os.path.join(log_dir, "%s.log" % p["name"])
        if os.path.lexists(link) and not os.path.islink(link):
            raise WaitError("%s is not the symlink to the latest attempt's log (something else is there): remove it. "
                            "Nothing was stopped or launched." % link)
        # statvfs only reads: check mode (the role's plan before a stop) checks the space too
        for what, path in (("log_dir", log_dir), ("run_dir", self.run_dir)):
            sv = os.statvfs(path)
            free_mib = sv.f_bavail * sv.f_frsize // (1 << 20)
            if free_mib < p["min_free_space_mib"]:
                raise WaitError("%s %s has %d MiB free, less than min_free_space_mib (%d): free some space. "
                                "Nothing was stopped or launched." % (what, path, free_mib, p["min_free_space_mib"]))
        if not p["argv"] or not p["argv"][0]:
            raise WaitError("argv is empty: give the server's command as a list, e.g. [python, -m, sglang.launch_server, ...]")
        if p["chdir"] and not os.path.isdir(p["chdir"]):
            raise WaitError("chdir %s does not exist (or is not a directory)" % p["chdir"])
        for path in p["fingerprint_files"]:
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
                if check and not os.path.exists(path):
                    self.missing_files.append(path)  # a template that check mode did not write
                    continue
                raise WaitError("fingerprint_files: %s does not exist or is not readable" % path)
        if p["api_key"]:
            self.key_source = self.api_key_source(check)
        for source in ("environment", "secret_environment"):
            for key in p[source]:
                if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                    raise WaitError("%s: %r is not a valid variable name" % (source, key))
                if key == sglang_proc.RUN_TOKEN_VAR:
                    raise WaitError("%s: %s is set by wait_for_model itself (the run token): remove it" % (source, key))
        check_secret_environment_lengths(p)
        if p["run_as"]:
            try:
                pw = pwd.getpwnam(p["run_as"])
            except KeyError:
                raise WaitError("run_as: no user named %s on this host" % p["run_as"])
            if os.geteuid() != 0 and pw.pw_uid != os.geteuid():
                raise WaitError("run_as: switching to %s needs root (use become: true)" % p["run_as"])
            groups = os.getgrouplist(pw.pw_name, pw.pw_gid)
            self.user = (pw.pw_uid, pw.pw_gid, groups)
            self.user_pw = pw
        if not check or p["prove_launch"]:
            # Resolved the way exec resolves it (the server's PATH, its working directory), before
            # any log file is created; then proven runnable by the service user, interpreters included.
            env_path = self.child_env()["PATH"]
            exe = resolve_exec(p["argv"][0], env_path, p["chdir"])
            if exe is None:
                raise WaitError("argv[0] %s was not found or is not executable (PATH=%s): install it or fix argv. "
                                "Nothing was stopped or launched." % (p["argv"][0], env_path))
            ids, who = self.runner_ids()
            if p["chdir"]:
                _real, why = walk_as(os.path.join(p["chdir"], "."), ids)
                if why:
                    raise WaitError("chdir %s cannot be entered by %s: %s. Fix its permissions or choose another "
                                    "chdir. Nothing was stopped or launched." % (p["chdir"], who, why))
            cwd = p["chdir"] or os.getcwd()
            named = p["argv"][0] if "/" in p["argv"][0] else which_as(p["argv"][0], env_path, cwd, ids)
            if named is None:
                raise WaitError("argv[0] %s is not executable by %s on PATH=%s: fix the permissions or argv. "
                                "Nothing was stopped or launched." % (p["argv"][0], who, env_path))
            why, self.exec_program = exec_problem(os.path.join(cwd, named), ids, env_path, cwd)
            if why:
                raise WaitError("argv[0] %s cannot be run by %s: %s. Fix it (reinstall the venv, fix the #! line or "
                                "the permissions). Nothing was stopped or launched." % (p["argv"][0], who, why))

    def pick_launcher(self):
        """``systemd`` where systemd runs the host and the module runs as root (auto), else ``detached``."""
        wanted = self.p["launcher"]
        booted, why = self.booted()
        if wanted == "auto":
            return "systemd" if booted and os.geteuid() == 0 else "detached"
        if wanted == "systemd":
            if not booted:
                raise WaitError("launcher: systemd, but %s: use launcher: detached (or auto). Nothing was stopped or "
                                "launched." % why)
            if os.geteuid() != 0:
                raise WaitError("launcher: systemd needs root to write and start %s (use become: true). Nothing was "
                                "stopped or launched." % unit_name(self.p["name"]))
        return wanted

    def unit_path(self):
        return os.path.join(self.p["unit_dir"], unit_name(self.p["name"]))

    def our_deployment(self):
        """(deployment, run dir's real path): what our unit's second line records (sglang_unit.deployment_line)."""
        return sglang_proc.deployment_name(self.p["name"], self.run_dir), os.path.realpath(self.run_dir)

    def check_unit(self):
        """Before anything is written or stopped (check mode too): the unit of our name may only be our own
        deployment's. systemd is asked (FragmentPath, DropInPaths, Transient, LoadState) and every unit dir it reads
        is looked at on disk (a file it has not loaded yet); then whatever would make ``systemctl enable`` fail."""
        p = self.p
        unit, path = unit_name(p["name"]), self.unit_path()
        if any(c in self.run_dir for c in "\n\r"):
            raise WaitError("run_dir %r has a line break: the unit records its run dir on one line; choose another "
                            "run_dir. Nothing was stopped or launched." % self.run_dir)
        rc, out, err = self.systemctl("show", "-p", ",".join(CHECK_PROPS), unit)
        if rc != 0:
            raise WaitError("systemctl show %s failed (rc=%s): %s. Nothing was stopped or launched."
                            % (unit, rc, (err or "").strip()[-300:]))
        dirs = self.unit_dirs
        if dirs is None:
            dirs = [p["unit_dir"]] + [d for d in UNIT_DIRS if os.path.normpath(d) != os.path.normpath(p["unit_dir"])]
        show = parse_show(out)
        found = unit_files_on_disk(unit, dirs)
        why = unit_refusal(unit, show, found, path, *self.our_deployment())
        if why:
            raise WaitError(why)
        self.unit_before = dict(found).get(path)  # our own unit's text as it was (None: there was none)
        # What systemctl enable needs, known beforehand: a unit dir it can write, a wants dir, no other link there.
        if p["state"] != "started":
            return
        if not os.path.isdir(p["unit_dir"]) or not os.access(p["unit_dir"], os.W_OK | os.X_OK):
            raise WaitError("unit_dir %s is not a directory this user can write: systemd's unit dir is needed for %s. "
                            "Nothing was stopped or launched." % (p["unit_dir"], unit))
        wants = os.path.join(p["unit_dir"], "multi-user.target.wants")
        if os.path.lexists(wants) and (os.path.islink(wants) or not os.path.isdir(wants)):
            raise WaitError("%s is not a directory: systemctl enable %s would fail there. Fix it. Nothing was stopped "
                            "or launched." % (wants, unit))
        link = os.path.join(wants, unit)
        if os.path.lexists(link) and (not os.path.islink(link) or os.path.join(wants, os.readlink(link)) != path):
            raise WaitError("%s is there and does not link to %s: systemctl enable %s would fail (or enable another "
                            "unit). Remove it. Nothing was stopped or launched." % (link, path, unit))

    def check_unit_still_ours(self, what):
        """Right before systemd acts on our unit (stop, disable, a rewrite): its file carries our mark and our
        deployment. Anything else is refused, naming the file."""
        path = self.unit_path()
        text = sglang_unit.read_regular(path)
        owner = unit_owner(text) if text is not None else None
        if owner != self.our_deployment():
            raise WaitError("%s is not this deployment's unit (%s): refusing to %s it. Choose another name for this "
                            "deployment (name), or remove that unit yourself. Nothing was stopped or launched." % (
                                path, "not a regular file" if text is None else "not written by eagle-deploy"
                                if owner is None else "it belongs to run_dir %s" % owner[1], what))

    def runner_ids(self):
        """((uid, gids), name) of the user the server runs as."""
        if self.user is not None:
            return (self.user[0], self.user[2]), self.user_pw.pw_name
        return (os.geteuid(), set(os.getgroups()) | {os.getegid()}), self.user_pw.pw_name

    def prove_it_runs(self):
        """Run the server's interpreter (a Python or a POSIX shell, argv[0] itself or the last ``#!`` interpreter)
        once as the service user with ``-c ''``: a venv whose Python cannot start fails here, before our old
        server is stopped. Other programs are proven by the file checks of validate() alone."""
        program = self.exec_program
        if program is None or not INTERPRETER_RX.search(os.path.basename(program)):
            return
        argv = [program, "-c", ""]
        rc, out = self.prober.run(argv, self.child_env(), self.p["chdir"], self.user, PROBE_TIMEOUT)
        if rc != 0:
            raise WaitError("the server's interpreter %s does not run as %s (%s: %s): fix the venv or argv. Nothing was "
                            "stopped or launched." % (program, self.runner_ids()[1], "rc=%s" % rc if rc is not None else "error",
                                                     (out or "").strip()[-300:] or "no output"))

    def reader(self, state=None):
        """(uid, gids) of the user whose view of the log files counts: the service user."""
        if self.user is not None:
            return self.user[0], set(self.user[2])
        name = (state or {}).get("user")
        if name:
            try:
                pw = pwd.getpwnam(name)
                return pw.pw_uid, set(os.getgrouplist(pw.pw_name, pw.pw_gid))
            except KeyError:
                pass
        return os.geteuid(), set(os.getgroups())

    def child_env(self):
        pw = self.user_pw
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "HOME": pw.pw_dir,
            "USER": pw.pw_name,
            "LOGNAME": pw.pw_name,
            "PYTHONUNBUFFERED": "1",
        }
        for source in ("environment", "secret_environment"):
            for key, value in self.p[source].items():
                env[key] = "" if value is None else str(value)
        return env

    def secrets(self):
        """Values the log must never show: the API key, every secret_environment value, every ``redact`` string.
        A short api_key or secret_environment value was refused by check_secret_lengths; a ``redact`` string
        shorter than sglang_redact.MIN_SECRET_LENGTH is not redacted (masking every "1" of a log would destroy it):
        warned about by name, once."""
        if self._secrets is not None:
            return self._secrets
        p = self.p
        named = [("api_key", p["api_key"])] + [("secret_environment %s" % k, v) for k, v in
                                               sorted(p["secret_environment"].items())]
        named += [("redact[%d]" % i, v) for i, v in enumerate(p["redact"])]
        out = []
        for what, value in named:
            value = "" if value is None else str(value)
            if len(value) >= sglang_redact.MIN_SECRET_LENGTH:
                if value not in out:
                    out.append(value)
            elif value:
                self.module.warn("%s is shorter than %d characters: it is not redacted from the server's log"
                                 % (what, sglang_redact.MIN_SECRET_LENGTH))
        self._secrets = out
        return out

    def api_key_source(self, check):
        """The API key lives on disk in one file only, the server's 0600 ``--config`` file: ``{"path", "key"}`` for
        the supervisor program, which reads the key from there itself. Refused (before
        anything is stopped) when argv has no ``--config`` file whose ``api_key``/``api-key`` line is this key; in
        check mode a config file not written yet is taken on trust."""
        path = sglang_watcher.config_file_of(self.p["argv"])
        if path is None:
            raise WaitError("api_key needs the key in the server's --config file (argv has no --config <file>): the "
                            "key's one copy on disk is that 0600 file, which the supervisor program reads. Put an api-key line there (the sglang_server role does). Nothing was stopped or "
                            "launched.")
        path = os.path.join(self.p["chdir"] or os.getcwd(), path)
        try:
            found = sglang_watcher.read_config_secret(path)
        except FileNotFoundError:
            if check:
                return {"path": path, "key": "api-key"}
            raise WaitError("the --config file %s does not exist: the supervisor reads api_key from it. "
                            "Nothing was stopped or launched." % path)
        except (OSError, ValueError) as e:
            raise WaitError("cannot read the --config file %s (%s): the supervisor reads api_key from it. "
                            "Nothing was stopped or launched." % (path, getattr(e, "strerror", None) or e))
        if found is None or found[1] != self.p["api_key"]:
            raise WaitError("the --config file %s %s: the supervisor program reads the key from there (its one "
                            "copy on disk), so it must hold exactly api_key. Nothing was stopped or "
                            "launched." % (path, "has no api_key/api-key line" if found is None
                                           else "holds another key in its %s line than api_key" % found[0]))
        return {"path": path, "key": found[0]}

    def warn(self, text):
        """A module warning, its control characters escaped: it may quote the server's log (a client's prompt)."""
        self.module.warn(sglang_progress.operator_text(text))

    def headers(self):
        h = {}
        if self.p["api_key"]:
            h["Authorization"] = "Bearer %s" % self.p["api_key"]
        return h

    # ---------------------------------------------------------------- the per-server lock
    def lock(self):
        """Hold ``<run_dir>/<name>.lock`` (flock) for the whole operation; wait up to lock_timeout.

        Check mode takes it shared and only when the file exists (it creates nothing)."""
        p = self.p
        check = self.module.check_mode
        fname = "%s.lock" % p["name"]
        try:
            dir_fd = sglang_proc.open_run_dir(self.run_dir)
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))
        try:
            flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (0 if check else os.O_CREAT)
            fd = os.open(fname, flags, 0o644, dir_fd=dir_fd)
        except OSError as e:
            if e.errno == errno.ENOENT and check:
                return
            raise WaitError("cannot open the lock file %s/%s: %s" % (self.run_dir, fname, e.strerror or e))
        finally:
            os.close(dir_fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
            os.close(fd)
            raise WaitError("lock file %s/%s is not a root-owned file writable only by its owner: remove it" % (self.run_dir, fname))
        mode = fcntl.LOCK_SH if check else fcntl.LOCK_EX
        t0 = self.clock()
        while True:
            try:
                self.locker(fd, mode | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    os.close(fd)
                    raise
            if self.clock() - t0 >= p["lock_timeout"]:
                holder = {}
                try:
                    holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
                except ValueError:
                    pass
                os.close(fd)
                since = holder.get("since")
                raise WaitError(
                    "another run holds the lock for %s since %s (pid %s, state %s); waited %g s (lock_timeout). Nothing "
                    "was stopped or launched: wait for it to finish, or stop that run." % (
                        p["name"], time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if isinstance(since, (int, float))
                        else "an unknown time", holder.get("pid", "?"), holder.get("state", "?"), p["lock_timeout"]))
            self.sleep(min(0.2, max(p["lock_timeout"], 0.01)))
        self.lock_fd = fd
        self.result["lock_wait"] = round(self.clock() - t0, 3)
        if not check:
            text = json.dumps({"pid": os.getpid(), "since": self.wall(), "state": p["state"]}).encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, text + b"\n", 0)

    def unlock(self):
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # closing the descriptor releases the flock
            self.lock_fd = None

    # ---------------------------------------------------------------- run
    def run(self):
        self.validate()
        if self.fresh and self.p["state"] == "stopped":
            self.result["msg"] = "nothing to stop: %s does not exist" % self.run_dir
            return self.result
        if self.module.check_mode and self.p["state"] == "started" and (self.fresh or self.missing_files):
            self.result.update(changed=True, restart_reason="not running", msg="would start the server (%s)" % (
                "fresh host: %s does not exist yet" % self.p["log_dir"] if self.fresh
                else "fingerprint files not written yet: %s" % ", ".join(self.missing_files)))
            return self.result
        if self.fresh:
            raise WaitError("no server of ours is recorded in %s (name %s): nothing to watch" % (self.run_dir, self.p["name"]))
        self.lock()
        try:
            if self.p["state"] == "stopped":
                return self.stop_only()
            if self.p["state"] == "watched":
                return self.watch()
            return self.start()
        finally:
            self.unlock()

    def watch(self):
        """``state: watched``: wait ``watch_time`` s on the supervisor's status file and report what it decided or set
        aside (``sglang_watched``); the module itself follows neither the log nor the processes."""
        state, _ours = self._existing()
        if state is None or state.get("unverified") or not state.get("log_path"):
            raise WaitError("no server of ours is recorded in %s (name %s): nothing to watch"
                            % (self.run_dir, self.p["name"]))
        unit = unit_name(self.p["name"]) if state.get("launcher") == "systemd" else None

        def supervised():
            if unit is not None:
                return self.systemctl.show(unit).get("ActiveState") in ("active", "activating", "reloading")
            return self.supervisors.alive(state)
        log_fd = open_log(state["log_path"], self.p["log_dir"], self.reader(state))
        try:
            fields, notes = sglang_watched.Watched(
                self.p, state, log_fd, self.read_status, supervised,
                lambda timeout: self.http(self.p["health_url"], self.headers(), timeout), self.clock, self.sleep,
                self.background_health, run_dir=self.run_dir if self.real_sleep and self.events else None,
                unit=unit).run()
        finally:
            os.close(log_fd)
        self.result.update(fields)
        for note in notes:
            self.warn(note)
        return self.result

    def _existing(self):
        """(state, ours?) of the recorded server; applies on_foreign_pid for a reused PID."""
        state = sglang_proc.read_state(self.run_dir, self.p["name"])
        if state is None:
            return None, False
        if state.get("untrusted"):
            raise WaitError(state["untrusted"])
        reason = sglang_proc.why_not_ours(state)
        if reason is None:
            return state, True
        pid = state.get("pid")
        foreign_alive = pid is not None and sglang_proc.pid_alive(pid) and (
            state.get("unverified") or state.get("boot_id") in (None, sglang_proc.boot_id()))
        pidfile = sglang_proc.state_paths(self.run_dir, self.p["name"])[0]
        if foreign_alive and self.p["on_foreign_pid"] == "fail":
            cmd = " ".join(sglang_proc.proc_cmdline(pid) or [])[:200]
            raise WaitError(
                "pidfile %s points at PID %d (%s), which is not the server we launched: %s. Nothing was "
                "signalled or launched. Remove the stale pidfile (or set on_foreign_pid: ignore)."
                % (pidfile, pid, cmd or "?", reason))
        self.result["stale_state"] = reason
        return state, False

    def start(self):
        p = self.p
        parts = fingerprint_parts(p["argv"], p["environment"], p["fingerprint_files"], p["fingerprint_data"], p["run_as"],
                                  p["secret_environment"], p["redact"])
        if self.launcher == "systemd":
            parts["launcher"] = _h("systemd")
        fp = fingerprint_of(parts)
        self.result["fingerprint"] = fp
        state, ours = self._existing()
        resuming = p["resume_attempt"] is not None and ours and p["resume_attempt"] == state.get("attempt")
        gone = None  # why a server of the same fingerprint is restarted (its supervisor gone, no health answer)
        if ours and state.get("fingerprint") == fp and (not p["force_restart"] or resuming):
            if self.launcher == "systemd" and self.sync_service():
                self.result["changed"] = True  # the unit or the watcher program was brought up to date (no restart)
            elif self.launcher != "systemd" and state.get("watcher") and self.install_watcher()[1]:
                self.result["changed"] = True  # the supervisor program brought up to date (its next start uses it)
            detached_alone = state.get("launcher") != "systemd" and not self.supervisor_alive(state)
            code = self.http(p["health_url"], self.headers(), p["health_timeout"])
            self.result.update(pid=state["pid"], log_path=state.get("log_path"), attempt=state.get("attempt"),
                               restart_reason=None, tree_tracking=state.get("tree_tracking", "session"))
            if sglang_proc.log_writer_of(state) is not None:
                # a run state of an eagle-deploy older than the supervisor: its server's output goes through a log
                # writer process, recorded as `log_writer` (stop_tree ends it last). A host upgraded with that server
                # running keeps it, reports its writer, and stops it cleanly. Current versions record none.
                self.result["log_writer_pid"] = state["log_writer"]["pid"]
            if detached_alone and code != 200:
                self.result["supervisor"] = "gone"  # restarted below, under a supervisor of its own
            elif detached_alone:
                self.supervisor_gone(state, healthy=True)
            elif resuming and not self.module.check_mode:
                # A later step of the launch this task started: its supervisor's verdict (and the load's times) is
                # the answer, also when our own probe was answered first.
                return self.wait_service(None, attached=False, attempt=state.get("attempt"), supervisor=None if (
                    state.get("launcher") == "systemd") else (lambda: None if self.supervisor_alive(state) else -1))
            if code == 200:
                tail, offset = self._tail_of(state)
                self.result.update(elapsed=0.0, phases=[], phase="ready", log_tail=tail, log_offset=offset)
                st = {"verdict": "ready", "phase": "ready", "attempt": state.get("attempt"),
                      "started_at": state.get("started_at")}
                if resuming and state.get("launcher") != "systemd":
                    # the launch a previous step waited for answered between two steps: its load is done
                    try:
                        prior = self.read_status() or {}
                    except WaitError:
                        prior = {}
                    if prior.get("attempt") == state.get("attempt"):
                        st.update(phases=prior.get("phases") or [], shards=prior.get("shards"))
                        self.record_load(state, st)
                self.result["progress"] = self.progress_of(st, state.get("launcher") or "detached")
                return self.result
            if self.module.check_mode and not detached_alone:
                self.result["msg"] = "server with the same fingerprint is running but not healthy yet; would wait for it"
                return self.result
            if self.launcher == "systemd" and state.get("launcher") == "systemd":
                return self.wait_service(None, attached=True, attempt=state.get("attempt"))
            if not detached_alone:  # its supervisor decides; wait on its status file, as for a unit
                return self.wait_service(None, attached=not resuming, attempt=state.get("attempt"),
                                         supervisor=lambda: None if self.supervisor_alive(state) else -1)
            # Nothing watches it and it does not answer health: the module watches no server itself. It is restarted
            # under a supervisor of its own, after the same checks as any restart (check mode: reported).
            gone = "its supervisor program is gone and the server does not answer health"
        if p["resume_attempt"] is not None and not resuming:
            # A later step of a launch whose server is gone: the attempt it waited for ended between two steps (a
            # stop, a crash). Its supervisor's verdict is the answer; starting it again is not this step's to do.
            st = self.read_status()
            if st is not None and st.get("attempt") == p["resume_attempt"] and st.get("verdict") not in (None, "ready"):
                self.result["restart_reason"] = None
                if st["verdict"] == "stopped":
                    return self.service_stopped(st, {})
                return self.service_failed(st, {})
        if gone:
            reason = gone
        elif not ours:
            reason = "not running"
        elif state.get("fingerprint") == fp:
            reason = "force_restart"
        else:
            reason = describe_change(state.get("fingerprint_parts"), parts)
        self.result["restart_reason"] = reason

        # A foreign process on our port: refuse before touching anything.
        # Our old server's processes may hold the port (an orphaned child that inherited the socket).
        ours_pids = set(sglang_proc.our_tree(state)) if ours else set(sglang_proc.orphans_of(state))
        holders = sglang_proc.pids_holding_sockets(sglang_proc.listeners(self.port)) - ours_pids
        if holders:
            desc = ", ".join("PID %d (user %s: %s)" % (h, self._owner(h), " ".join(sglang_proc.proc_cmdline(h) or [])[:120])
                             for h in sorted(holders))
            raise WaitError("port %d is held by a process that is not ours: %s. Nothing was stopped or "
                            "launched; stop it or choose another port." % (self.port, desc))

        self.result["changed"] = True
        if self.module.check_mode:
            if p["prove_launch"]:
                self.prove_it_runs()
            self.result["msg"] = "would %s the server (%s)" % ("restart" if ours else "start", reason)
            return self.result
        self.prove_it_runs()
        if state is not None or self.unit_active():
            self._stop(state or {"pid": None, "unverified": True})
        if self.launcher == "systemd":
            return self.launch_service(parts, fp)
        return self.launch(parts, fp)

    def unit_active(self):
        """Whether our unit (systemd launcher) is loaded and not inactive: it may run a server with no run state yet."""
        if self.launcher != "systemd" or not os.path.exists(self.unit_path()):
            return False
        return self.systemctl.show(unit_name(self.p["name"])).get("ActiveState", "inactive") not in ("inactive", "failed")

    def _stop(self, state, disable=False):
        """Stop our recorded server (its tree, or what is left of it) and forget it. A bare pidfile
        proves nothing and is only removed. A server our unit runs is stopped by systemd (its cgroup)."""
        if os.path.exists(self.unit_path()) and (state.get("launcher") == "systemd" or self.launcher == "systemd"):
            self.stop_unit(disable)
            if not state.get("unverified") and state.get("pid") is not None:
                left = sorted(set(sglang_proc.our_tree(state)) | set(sglang_proc.orphans_of(state)))
                if left:
                    raise WaitError("systemd stopped %s but PIDs %s of our server are still there"
                                    % (unit_name(self.p["name"]), left))
            sglang_proc.clear_state(self.run_dir, self.p["name"])
            return
        if not state.get("unverified"):
            # the detached supervisor ends the server's session itself and writes `stopped` (without a cgroup it is
            # no member of the tree stop_tree signals)
            self.supervisors.terminate(state)
            stopped = sglang_proc.stop_tree(state, grace=self.p["stop_timeout"], clock=self.clock, sleep=self.sleep)
            # the supervisor (in a session of its own) ends once its server is gone: wait for it, so that nothing of
            # the deployment runs when the stop returns
            killed = self.supervisors.wait_gone(state, grace=max(5.0, float(self.p["stop_timeout"])),
                                                clock=self.clock, sleep=self.sleep)
            if killed is not None and killed not in stopped["killed"]:
                stopped["killed"].append(killed)
            if stopped["signalled"] or stopped["killed"]:
                self.result["stopped"] = stopped
            left = stopped["remaining"] + ([killed] if killed is not None and self.supervisors.alive(state) else [])
            if left:
                raise WaitError("could not stop our server: PIDs %s survived SIGKILL" % left)
            self._remove_cgroup(state)
        sglang_proc.clear_state(self.run_dir, self.p["name"])

    def _remove_cgroup(self, state):
        cg = sglang_proc.dedicated_cgroup(state)
        if cg is not None:
            self.cgroups.remove(*cg)

    def _owner(self, pid):
        uid = sglang_proc.proc_uid(pid)
        try:
            return pwd.getpwuid(uid).pw_name
        except (KeyError, TypeError):
            return str(uid)

    def _own_cgroup(self):
        """(mount, path) of a fresh cgroup for the server, or None (with the reason in the result)."""
        if not self.p["cgroup"]:
            self.result["tree_tracking_note"] = "cgroup: false"
            return None
        try:
            return self.cgroups.create(sglang_proc.deployment_name(self.p["name"], self.run_dir))
        except (OSError, IOError) as e:
            self.result["tree_tracking_note"] = "no cgroup of its own (%s): process tree by session" % (e.strerror or e)
            return None

    def supervisor_config(self, parts, fp, cgroup=None):
        """The supervisor program's config (``<name>.watcher.json``, 0600: the server's environment may hold secrets):
        what it starts, as whom, where it logs, how it asks health, and the wait's numbers. Written at each (re)start;
        returns its launch token."""
        p = self.p
        name = p["name"]
        token = secrets.token_hex(8)
        settings = dict((k, p[k]) for k in ("health_interval", "health_timeout", "unhealthy_after", "child_grace",
                                            "settle_time", "stall_timeout", "poll_interval"))
        settings["extend_timeout"] = p["stall_timeout"] + 60 if p["stall_timeout"] else 0
        settings["serve_health_interval"] = p["serve_health_interval"]  # the watch of the serving server
        if not self.events:
            settings["events"] = False  # the benches' baseline: the supervisor's wait polls too
        systemd = self.launcher == "systemd"
        config = {
            "launch": token, "argv": list(p["argv"]), "env": self.child_env(), "chdir": p["chdir"],
            "user": p["run_as"], "log_dir": p["log_dir"], "health_url": p["health_url"], "headers": {},
            # never the API key: the supervisor reads it from the server's --config file (api_key_file)
            "secrets": [v for v in self.secrets() if v != p["api_key"]], "api_key_file": self.key_source,
            "fingerprint": fp, "fingerprint_parts": parts, "port": self.port,
            "keep_attempts": p["keep_attempts"], "unit": unit_name(name) if systemd else None, "timeout": p["timeout"],
            "stop_timeout": p["stop_timeout"], "tail_lines": p["log_tail_lines"], "settings": settings,
            "journal": systemd, "cgroup": cgroup[1] if cgroup else None,
        }
        try:
            sglang_proc.write_files(self.run_dir, ((sglang_watcher.CONFIG % name, json.dumps(config)),), mode=0o600)
            sglang_proc.remove_file(self.run_dir, sglang_watcher.STATUS % name)
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))
        return token

    def launch(self, parts, fp):
        """``launcher: detached``: the supervisor program (the one the systemd unit runs) in a session and, as root,
        the deployment's cgroup of its own; it starts the server, logs, records and decides. Then wait on its status
        file as for a unit."""
        p = self.p
        program, _changed = self.install_watcher()
        cgroup = self._own_cgroup()
        token = self.supervisor_config(parts, fp, cgroup)
        cgroup_procs = os.path.join(cgroup[0], cgroup[1].lstrip("/"), "cgroup.procs") if cgroup else None
        err_fd = self.open_supervisor_log()
        try:
            handle = self.popener.spawn_supervisor([sys.executable, "-I", program, self.run_dir, p["name"]], err_fd,
                                                   cgroup_procs=cgroup_procs)
        except OSError as e:
            if cgroup:
                self.cgroups.remove(*cgroup)
            raise WaitError("could not start the supervisor program %s: %s" % (program, e))
        finally:
            os.close(err_fd)
        tracking = "session"
        if cgroup is not None:
            if self.cgroups.of(handle.pid) == cgroup[1]:
                tracking = "cgroup"
            else:
                self.result["tree_tracking_note"] = "the supervisor did not join %s: process tree by session" % cgroup[1]
                self.cgroups.remove(*cgroup)  # empty: nothing of ours is in it (the supervisor records none)
        self.result.update(changed=True, tree_tracking=tracking, supervisor_pid=handle.pid)
        return self.wait_service(token, attached=False, supervisor=handle)

    def open_supervisor_log(self):
        """The detached supervisor's stderr: ``<run_dir>/<name>.supervisor.log`` (0600, appended), opened in the
        trusted run dir without following a symlink."""
        try:
            dir_fd = sglang_proc.open_run_dir(self.run_dir)
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))
        try:
            return os.open(SUPERVISOR_LOG % self.p["name"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW |
                           os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)

    def supervisor_gone(self, state, healthy):
        """Our detached server runs, but its supervisor program is gone (killed, or a server of an older eagle-deploy
        that had none): say so, and put one back without a restart when the server answers (``--adopt``: it takes
        over the recorded tree and watches it serving). Its output went to the old supervisor: what it printed since
        is lost, and the next (re)start logs again."""
        p = self.p
        self.result["supervisor"] = "gone"
        words = ("the server of %s (PID %s) was running without its supervisor program (nothing followed its "
                 "processes, and its output since the supervisor went is lost)" % (p["name"], state.get("pid")))
        if not healthy or self.module.check_mode or not state.get("watcher"):
            self.warn(words + ("; %s" % ("it would be put back (check mode)" if healthy and state.get("watcher")
                                         else "force_restart starts it again under one")))
            return
        program, _changed = self.install_watcher()
        cg = sglang_proc.dedicated_cgroup(state)
        cgroup_procs = os.path.join(cg[0], cg[1].lstrip("/"), "cgroup.procs") if cg else None
        err_fd = self.open_supervisor_log()
        try:
            handle = self.popener.spawn_supervisor([sys.executable, "-I", program, self.run_dir, p["name"], "--adopt"],
                                                   err_fd, cgroup_procs=cgroup_procs)
        except OSError as e:
            raise WaitError("%s; a supervisor could not be put back: %s" % (words, e))
        finally:
            os.close(err_fd)
        # Under the lock until it has recorded itself: a run right after ours must find it, not start a second one.
        deadline = self.clock() + ADOPT_RECORD_WAIT
        while handle.poll() is None and self.clock() < deadline:
            now = sglang_proc.read_state(self.run_dir, p["name"]) or {}
            if (now.get("watcher") or {}).get("pid") == handle.pid:
                break
            self.sleep(0.02)
        else:
            raise WaitError("%s; the supervisor put back (PID %d) did not take over within %d s (exit status %s): read "
                            "%s" % (words, handle.pid, ADOPT_RECORD_WAIT, handle.poll(),
                                    os.path.join(self.run_dir, SUPERVISOR_LOG % p["name"])))
        self.result.update(changed=True, supervisor="restored", supervisor_pid=handle.pid)
        self.warn(words + "; a supervisor was put back (PID %d), without a restart" % handle.pid)

    def supervisor_alive(self, state):
        """Whether the supervisor program recorded in ``state`` (detached) still runs."""
        return self.supervisors.alive(state)

    # ---------------------------------------------------------------- the systemd launcher
    def stop_unit(self, disable=False):
        """``systemctl stop`` (``disable --now`` for state=stopped) of our own deployment's unit only: systemd
        signals the unit's whole cgroup, waits TimeoutStopSec (stop_timeout), then SIGKILLs what is left."""
        unit = unit_name(self.p["name"])
        args = ("disable", "--now", unit) if disable else ("stop", unit)
        self.check_unit_still_ours(" ".join(args[:-1]))
        t0 = self.clock()
        rc, _out, err = self.systemctl(*args)
        if rc != 0:
            raise WaitError("systemctl %s failed (rc=%s): %s" % (" ".join(args), rc, (err or "").strip()[-300:]))
        self.result["stopped"] = {"unit": unit, "seconds": round(self.clock() - t0, 3), "how": "systemctl " + args[0]}

    def install_watcher(self):
        """Install the watcher program and its module_utils into ``<run_dir>/watcher/`` (root-owned, 0644): only
        files whose content differs are written (temporary name + rename). Returns (program path, changed)."""
        files = watcher_files()
        program = os.path.join(self.run_dir, WATCHER_DIR, "sglang_watcher.py")
        try:
            dir_fd = sglang_proc.open_run_dir(self.run_dir)
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))
        try:
            if not self.module.check_mode:
                try:
                    os.mkdir(WATCHER_DIR, 0o755, dir_fd=dir_fd)
                except FileExistsError:
                    pass
            try:
                wfd = os.open(WATCHER_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except FileNotFoundError:
                return program, True  # check mode on a host without it yet
        finally:
            os.close(dir_fd)
        changed = False
        try:
            st = os.fstat(wfd)
            if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
                raise WaitError("%s/%s is not a directory only root can write: remove it" % (self.run_dir, WATCHER_DIR))
            for fname, data in sorted(files.items()):
                try:
                    fd = os.open(fname, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=wfd)
                    with os.fdopen(fd, "rb") as fh:
                        fst = os.fstat(fh.fileno())
                        same = (fh.read() == data and stat.S_ISREG(fst.st_mode) and fst.st_uid in (0, os.geteuid())
                                and not fst.st_mode & 0o022)
                except OSError:
                    same = False
                if same:
                    continue
                changed = True
                if self.module.check_mode:
                    continue
                tmp = "%s.%s.tmp" % (fname, secrets.token_hex(4))
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=wfd)
                with os.fdopen(fd, "wb") as fh:
                    os.fchmod(fh.fileno(), 0o644)
                    fh.write(data)
                os.rename(tmp, fname, src_dir_fd=wfd, dst_dir_fd=wfd)
        finally:
            os.close(wfd)
        return program, changed

    def sync_service(self):
        """The watcher program, the unit file (daemon-reload when it changed) and its enablement, brought up to
        date. None of them restarts the server. Returns whether anything changed (check mode: would change).
        When daemon-reload or enable fails, what this run wrote is taken back: the unit file removed when there was
        none before (the watcher program too when its dir is new), else its previous text put back."""
        p = self.p
        unit = unit_name(p["name"])
        path = self.unit_path()
        current = sglang_unit.read_regular(path) if os.path.lexists(path) else None
        if current is not None or os.path.lexists(path):
            self.check_unit_still_ours("rewrite")  # (another deployment may have written it since check_unit)
        watcher_new = not os.path.isdir(os.path.join(self.run_dir, WATCHER_DIR))
        program, changed = self.install_watcher()
        text = unit_text(p["name"], sys.executable, program, self.run_dir, p["stall_timeout"], p["stop_timeout"])
        check = self.module.check_mode
        wants = os.path.join(p["unit_dir"], "multi-user.target.wants", unit)
        written = False
        try:
            if current != text:
                changed = True
                if not check:
                    self.write_unit(path, text)
                    written = True
                    self.must("daemon-reload")
                    self.result["unit_written"] = path
            if not os.path.lexists(wants):
                changed = True
                if not check:
                    self.must("enable", unit)
        except WaitError as e:
            if not written:
                raise
            raise WaitError("%s; %s" % (e, self.take_back_unit(path, current, wants, watcher_new)))
        self.result["unit"] = unit
        return changed

    def write_unit(self, path, text):
        tmp = "%s.%s.tmp" % (path, secrets.token_hex(4))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fh.fileno(), 0o644)
            fh.write(text)
        os.rename(tmp, path)

    def take_back_unit(self, path, previous, wants, watcher_new):
        """Undo this run's unit write after a failed daemon-reload or enable; says what it did."""
        undone = []
        try:
            if previous is None:
                os.unlink(path)
                undone.append("removed %s (there was none before)" % path)
                if os.path.islink(wants) and os.path.join(os.path.dirname(wants), os.readlink(wants)) == path:
                    os.unlink(wants)
                    undone.append("removed %s" % wants)
                if watcher_new:
                    wdir = os.path.join(self.run_dir, WATCHER_DIR)
                    for fname in sorted(watcher_files()):
                        if os.path.lexists(os.path.join(wdir, fname)):
                            os.unlink(os.path.join(wdir, fname))
                    os.rmdir(wdir)
                    undone.append("removed %s" % wdir)
            else:
                self.write_unit(path, previous)
                undone.append("put the previous text of %s back" % path)
        except OSError as e:
            return "taking it back failed (%s): %s is left as written" % (e.strerror or e, path)
        rc, _out, _err = self.systemctl("daemon-reload")
        host = "the host is as before" if previous is None else "the unit is as before"
        return "%s%s. Nothing was launched." % (", ".join(undone) + ": " + host,
                                                "" if rc == 0 else " (but systemctl daemon-reload failed again)")

    def must(self, *args):
        rc, _out, err = self.systemctl(*args)
        if rc != 0:
            raise WaitError("systemctl %s failed (rc=%s): %s" % (" ".join(args), rc, (err or "").strip()[-300:]))

    def launch_service(self, parts, fp):
        """Write the watcher's config (0600: it holds the secret_environment values, never the API key, which the
        watcher reads from the server's own --config file), bring the unit up to date and start it without
        blocking (a Type=notify start blocks until READY=1); then wait on the watcher's status file."""
        self.sync_service()  # first: a failed daemon-reload or enable takes back what it wrote, and nothing else was
        token = self.supervisor_config(parts, fp)
        unit = unit_name(self.p["name"])
        self.systemctl("reset-failed", unit)  # a unit that hit its start limit refuses a start until reset
        self.must("start", "--no-block", unit)
        self.result.update(changed=True, unit=unit)
        return self.wait_service(token, attached=False)

    def read_status(self):
        try:
            return sglang_proc.read_json(self.run_dir, sglang_watcher.STATUS % self.p["name"])
        except sglang_proc.UntrustedState as e:
            raise WaitError(str(e))

    def show(self, supervisor=None):
        """The supervisor's state as ``systemctl show`` words it: the unit's (systemd), or, detached, its process's
        (``supervisor``: () -> its exit status, None while it runs)."""
        if supervisor is None:
            return self.systemctl.show(unit_name(self.p["name"]))
        rc = supervisor()
        if rc is None:
            return {"ActiveState": "activating"}
        return {"ActiveState": "inactive" if rc == 0 else "failed", "Result": "exit-code", "ExecMainStatus": str(rc)}

    def wait_service(self, token, attached, attempt=None, supervisor=None):
        """Wait on the supervisor's status file (its verdict) and its state (the unit's, or ``supervisor``'s
        process, detached), until ready, a failure, the timeout, or the end of this step (step_time)."""
        p = self.p
        watched_pid = None  # the supervisor this run started (its unreaped child): its exit wakes the wait (pidfd)
        if supervisor is not None and hasattr(supervisor, "poll"):
            watched_pid, supervisor = getattr(supervisor, "pid", None), supervisor.poll
        t0 = self.clock()
        # The watcher ends the start at `timeout` after the launch (its own clock, with the phase it reached); this
        # is the backstop when it cannot, counted from the launch too (its status's started_at), never per step.
        deadline = t0 + p["timeout"] + SERVICE_TIMEOUT_MARGIN
        step_end = t0 + p["step_time"] if p["step_time"] else None
        shown_at, show, st = None, {}, None
        while True:
            st = self.read_status()
            # this launch's status (its token), or, attached, the recorded attempt's: never an earlier attempt's verdict
            mine = st is not None and (st.get("launch") == token if token is not None else st.get("attempt") == attempt)
            verdict = st.get("verdict") if mine else None
            if mine and isinstance(st.get("started_at"), (int, float)):
                deadline = t0 + max(0.0, p["timeout"] + SERVICE_TIMEOUT_MARGIN - max(0.0, self.wall() - st["started_at"]))
            if verdict == "ready":
                return self.service_ready(st, attached)
            if verdict == "stopped":
                return self.service_stopped(st, self.show(supervisor))
            if verdict is not None:
                return self.service_failed(st, self.show(supervisor))
            now = self.clock()
            if supervisor is not None or shown_at is None or now - shown_at >= SHOW_EVERY:
                show, shown_at = self.show(supervisor), now
                active = show.get("ActiveState", "inactive")
                # inactive right after the start may be the start job still queued: final once the watcher ran
                if active == "failed" or (active == "inactive" and (mine or now - t0 >= 10)):
                    st = self.read_status()
                    if st is not None and (st.get("launch") == token if token is not None else st.get("attempt") == attempt):
                        if st.get("verdict") == "stopped":
                            return self.service_stopped(st, show)
                        if st.get("verdict") not in (None, "ready"):
                            return self.service_failed(st, show)
                    return self.unit_ended(show, st)
            if now >= deadline:
                return self.service_timeout(st if mine else None, show)
            if step_end is not None and now >= step_end:
                return self.pending(self.progress_of(st if mine else None, self.launcher), st if mine else None)
            self.check_caller()
            self.pause_for_status(min(deadline, step_end if step_end is not None else deadline), watched_pid)

    def pause_for_status(self, until, pid=None):
        """Until the supervisor writes its status file (inotify on the run dir), the supervisor ``pid`` this run
        started ends (a pidfd), or at most SHOW_EVERY s; ``poll_interval`` where events cannot be had (and with a
        fake clock)."""
        waker = self.status_waker(pid)
        if waker is None:
            self.sleep(self.p["poll_interval"])
            return
        waker.wait(max(0.0, min(SHOW_EVERY, until - self.clock())))

    def status_waker(self, pid):
        """The wait's Waker, made once: the run dir watched and, when given, the supervisor's exit; None without."""
        if not (self.real_sleep and self.events):
            return None
        if self._status_waker is None:
            waker = Waker.make()
            if waker is None or not waker.watch_dir(self.run_dir):
                self._status_waker = False
                return None
            if pid is not None:
                waker.arm({(pid, None): None}, None)  # not armed: its exit is seen at the next look (SHOW_EVERY)
            self._status_waker = waker
        return self._status_waker or None

    def service_ready(self, st, attached):
        r = self.result
        rep = st.get("report") or {}
        r.update(pid=st.get("server_pid"), log_path=st.get("log_path"), attempt=st.get("attempt"),
                 elapsed=st.get("ready_after", 0.0), phase="ready", phases=rep.get("phases", []),
                 shards=rep.get("shards"), log_tail=rep.get("log_tail", []), progress=self.progress_of(st, self.launcher))
        if rep.get("msg"):
            r["msg"] = rep["msg"]
        if attached:
            r["msg"] = "attached to our server (same fingerprint, %s) and it became healthy" % self.supervisor_words()
        if rep.get("log_crash"):
            r["log_crash"] = rep["log_crash"]
            crash = rep["log_crash"]
            self.warn("the log shows %s at line %s (%s), but the server is alive and answering: nothing was "
                             "stopped" % (crash.get("class"), crash.get("lineno"), (crash.get("line") or "").strip()[:160]))
        return r

    def service_failed(self, st, show):
        r = self.result
        rep = dict(st.get("report") or {})
        rep.pop("failed", None)
        r.update(rep)
        r.update(progress=self.progress_of(st, self.launcher))
        if self.launcher == "systemd":
            r["unit_state"] = self.unit_state(show)
            r["msg"] = "%s (unit %s: %s, exit status %s%s; journalctl -u %s)" % (
                rep.get("msg") or "the server failed", unit_name(self.p["name"]), show.get("ActiveState", "?"),
                rep.get("exit_status", show.get("ExecMainStatus", "?")),
                ", not restarted: a restart would repeat it" if rep.get("exit_status") == sglang_watcher.EXIT_PERMANENT
                else "", unit_name(self.p["name"]))
        else:
            r["msg"] = rep.get("msg") or "the server failed"
        r["failed"] = True
        self.stop_service_after_failure(show, rep.get("exit_status", sglang_watcher.EXIT_RESTARTABLE))
        return r

    def service_stopped(self, st, show):
        """The unit was stopped (``systemctl stop``, a shutdown) before its start was decided: the watcher ended the
        server and wrote ``stopped``. Not a crash: say so, with the phase the load had reached."""
        r = self.result
        unit = unit_name(self.p["name"])
        phase = st.get("phase") or "launching"
        r.update(crash_class="stopped", phase=phase, attempt=st.get("attempt"), log_path=st.get("log_path"),
                 progress=self.progress_of(st, self.launcher), unit_state=self.unit_state(show),
                 evidence="%s was stopped (it wrote 'stopped')" % self.supervisor_words(),
                 hint="something stopped it during the load (%s, a shutdown): run the playbook again to start it" % (
                     "systemctl stop %s" % unit if self.launcher == "systemd" else "a signal to the supervisor"))
        r["msg"] = "the server was stopped while loading (phase '%s'), not crashed — %s" % (phase, r["hint"])
        r["failed"] = True
        return r

    def unit_state(self, show):
        return dict((k, show.get(k)) for k in ("ActiveState", "SubState", "Result", "NRestarts", "ExecMainStatus",
                                               "StatusText") if k in show)

    def supervisor_words(self):
        return "unit %s" % unit_name(self.p["name"]) if self.launcher == "systemd" else "its supervisor program"

    def supervisor_tail(self):
        """The supervisor's own last lines: the journal of the unit, or the detached supervisor's log file."""
        if self.launcher == "systemd":
            rc, out, _err = self.module.run_command(["journalctl", "-u", unit_name(self.p["name"]), "-n", "20",
                                                     "--no-pager", "-o", "cat"])
            return out.splitlines()[-20:] if rc == 0 else []
        try:
            dir_fd = sglang_proc.open_run_dir(self.run_dir)
        except sglang_proc.UntrustedState:
            return []
        try:
            fd = os.open(SUPERVISOR_LOG % self.p["name"], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return []
        finally:
            os.close(dir_fd)
        try:
            size = os.fstat(fd).st_size
            return tail_lines(os.pread(fd, 65536, max(0, size - 65536)), 20)
        finally:
            os.close(fd)

    def unit_ended(self, show, st):
        """The supervisor ended before it named a verdict (it could not start or set up, or systemd's own
        TimeoutStartSec hit a load that stopped moving)."""
        r = self.result
        unit = unit_name(self.p["name"])
        r.update(journal_tail=self.supervisor_tail(), progress=self.progress_of(st, self.launcher))
        if self.launcher == "systemd":
            r["unit_state"] = self.unit_state(show)
        result = show.get("Result", "?")
        cls = "stalled" if result == "timeout" else "unit_failed"
        where = ("journalctl -u %s" % unit if self.launcher == "systemd"
                 else os.path.join(self.run_dir, SUPERVISOR_LOG % self.p["name"]))
        r.update(crash_class=cls, evidence="%s is %s (Result=%s, exit status %s)" % (
            self.supervisor_words(), show.get("ActiveState"), result, show.get("ExecMainStatus", "?")),
            hint=("the load stopped moving and systemd's TimeoutStartSec ended it" if cls == "stalled" else
                  "the supervisor program ended without a verdict: read journal_tail (%s)" % where))
        r["msg"] = "server failed: %s — %s (evidence: %s)" % (cls, r["hint"], r["evidence"])
        r["failed"] = True
        return r

    def service_timeout(self, st, show):
        r = self.result
        phase = (st or {}).get("phase", "?")
        r.update(crash_class="timeout", evidence="not healthy after %d s" % self.p["timeout"],
                 hint="not healthy after %d s (phase '%s'); raise timeout if the load is just slow" % (self.p["timeout"], phase),
                 progress=self.progress_of(st, self.launcher), unit_state=self.unit_state(show))
        r["msg"] = "timed out after %d s in phase '%s' — %s (%s)" % (self.p["timeout"], phase, r["hint"],
                                                                  self.supervisor_words())
        r["failed"] = True
        if self.launcher == "systemd":
            self.stop_service_after_failure(self.systemctl.show(unit_name(self.p["name"])))
        elif self.p["stop_on_failure"] and not self.module.check_mode:
            state = sglang_proc.read_state(self.run_dir, self.p["name"])
            if state and not state.get("untrusted"):
                self._stop(state)
                r["stopped_after_failure"] = r.pop("stopped", None)
        return r

    def stop_service_after_failure(self, show, decided=None):
        """A failed wait's server holds GPU memory and serves nothing: stop the unit (``stop_on_failure``), never
        in check mode. A unit whose watcher already ended is left failed, for systemctl status. When the watcher
        wrote the verdict (``decided``: its exit status) it ends the server's tree itself, after the verdict: the
        task does not wait for that. A start that failed for good (78) is never restarted by systemd; a
        restartable one (69) gets a stop job queued (``--no-block``) so that systemd does not start it again."""
        if not self.p["stop_on_failure"] or show.get("ActiveState") in ("inactive", "failed", None):
            return
        if self.module.check_mode:
            self.result["would_stop"] = True
            return
        if self.launcher != "systemd":
            # detached: the supervisor ends the failed tree after writing the verdict, and exits; nothing restarts it
            self.result["stopped_after_failure"] = {"how": "the supervisor ends the failed tree"}
            return
        unit = unit_name(self.p["name"])
        if decided == sglang_watcher.EXIT_PERMANENT:
            self.result["stopped_after_failure"] = {"unit": unit, "how": "the watcher ends the failed tree"}
            return
        if decided is not None:
            self.must("stop", "--no-block", unit)
            self.result["stopped_after_failure"] = {"unit": unit, "how": "systemctl stop --no-block"}
            return
        self.stop_unit()
        self.result["stopped_after_failure"] = self.result.pop("stopped", None)

    # ---------------------------------------------------------------- progress (both launchers)
    def progress_of(self, st, launcher):
        """The progress fields every started result carries (see RETURN: progress)."""
        st = st or {}
        phase = st.get("phase") or "launching"
        shards = st.get("shards")
        started = st.get("started_at")
        elapsed = max(0.0, self.wall() - started) if isinstance(started, (int, float)) else None
        last = self.last_load(st.get("attempt"))
        eta = None
        if st.get("verdict") == "ready":
            eta = 0.0
        elif elapsed is not None:
            eta = sglang_progress.eta(last, st.get("phases") or [], elapsed, shards)
        verdict = st.get("verdict")
        return {"phase": phase, "verdict": verdict,
                "status": st.get("status") or sglang_progress.status_text(phase, shards, verdict, st.get("ready_after")),
                "shards": shards, "elapsed": None if elapsed is None else round(elapsed, 1),
                "eta": None if eta is None else round(eta, 1), "last_load": last.get("total") if last else None,
                "attempt": st.get("attempt"), "launcher": launcher}

    def last_load(self, attempt):
        """The last successful load before this attempt (this one's own record, once it is ready, is not its ETA)."""
        try:
            loads = sglang_progress.read_loads(self.run_dir, self.p["name"])
        except (sglang_proc.UntrustedState, OSError, ValueError):
            return None
        earlier = [rec for rec in loads if attempt is None or rec.get("attempt") != attempt]
        return earlier[-1] if earlier else None

    def check_caller(self):
        """A dropped connection ends the wait, never the server: the server goes on loading (a unit, or its own
        session), the lock is let go at once (main() ends the process), and the next step or a re-run attaches to
        the same attempt."""
        if self.caller_gone():
            raise Orphaned()

    def pending(self, progress, st=None):
        """A step (step_time) ended with the server still loading: a result that is not a failure."""
        r = self.result
        r.update(pending=True, progress=progress, phase=progress["phase"], attempt=progress["attempt"],
                 msg="still loading: %s" % progress["status"])
        if st:
            r.update(pid=st.get("server_pid"), log_path=st.get("log_path"))
        return r

    def record_load(self, state, st):
        """A load that became ready: its phase durations, for the next load's ETA."""
        started = state.get("started_at")
        if not isinstance(started, (int, float)) or self.module.check_mode:
            return
        try:
            sglang_progress.record_load(self.run_dir, self.p["name"], sglang_progress.make_record(
                state.get("attempt"), max(0.001, self.wall() - started), st["phases"], st["shards"]))
        except (OSError, ValueError, sglang_proc.UntrustedState):
            pass  # the ETA of the next load is a convenience

    def _tail_of(self, state):
        """(log_tail, end offset) of the recorded log, read safely; ([], None) when there is none."""
        path = state.get("log_path")
        if not path or not os.path.exists(path):
            return [], None
        fd = open_log(path, self.p["log_dir"], self.reader(state))
        try:
            size = os.fstat(fd).st_size
            return tail_lines(os.pread(fd, 65536, max(0, size - 65536)), self.p["log_tail_lines"]), size
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- stop
    def stop_only(self):
        state, ours = self._existing()
        if self.launcher == "systemd" and os.path.exists(self.unit_path()):
            # The unit goes down (and stays down at boot); systemd stops its whole cgroup.
            show = self.systemctl.show(unit_name(self.p["name"]))
            enabled = show.get("UnitFileState") == "enabled"
            if show.get("ActiveState", "inactive") in ("inactive", "failed") and not enabled and state is None:
                if not self.module.check_mode and self.forget_watcher_config():
                    self.result["changed"] = True
                return self.result
            if self.module.check_mode:
                self.result.update(changed=True, msg="would stop and disable %s" % unit_name(self.p["name"]))
                return self.result
            self._stop(state or {"pid": None, "unverified": True}, disable=True)
            self.forget_watcher_config()
            self.result.update(changed=True, pid=(state or {}).get("pid"), unit=unit_name(self.p["name"]))
            return self.result
        if state is None:
            if not self.module.check_mode and self.forget_watcher_config():
                self.result["changed"] = True
            return self.result
        if self.module.check_mode:
            self.result["changed"] = True
            self.result["msg"] = "would stop PID %s" % state.get("pid") if ours else "would remove stale run state"
            return self.result
        self._stop(state)
        self.forget_watcher_config()
        self.result["changed"] = True
        self.result["pid"] = state.get("pid")
        return self.result

    def forget_watcher_config(self):
        """``state: stopped``: the watcher program's config (``<name>.watcher.json``, the secret_environment values)
        goes with the server, so that no file of the run dir holds a secret once it is stopped. A later start
        writes it again. Returns whether there was one."""
        fname = sglang_watcher.CONFIG % self.p["name"]
        try:
            there = os.path.lexists(os.path.join(self.run_dir, fname))
            sglang_proc.remove_file(self.run_dir, fname)
            return there
        except (OSError, sglang_proc.UntrustedState) as e:
            raise WaitError("the server is stopped, but %s/%s (it holds the server's secret environment) could not be "
                            "removed: %s" % (self.run_dir, sglang_watcher.CONFIG % self.p["name"], e))


def argument_spec():
    return dict(
        name=dict(type="str", default="sglang"),
        state=dict(type="str", default="started", choices=["started", "stopped", "watched"]),
        watch_time=dict(type="float", default=3.0),
        argv=dict(type="list", elements="str"),
        environment=dict(type="dict", default={}),
        secret_environment=dict(type="dict", default={}, no_log=True),
        redact=dict(type="list", elements="str", default=[], no_log=True),
        chdir=dict(type="path"),
        log_dir=dict(type="path", required=True),
        run_dir=dict(type="path"),
        run_as=dict(type="str"),
        fingerprint_files=dict(type="list", elements="path", default=[]),
        fingerprint_data=dict(type="dict", default={}),
        health_url=dict(type="str", default="http://127.0.0.1:30000/health_generate"),
        api_key=dict(type="str", no_log=True),
        port=dict(type="int"),
        health_timeout=dict(type="float", default=10.0),
        unhealthy_after=dict(type="int", default=3),
        serve_health_interval=dict(type="float", default=10.0),
        log_offset=dict(type="int", default=0),
        lock_timeout=dict(type="float", default=60.0),
        min_free_space_mib=dict(type="int", default=64),
        cgroup=dict(type="bool", default=True),
        timeout=dict(type="int", default=1800),
        stall_timeout=dict(type="int", default=900),
        settle_time=dict(type="float", default=0.3),
        poll_interval=dict(type="float", default=0.1),
        health_interval=dict(type="float", default=0.25),
        child_grace=dict(type="float", default=2.0),
        stop_timeout=dict(type="int", default=30),
        stop_on_failure=dict(type="bool", default=True),
        force_restart=dict(type="bool", default=False),
        prove_launch=dict(type="bool", default=False),
        on_foreign_pid=dict(type="str", default="fail", choices=["fail", "ignore"]),
        log_tail_lines=dict(type="int", default=40),
        launcher=dict(type="str", default="auto", choices=["auto", "systemd", "detached"]),
        unit_dir=dict(type="path", default="/etc/systemd/system"),
        step_time=dict(type="float", default=0.0),
        resume_attempt=dict(type="int"),
        keep_attempts=dict(type="int", default=20),
    )


def main(**inject):
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[("state", "started", ("argv",))],
        supports_check_mode=True,
    )
    waiter = ModelWaiter(module, **inject)
    try:
        result = waiter.run()
    except Orphaned:
        waiter.unlock()
        os._exit(0)  # nobody reads the result; the server goes on (see check_caller)
    except WaitError as e:
        module.fail_json(msg=operator_text(str(e)), **operator_text(waiter.result))
    except (IOError, OSError) as e:
        module.fail_json(msg=operator_text("%s: %s" % (type(e).__name__, e)), **operator_text(waiter.result))
    finally:
        waiter.unlock()
    # Every string of the result may quote the server's log or a process's command line (a client's text): what
    # reaches the operator's terminal has its control characters escaped.
    result = operator_text(result)
    if result.pop("failed", False):
        msg = result.pop("msg")
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
