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
    health answer for O(stall_timeout) seconds (a hang), not healthy by O(timeout); once it serves, a server that
    answers no health request and in which nothing moved for O(serve_stuck_seconds) (O(serve_stuck_action=restart)
    only). Failed health while serving is never a death by itself - a busy server (requests running or waiting, the
    log or the token counters moving) is kept serving and reported C(busy). The supervisor program decides; the
    module follows neither the log nor the processes itself (O(state=watched) waits on the supervisor's word).
  - Health never harms the server. SGLang 0.5.23 answers C(/health) and C(/health_generate) with a real one-token
    request that waits up to C(SGLANG_HEALTH_CHECK_TIMEOUT) (20 s) for output, skips it while busy, and keeps a
    request whose client gave up. So every health request of the supervisor and of this module goes through one
    gate per deployment (C(flock) on the root-owned C(<run_dir>/<name>.probe.lock), with the last request's send
    time in it) - never two in the server at once, none while an unanswered one may still be resident there; each is
    given more than the server's window (O(health_timeout) is raised to C(SGLANG_HEALTH_CHECK_TIMEOUT) of
    O(environment)/O(secret_environment) + 5 s, 25 s by default); while serving, a failed one is followed by no other
    until C(/v1/loads) shows the server idle, and the questions that cost the server nothing (the processes, the log,
    C(/v1/loads), C(/metrics) where enabled) say C(busy) or C(stuck).
  - The log explains and hurries; it never acts alone. Its crash signatures (C(module_utils/sglang_log.py),
    built against real SGLang logs) name the class, the hint, the deciding line and the traceback of a
    failure that evidence proved, and make the module ask the health URL at once. A crash the log shows
    while every process lives and the health URL answers 200 to a request sent after the line was read is
    returned as RV(log_crash) with a warning, and nothing is stopped or failed (a serving server's log also
    holds what clients wrote, in uvicorn's access lines and C(--log-requests) echoes). A crash is reported within a
    poll (0.1 s) of the evidence.
  - No secret reaches the log file. The server's output is a pipe to its supervisor program
    (C(module_utils/sglang_supervisor.py), both launchers), which replaces each secret (O(api_key),
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
  - With O(gpu_release_below_mib), a (re)start that stopped our old server waits until its GPU memory is back
    before it launches the new one (RV(gpu_release)), so that one call per host does stop, GPU release and launch.
version_added: "1.0.0"
author:
  - eagle-deploy contributors (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
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
      - Raised to the server's health window (C(SGLANG_HEALTH_CHECK_TIMEOUT) in O(environment) or
        O(secret_environment), default 20 s) plus 5 s when lower - a request is never given up while the server may
        still hold it.
    type: float
    default: 10.0
  unhealthy_after:
    description:
      - A watched server (O(state=watched), the watch's own requests) is declared unhealthy only after this many
        failed health requests in a row (no answer, or not 200), at least 1 s apart; at the end of O(watch_time) the
        watch keeps asking until a request answers 200 or this many have failed. A request that waited out the
        server's health window is followed by no other - the supervisor's word (C(busy) or C(stuck)) answers then.
      - The supervisor does not count failures of a serving server - failed health there is a question
        (O(serve_stuck_seconds)).
    type: int
    default: 3
  serve_health_interval:
    description:
      - Seconds between two health requests the supervisor program sends to a serving server (each
        C(/health_generate) costs it a 1-token generation; both launchers). Raised to the server's health window
        (C(SGLANG_HEALTH_CHECK_TIMEOUT), default 20 s) plus 5 s when lower. Each request is given O(health_timeout)
        (raised likewise). A failed one is followed by no other until C(/v1/loads) shows the server idle (it has taken
        our request out); meanwhile the server is C(busy) while something moves, C(stuck) once nothing moved for
        O(serve_stuck_seconds).
      - Read by the watcher program when the unit starts; a change applies at the next (re)start of the server.
    type: float
    default: 10.0
  serve_stuck_seconds:
    description:
      - A serving server whose health fails is C(stuck) once nothing moved for this many seconds - no log line, no
        change in C(/v1/loads) (requests running, waiting) or in the token counters of C(/metrics) (where
        C(--enable-metrics) is on), no health answer. Until then it is C(busy) (a long prefill skips health
        requests) - kept serving, recorded in the supervisor's status (C(serving.activity)) and the unit's
        C(STATUS=).
      - Keep it no shorter than SGLang's C(--watchdog-timeout) (300 s), the first line for a hung forward pass.
    type: float
    default: 300.0
  serve_stuck_action:
    description:
      - What a C(stuck) server gets. C(report) (no signal) - the supervisor's status and C(STATUS=) say C(stuck),
        O(state=watched) fails with RV(crash_class=stuck). C(restart) - the supervisor ends it (verdict C(stuck), exit
        69; under systemd restarted by C(Restart=on-failure)).
    type: str
    choices: [report, restart]
    default: report
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
  gpu_release_below_mib:
    description:
      - With O(state=started), when a (re)start stops our old server, wait after the stop and before the launch until
        every GPU of O(gpu_release_indices) has less than this many MiB of C(memory.used) (polled with
        C(nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits) every O(poll_interval) seconds), so
        that the new server does not meet a card the old one still holds. RV(gpu_release) says how long it took.
      - Before anything is stopped, C(nvidia-smi) is asked once; it must answer and list every selected GPU, or the
        task fails with nothing stopped. After O(gpu_release_timeout) seconds the task fails with the per-GPU
        figures; the old server is then stopped and nothing is launched.
      - Unset, there is no wait. Without C(nvidia-smi) on the host there is none either (RV(gpu_release.note) says
        so). A run that keeps the server, and check mode, never query C(nvidia-smi).
    type: int
  gpu_release_indices:
    description:
      - The GPU indices that O(gpu_release_below_mib) looks at; all GPUs C(nvidia-smi) lists when unset.
    type: list
    elements: int
  gpu_release_timeout:
    description: Seconds to wait for O(gpu_release_below_mib) before failing.
    type: float
    default: 120
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
  join:
    description:
      - A multi-node server (one server on several hosts, SGLang's C(--nnodes)), joined on the controller by this
        module's action plugin; the module on the host ignores it. With O(state=started) each node's task first asks
        the module in check mode whether it would restart; when any node would, every node restarts. The task is ok on
        a node only once every node is ready (rank 0's health, a follower's own load done); when any node fails (its
        crash, SGLang's load barrier, a node that never joins within O(join.timeout)) every other node's server is
        stopped (rank 0 first) and its task fails naming the node that failed.
      - Every host of O(join.nodes) must run this task in the same run (same batch). In check mode only the plans are
        joined (a node reports the restart another node's change would bring); other states do not join.
    type: dict
    suboptions:
      group:
        description: The inventory group whose hosts are the server (its name, for the board and the messages).
        type: str
        required: true
      nodes:
        description: The group's hosts in rank order (rank 0 first), as inventory names.
        type: list
        elements: str
        required: true
      rank:
        description: This host's rank, its index in O(join.nodes).
        type: int
        required: true
      timeout:
        description: Seconds from the launch within which every node must have joined (its load begun), and within
          which every node must have reached this task.
        type: float
        default: 600
      step_time:
        description: Seconds a step waits on the host before the controller reads the other nodes' words again.
        type: float
        default: 2
  prove_launch:
    description:
      - With O(state=started) in check mode, prove the launch as a real run does before it stops anything (O(run_as)
        can run C(argv[0]) and its C(#!) interpreters, and that interpreter, a Python or a POSIX shell, starts once
        with C(-c '')), when the server would be (re)started. The task fails if the new server could not start.
      - Outside check mode every launch is proven anyway, before our old server is stopped; in check mode without it,
        nothing is run.
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
      - How the server runs. C(systemd) - the unit C(sglang-<name>.service) in O(unit_dir) (C(Type=notify), enabled at
        boot, C(KillMode=control-group), C(LimitMEMLOCK=infinity)) runs the host watcher program
        (C(module_utils/sglang_supervisor.py), installed by the role in O(program_dir)), which starts SGLang as
        its child, writes its redacted log, sends C(STATUS=) per phase, C(EXTEND_TIMEOUT_USEC) while the log moves and
        C(READY=1) once the health URL answered 200, and exits 78 (not restarted) when a start failed or 69
        (C(Restart=on-failure), within a start limit) when a serving server died. The module waits on the
        watcher's status file C(<run_dir>/<name>.status.json) and the unit's state; stop is C(systemctl stop)
        (C(disable --now) for O(state=stopped)).
      - With C(systemd) this module writes no unit and runs no C(daemon-reload) or C(enable). The unit is the
        template C(roles/sglang_server/templates/sglang.service.j2), written, loaded and enabled by the role's
        C(tasks/unit.yml) (C(ansible.builtin.template), a C(daemon-reload) handler, C(ansible.builtin.systemd_service)),
        which takes what the template needs from this module in check mode (RV(unit_facts)). A launch
        (O(state=started), not check mode) requires that unit at C(<unit_dir>/sglang-<name>.service), this
        deployment's and loaded by systemd as it is on disk; otherwise it fails naming the file (run the role, or
        C(include_role) C(sglang_server) with C(tasks_from=unit.yml), first). It then checks the installed watcher
        program (O(program_dir)), writes its config and runs C(systemctl start --no-block).
      - The unit is one deployment's (O(name) + the real path of O(run_dir), recorded on a comment line of the unit
        file's header, next to the eagle-deploy mark). Before anything is written or stopped (check mode too, and so
        in the role's check before its template) the module asks C(systemctl show) (FragmentPath, DropInPaths,
        Transient, LoadState) and looks into every directory systemd reads units from, and refuses, naming the file -
        another deployment's unit of that name (choose another O(name)), a unit of that name eagle-deploy did not
        write (in any unit dir, masked, or transient from C(systemd-run --unit)), and any drop-in for it
        (eagle-deploy writes none). It also checks beforehand what C(systemctl enable) needs. A unit that an earlier
        eagle-deploy wrote from this module (mark C(# Written by eagle-deploy (wait_for_model).)) is this
        deployment's when it names its run dir, and the role's template takes it over. Start, stop and disable act
        only on a unit file with our mark and our deployment.
      - C(detached) - the module starts the same supervisor program (C(python3 -I -B <program_dir> RUN_DIR NAME))
        in a session (and, as root, a cgroup) of its own, its own lines in C(<run_dir>/<name>.supervisor.log), and
        waits on its status file as for a unit; stop is SIGTERM to the supervisor, then the recorded process tree.
        A serving server whose supervisor is gone gets one put back (C(--adopt)) without a restart. For hosts
        without systemd as PID 1 (containers).
      - C(auto) - C(systemd) where C(/run/systemd/system) exists and the module runs as root, else C(detached).
        RV(launcher) says which; the role's unit tasks go by it.
    type: str
    choices: [auto, systemd, detached]
    default: auto
  program_dir:
    description:
      - Where the supervisor program (both launchers) is installed - a directory C(__main__.py) +
        C(eagle_deploy/) that the role C(sglang_server) copies from its C(files/supervisor) (C(tasks/program.yml),
        variable C(sglang_server_program_dir)), root-owned, files 0644, directories 0755; run as
        C(python -I -B <program_dir> RUN_DIR NAME) (RV(unit_facts) C(exec_start)). This module never writes it.
      - Before it runs the program (a launch, or a supervisor put back) the module refuses, saying what to fix, a
        program that someone less privileged could have written - the directory or anything in it owned by another
        user than root or the module's, writable by its group or others, a symlink in it or on its path, or a
        directory above it writable by others (a sticky root-owned one such as C(/tmp) excepted) - and one not installed.
      - Keeping a running server, it compares the installed program with the one it ships and warns when they differ
        (the role's copy brings it up to date; the server is not restarted, its next start runs it).
      - Default C(<run_dir>/supervisor).
    type: path
  unit_dir:
    description: Where the unit file of O(launcher=systemd) is (the role's unit tasks write it there). A unit of the
      same name that eagle-deploy did not write for this deployment, here or in any other unit directory of systemd,
      is refused (see O(launcher)).
    type: path
    default: /etc/systemd/system
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
  - module: ansible.legacy.gpu_facts
  - module: ansible.builtin.wait_for
  - module: ansible.builtin.uri
"""

EXAMPLES = r"""
- name: Launch SGLang and wait until it can generate
  ansible.legacy.wait_for_model:
    name: sglang
    argv: [/opt/sglang/venv/bin/python, -m, sglang.launch_server, --config, /etc/sglang/server.yaml]
    environment:
      SGLANG_HEALTH_CHECK_TIMEOUT: "20"
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
nodes_group:
  description: With O(join), each node's last word on the controller's board, by host (C(rank), C(state) - planned,
    pending, ready, failed, stopped, absent - and C(phase)).
  returned: with O(join) outside check mode
  type: dict
  sample: {"node-0": {"rank": 0, "state": "ready", "phase": "ready"}, "node-1": {"rank": 1, "state": "ready", "phase": "ready"}}
failed_rank:
  description: With O(join), the rank whose failure ended the group (on the other nodes' results).
  returned: when another node of the group failed
  type: int
  sample: 1
group_failure:
  description: With O(join), that node's failure (C(msg), C(crash_class), C(crash_exception), C(hint), C(deciding_line),
    C(log_path), C(phase)), as its own task reports it.
  returned: when another node of the group failed
  type: dict
  sample: {"msg": "server crashed", "crash_class": "cuda_oom"}
group_stop:
  description: With O(join), what stopping this node's server after another node's failure did (C(changed), C(msg)).
  returned: when this node was stopped because the group failed
  type: dict
  sample: {"changed": true, "msg": "stopped"}
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
judged_failed:
  description:
    - Why the kept server's last smoke test failed while it kept answering (recorded by
      M(ansible.legacy.sglang_good_deployment) with O(ansible.legacy.sglang_good_deployment#module:state=failed)). The
      role runs its smoke test again instead of taking the server for good.
  returned: when the kept server's last smoke test did not pass
  type: str
  sample: "at Check that speculative decoding accepts drafted tokens: spec_not_accepting: accept length 1.00"
crash_class:
  description:
    - Class of the failure. From the log - python_exception, bad_config, warmup_failed,
      first_request_crash, cuda_graph_capture, cuda_oom, kv_pool_oom, cuda_error, nccl,
      compile_error, child_sigquit, killed, port_in_use, native_crash, watchdog_timeout,
      load_barrier_timeout (a multi-node load barrier). From the
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
    - Such a class is shown flagged (C(class uncertain)) wherever it is shown - the message, the supervisor's status
      line, the warning of a crash line a healthy server outlived; a crash in RV(log_crash) carries the same key.
  returned: on failure, when true
  type: bool
  sample: true
crash_cause:
  description:
    - The known cause of the log's crash where the crash catalogue names one (docs/crash-catalogue.md), for example
      C(spec_draft_extend_metadata_none), C(spec_draft_extend_gather_oob) or C(spec_draft_mla_backend) - crashes of
      speculative decoding with a known fix or workaround. RV(crash_class) stays the class; RV(hint) names the fix.
      Taken only from the crash's own lines (deciding line, exception, traceback), never from a request's text.
  returned: on failure, when the catalogue names the cause
  type: str
  sample: spec_draft_extend_metadata_none
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
gpu_release:
  description:
    - The wait of O(gpu_release_below_mib) after our old server was stopped - the figure, the seconds from the start of
      the wait to the poll that saw every selected GPU below it (on a timeout, the seconds waited), the number of
      C(nvidia-smi) polls, and the selected GPUs' C(memory.used) at the last poll. With no C(nvidia-smi) on the host,
      C(note) says that nothing was waited for.
  returned: with O(gpu_release_below_mib), when a (re)start stopped our old server (on success and on failure)
  type: dict
  contains:
    below_mib:
      description: O(gpu_release_below_mib).
      type: int
    seconds:
      description: Seconds until the memory was back (1 poll - it already was).
      type: float
    polls:
      description: C(nvidia-smi) polls of the wait.
      type: int
    gpus:
      description: The selected GPUs at the last poll, C(index) and C(memory_used_mib) (null - not available).
      type: list
      elements: dict
    note:
      description: Why nothing was waited for (no C(nvidia-smi)).
      type: str
      returned: when C(nvidia-smi) is missing
  sample: {"below_mib": 2048, "seconds": 0.31, "polls": 3, "gpus": [{"index": 0, "memory_used_mib": 9}]}
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
serving_state:
  description:
    - What the supervisor finds the serving server - C(busy) (its health fails while requests run or wait, the log or
      the token counters move; kept serving) or C(stuck) (nothing moved for O(serve_stuck_seconds); reported, or
      restarted with O(serve_stuck_action=restart)). With a warning. O(state=watched) ends ok when C(busy), fails
      with RV(crash_class=stuck) when C(stuck).
  returned: when the supervisor finds the kept or watched server busy or stuck
  type: str
  sample: busy
launcher:
  description: The launcher used (O(launcher) with C(auto) resolved).
  returned: always, once the input was checked
  type: str
  sample: systemd
unit:
  description: The systemd unit that runs the server.
  returned: with O(launcher=systemd), once the unit was checked
  type: str
  sample: sglang-sglang.service
unit_facts:
  description:
    - What the role's unit template (C(roles/sglang_server/templates/sglang.service.j2)) takes from the module, so that
      the role computes none of it - C(name) and C(path) of the unit, C(deployment_line) (the header line that records
      the deployment, with the run dir's hash), C(exec_start) (the words of C(ExecStart) - the module's C(python),
      C(-I), C(-B), the supervisor C(program) directory O(program_dir), C(run_dir), O(name)), whether the file C(exists) and whether systemd has it
      C(loaded) as it is on disk (no C(daemon-reload) pending).
    - Returned in check mode too (the role's check before its template).
  returned: with O(launcher=systemd), once the unit was checked
  type: dict
  sample: {"name": "sglang-sglang.service", "path": "/etc/systemd/system/sglang-sglang.service",
           "deployment_line": "# eagle-deploy deployment: sglang-0123456789ab run_dir=/var/lib/eagle-deploy/run",
           "python": "/usr/bin/python3", "program": "/var/lib/eagle-deploy/run/supervisor",
           "run_dir": "/var/lib/eagle-deploy/run", "exists": true, "loaded": true,
           "exec_start": ["/usr/bin/python3", "-I", "-B", "/var/lib/eagle-deploy/run/supervisor",
                          "/var/lib/eagle-deploy/run", "sglang"]}
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
exit_status:
  description: The supervisor program's exit status for the failure it decided - 78 (C(EX_CONFIG), a start that failed;
    a restart would repeat it, systemd does not restart it) or 69 (C(EX_UNAVAILABLE), a serving server died or a load
    hung; C(Restart=on-failure) may restart it), 71 when it could not set up.
  returned: on failure the supervisor decided
  type: int
  sample: 78
after_ready:
  description: Whether the failure the supervisor decided came after the server had become ready (while serving).
  returned: on failure the supervisor decided
  type: bool
  sample: false
port:
  description: The port our server was recorded with (the run state's).
  returned: with O(state=watched)
  type: int
  sample: 30000
pending:
  description: The action plugin's step (its task argument C(step_time)) ended while the server is still loading; the
    plugin calls the module again, which goes on with the same launch's wait.
  returned: in a step of the action plugin that ended with the load going on
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
steps:
  description: The number of module calls the action plugin made for this task (its steps of C(step_time)).
  returned: with O(state=started) when the action plugin waited in steps
  type: int
  sample: 7
summary:
  description:
    - What the server did, in the operator's one line - restarted (and why) or unchanged, its PID, the old server's stop
      and the GPU memory's release (a restart that stopped one), the attempt, the seconds of the wait and the log.
      Composed by the action plugin (C(module_utils/sglang_result_text.py)); the role prints it.
  returned: with O(state=started), when it did not fail
  type: str
  sample: "server sglang: restarted (fingerprint changed: argv), pid 41235, old server stopped (PIDs 7, 8) in 5.7 s,
    GPU memory back below 2048 MiB after 0.026 s, attempt 3, 612.4 s, log /var/log/sglang/sglang_r3.log"
failure_message:
  description:
    - The operator's message of the failure - C(msg) and, when the wait decided a failure (RV(crash_class); an input or
      safety refusal has none, its message says it all), C(crash class) (flagged when RV(class_uncertain)) with
      RV(crash_exception), C(hint), C(deciding line), C(log) and C(---- log tail ----) with RV(log_tail), an API key
      assignment in a line masked. Composed by the action plugin (C(module_utils/sglang_result_text.py)); the role
      fails with it.
  returned: on failure with O(state=started)
  type: str
  sample: "server crashed: cuda_oom ...\ncrash class: cuda_oom (torch.OutOfMemoryError: CUDA out of memory)\nhint: ..."
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_input_checks import Orphaned, WaitError
from ansible.module_utils.sglang_progress import operator_text
from ansible.module_utils.sglang_module_options import argument_spec
from ansible.module_utils.sglang_run import ModelWaiter


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
        waiter.runlock.unlock()
        os._exit(0)  # nobody reads the result; the server goes on (see check_caller)
    except WaitError as e:
        module.fail_json(msg=operator_text(str(e)), **operator_text(waiter.result))
    except (IOError, OSError) as e:
        module.fail_json(msg=operator_text("%s: %s" % (type(e).__name__, e)), **operator_text(waiter.result))
    finally:
        waiter.runlock.unlock()
    # Every string of the result may quote the server's log or a process's command line (a client's text): what
    # reaches the operator's terminal has its control characters escaped.
    result = operator_text(result)
    if result.pop("failed", False):
        msg = result.pop("msg")
        module.fail_json(msg=msg, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
