"""The sandbox interface: the primitives a backend implements, and the behaviour built on them.

A backend (:mod:`.docker`, :mod:`.compose`, :mod:`.memory`) implements ``name``, :meth:`run`,
:meth:`upload`, :meth:`download`, :meth:`is_running`, :meth:`remove` and :meth:`disk_usage`, and
calls :meth:`Sandbox.prepare` once its environment runs. Everything an episode does besides (its
commands, the agent's confined file actions (inherited from :mod:`.files`), the engine reads
(inherited from :mod:`.engine_files`), the helper's stop and the process baseline) is written
once, on those primitives alone.

A backend may also offer an exec channel (:mod:`.channel`) by overriding :meth:`open_channel`,
and a relayed port (:mod:`.relay`) by overriding :meth:`relay`: Docker and compose do, the memory
backend does not. The agent's own actions (``channel=True``)
go through it while it works; everything else, and every action once it failed, uses :meth:`run`.
"""

from __future__ import annotations

import functools
import logging
import posixpath
import re
import threading
import time
import uuid
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from harbor_openenv import helper
from harbor_openenv.helper import contract

from .channel import Channel, ChannelSlot
from .command import Command
from .engine_files import EngineFiles
from .errors import SandboxError
from .files import AgentFiles, load_script
from .result import ExecResult

# What keeps an episode's container running: the runtime's helper as PID 1 (``helper keep``,
# root, not dumpable), which reaps every orphan, has no child whose death would end the container
# and does the stop before grading (see :meth:`Sandbox.stop_processes`). The image's ENTRYPOINT, if
# any, is its child, started as the image's user with Harbor's keepalive (``helper idle`` where
# Harbor has ``sh -c "sleep infinity"``) as its arguments.
KEEPER_ENTRYPOINT = (helper.HELPER, contract.COMMAND_KEEP)
KEEPALIVE = (helper.HELPER, contract.COMMAND_IDLE)
EXEC_MARK = "HARBOR_OPENENV_EXEC"  # in each exec's environment, to find what a timed-out one left
# The shell and PATH of the orchestrator's own root scripts (exec_root, the timed-out command's
# sweep): the system folders alone, never the image's PATH, whose earlier folders (/usr/local/bin,
# a venv's bin) an image may leave writable to an unprivileged agent, which would put its own
# `sh` or `rm` where a root exec finds it first.
ROOT_SHELL = "/bin/sh"
ROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
LOGS_ARTIFACTS = "/logs/artifacts"  # made by setup.sh in every environment; artifacts travel
# Prepare arguments for the helper: the verifier's user, its output folder, the tests folder and
# contract.PREPARE_STAGE (empty it for tests to be uploaded) or PREPARE_KEEP (the image brings
# them).
VerifierDirs = tuple[str, str, str, str]
log = logging.getLogger("harbor_openenv")
_KEEPER_TIMEOUT_S = 60.0  # the keeper's stop takes at most contract.STOP_SECONDS of its own
_STOP_FAILURES = {
    contract.KEEP_ENTRYPOINT_EXITED: "the image's ENTRYPOINT exited",
    contract.KEEP_STOP_FAILED: "could not stop the agent's processes",
    contract.KEEP_PREPARE_FAILED: "cannot prepare the verifier",
}


class Healthcheck(Protocol):
    """What :meth:`Sandbox.healthcheck` runs: the fields of a task's ``healthcheck`` table."""

    @property
    def command(self) -> str: ...
    @property
    def interval_sec(self) -> float: ...
    @property
    def timeout_sec(self) -> float: ...
    @property
    def start_period_sec(self) -> float: ...
    @property
    def start_interval_sec(self) -> float: ...
    @property
    def retries(self) -> int: ...


def keeper_command(
    user: str, entrypoint: Sequence[str] | None, command: Sequence[str] | None = None
) -> list[str]:
    """The arguments of :data:`KEEPER_ENTRYPOINT`: the keeper's child, run as ``user`` (the
    image's, "" for root): the ENTRYPOINT with ``command`` (a compose task's own for main, else
    Harbor's keepalive); nothing when there is neither."""
    program = [*(entrypoint or ()), *(command or (KEEPALIVE if entrypoint else ()))]
    return [user or "0", *program] if program else []


def _unescape(path: str) -> str:
    """A path of the keeper's changes answer: its ``\\ooo`` escapes as the bytes they name
    (UTF-8, anything else replaced: the report shows them)."""
    raw = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), path.encode())
    return raw.decode("utf-8", errors="replace")


class Sandbox(AgentFiles, EngineFiles):
    """One episode's task environment: the abstract primitives, then the shared behaviour.

    Longer than the project's ~250 lines per class on purpose: it is every backend's shared
    behaviour in one place, so that a backend is only its primitives.
    """

    def __init__(self) -> None:
        self.workdir = "/"  # the agent's working directory
        self.default_user = ""  # the environment's own user (its image's USER), "" for root
        self.exceeded: str | None = None  # why the disk guard ended the episode, if it did
        self._real_workdir = "/"  # resolved once by prepare, before the agent can move things
        self._artifacts_mtime: str | None = None  # an empty /logs/artifacts' mtime at prepare
        self._stopping = threading.Lock()  # one request to the keeper at a time
        self._marked = False  # a baseline was taken: every command from now on is untrusted
        self.ran_as: set[str] = set()  # the users untrusted commands ran as since the baseline
        self._parked: set[str] = set()  # the users the keeper holds a killer of (see _park)
        self.channel = ChannelSlot(self.open_channel)

    # -- the primitives every backend implements -----------------------------------------------

    @property
    @abstractmethod
    def name(self) -> str:
        """A short label for logs, such as a container's short id."""

    @abstractmethod
    def run(self, command: Command) -> ExecResult:
        """Run ``command`` (:class:`.command.Command`): past its timeout stop waiting and answer
        ``timed_out`` (what it started is killed by :meth:`exec`). Raises :class:`SandboxError`
        when it cannot start, and what a ``stdin`` function raises."""

    @abstractmethod
    def is_running(self) -> bool:
        """Whether the environment still runs (an idle pooled one may have stopped)."""

    @abstractmethod
    def remove(self) -> None:
        """Remove the environment and all it holds (idempotent)."""

    @abstractmethod
    def disk_usage(self) -> int:
        """Bytes the agent's writes take (apparent sizes), for the disk guard."""

    @abstractmethod
    def ask_keeper(self, request: str, *, timeout_s: float) -> str:
        """Send one line to the keeper (PID 1, ``helper keep``) on its standard input and return
        its answer line, on a connection only the engine holds: no process of the sandbox can
        write the keeper's input or read its output. Raises :class:`SandboxError` when it cannot
        be reached or does not answer within ``timeout_s``."""

    def changes(self) -> list[tuple[str, int]] | None:
        """The paths the environment changed since it started, as the engine lists them (path,
        kind: 0 changed, 1 added, 2 deleted), never through a program inside it; None: this
        backend cannot tell."""
        return None

    def changes_since_mark(self, skip: Sequence[str]) -> list[tuple[str, int]] | None:
        """What changed since the baseline (:meth:`mark_baseline`) outside the folders ``skip``,
        as :meth:`changes` lists them (directories too), asked of the keeper: it walks only the
        folders the environment wrote, by their inode change times (``keep.c``), which no
        process of it can set back. Where the keeper cannot tell (no keeper, too many changes),
        the engine's :meth:`changes`."""
        try:
            ok, detail = self._ask([contract.REQUEST_CHANGES, *skip])
        except SandboxError:
            ok, detail = False, ""
        if not ok:
            return self.changes()
        kinds = {contract.CHANGE_ADDED: 1, contract.CHANGE_CHANGED: 0}
        found = []
        for entry in detail.split():
            kind, _, path = entry.partition(":")
            found.append((_unescape(path), kinds.get(kind, 0)))
        return found

    def engine_mtime(self, path: str) -> str | None:
        """The modification time of ``path`` as the engine reads it (one stat, no program of the
        sandbox), None when absent or where the backend cannot tell."""
        return None

    def commit(self, labels: Mapping[str, str]) -> str:
        """Commit the environment's filesystem to a new image labelled ``labels`` (processes are
        not carried) that starts as the environment's own image does; its id. Raises
        :class:`SandboxError` where the backend cannot."""
        raise SandboxError(f"this backend ({type(self).__name__}) cannot fork an environment")

    def relay(self, port: int, target: tuple[str, int]) -> AbstractContextManager[None]:
        """While open, TCP connections to 127.0.0.1:``port`` inside the environment (its network
        namespace: loopback works with network none) reach ``target``, an address on the
        runtime's side, and nothing else (:mod:`.relay`). Raises :class:`SandboxError` where the
        backend cannot, or when the port cannot be listened on."""
        raise SandboxError(f"this backend ({type(self).__name__}) cannot relay a port")

    def open_channel(self, user: str) -> Channel | None:
        """A new exec channel running as ``user`` (:mod:`.channel`); None: this backend has none.
        Raises :class:`SandboxError` when it cannot start."""
        return None

    # -- commands ------------------------------------------------------------------------------

    def _run_for(self, channel: bool, command: Command) -> ExecResult:
        """:meth:`run`, through the exec channel first when ``channel`` (an agent's action) and
        ``stdin`` is bytes. Once a baseline was taken, the command's user is one whose code the
        stop before grading must end (:attr:`ran_as`). An agent's command the disk guard
        interrupted is never run again: it answers with the guard's error."""
        if self._marked:
            user = command.user or self.default_user
            if user not in self._parked:
                self._park(user)
            self.ran_as.add(user)
        if self.exceeded and channel:
            raise SandboxError(self.exceeded)
        if channel and not callable(command.stdin):
            answer = self.channel.run(command)
            if answer is not None:
                return answer
            if self.exceeded:  # the guard's stop ended the channel: the command does not rerun
                raise SandboxError(self.exceeded)
        return self.run(command)

    def prepare(self, workdir: str | None) -> None:
        """Make ``/logs``'s folders, resolve the working directory (None: the image's) and record
        the process baseline; a backend calls it once its environment runs."""
        setup = self.exec_root(load_script("setup"), workdir=workdir or "")
        if setup.exit_code != 0:
            raise SandboxError(f"preparing the container failed: {setup.output.strip()}")
        lines = [*setup.output.splitlines(), "", "", ""]
        self.workdir = posixpath.normpath(workdir or lines[0])
        self._real_workdir = lines[1]
        self._artifacts_mtime = self.engine_mtime(LOGS_ARTIFACTS) if lines[2] == "empty" else None
        self.mark_baseline()

    def artifacts_untouched(self) -> bool:
        """Whether ``/logs/artifacts`` is surely still as prepare found it, empty: its
        modification time, as the engine reads it, is the one it had then (an entry added, removed
        or renamed in it sets that time). Only the agent can set it back, and it then only hides
        its own artifacts; False where the backend cannot tell."""
        mark = self._artifacts_mtime
        return mark is not None and self.engine_mtime(LOGS_ARTIFACTS) == mark

    def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        max_output: int,
        user: str | None = None,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        args: tuple[str, ...] = (),
        channel: bool = False,
        after: Callable[[], object] | None = None,
    ) -> ExecResult:
        """Run ``bash -c command`` (``args`` as its $1...); on timeout every process it started
        is killed. ``channel``: the agent's own command, which may use the exec channel.
        ``after``: work that must be done before ``command`` starts, done while the engine
        starts the shell that waits for it (so the two overlap); its error ends that shell and
        is raised. ``command``'s standard input is then ``/dev/null``, as without ``after``."""
        mark = uuid.uuid4().hex
        if after is not None:
            command = f"IFS= read -r _ || exit; exec </dev/null; {command}"
        result = self._run_for(
            channel,
            Command(
                ["bash", "-c", command, *(("bash", *args) if args else ())],
                timeout_s=timeout_s,
                max_output=max_output,
                user=user or "",
                env={**(env or {}), EXEC_MARK: mark},
                workdir=workdir or self.workdir,
                stdin=None if after is None else functools.partial(_go_after, after),
            ),
        )
        if result.timed_out:
            self._kill_marked(f"{EXEC_MARK}={mark}", user or "")
        return result

    def _kill_marked(self, mark: str, user: str) -> None:
        """Kill what a timed-out command left, by its mark: as root, then as the command's user
        (root without CAP_SYS_PTRACE cannot read another user's ``/proc/PID/environ``)."""
        for who in ("root", user) if user not in ("root", "0") else ("root",):
            self.run(
                Command(
                    [ROOT_SHELL, "-c", load_script("kill-marked"), "sh", mark],
                    timeout_s=60,
                    max_output=1 << 16,
                    user=who,
                    env={"PATH": ROOT_PATH},
                    workdir="/",
                )
            )

    def healthcheck(self, check: Healthcheck, *, user: str | None, where: str) -> None:
        """Run ``check.command`` until it passes, with Docker HEALTHCHECK's retries, as Harbor
        does: failures in the start period do not count; ``where`` names the check in the error
        raised once ``retries`` failures came in a row."""
        start_period_end = time.monotonic() + check.start_period_sec
        failures = 0
        while True:
            in_start_period = time.monotonic() < start_period_end
            run = self.exec(check.command, timeout_s=check.timeout_sec, max_output=8192, user=user)
            if run.exit_code == 0:
                return
            if in_start_period:
                time.sleep(check.start_interval_sec)
                continue
            failures += 1
            if failures >= check.retries:
                raise SandboxError(
                    f"{where} failed {failures} times in a row:"
                    f" {check.command!r} (last output: {run.output.strip()[-500:]!r})"
                )
            time.sleep(check.interval_sec)

    def exec_root(
        self, script: str, *args: str, workdir: str = "/", timeout_s: float = 60
    ) -> ExecResult:
        """Run a POSIX sh script as root for the orchestrator (not the agent): :data:`ROOT_SHELL`
        on :data:`ROOT_PATH`, so nothing an unprivileged agent planted on the image's PATH runs."""
        return self.run(
            Command(
                [ROOT_SHELL, "-c", script, "sh", *args],
                timeout_s=timeout_s,
                max_output=1 << 20,
                user="root",
                env={"PATH": ROOT_PATH},
                workdir=workdir,
            )
        )

    def stop_processes(self, prepare: VerifierDirs | None = None) -> None:
        """End every process the agent (or a verifier or solve running its code) may have started,
        whatever its name, user, state or threads; then, with ``prepare``, empty the verifier's
        output folder for its user alone and the tests folder. The keeper (PID 1, root, not
        dumpable) does it on a request over its standard input (an attach: no new process),
        and makes none itself: it stops every process with one ``kill(-1, SIGSTOP)``; with any of
        :attr:`ran_as` root (or sharing a uid with a baseline process) it kills every other
        process of the PID namespace with one ``kill(-1, SIGKILL)``, which no fork, thread or
        process group survives; else each of those users' processes with one ``kill(-1)`` from a
        thread of that uid parked before the user's first command (:meth:`_park`), keeping the
        image's processes of other users. So a full process table, memory cgroup, disk or
        descriptor table cannot deny it. The exec channel is closed first (it dies with the
        rest)."""
        users = sorted(self.ran_as)
        fields = [contract.REQUEST_STOP, ",".join(user or "0" for user in users)]
        if prepare is not None:
            fields += list(prepare)
        answer = self._keeper(fields)
        if answer is not None:
            if not self.is_running():
                raise SandboxError(
                    "the environment stopped running while the agent's processes were being"
                    f" stopped (the keeper answered: {answer})"
                )
            code, _, why = answer.partition(" ")
            problem = _STOP_FAILURES.get(int(code) if code.isdigit() else 0, "the keeper failed")
            raise SandboxError(f"{problem} (code {code}): {why}")

    def mark_baseline(self) -> list[int]:
        """Count every process running now as the environment's (their pids are returned): the
        keeper keeps them through a stop where that is safe. Called once an episode's
        environment is ready, before the agent's first action (the exec channel, opened by that
        action, is never in the baseline); from then on every command's user is recorded in
        :attr:`ran_as`."""
        ok, answer = self._ask([contract.REQUEST_MARK])
        if not ok:
            code, _, why = answer.partition(" ")
            if code == str(contract.KEEP_ENTRYPOINT_EXITED):
                raise SandboxError(f"{why}: {self.logs_tail()}".rstrip(": "))
            raise SandboxError(f"cannot list processes (code {code}): {why}")
        self._marked = True
        self.ran_as.clear()
        return [int(entry.split(":")[0]) for entry in answer.split()]  # each "PID:START"

    def _park(self, user: str) -> None:
        """Before ``user``'s first command: the keeper resolves the user and parks a thread of
        that uid which a stop wakes to kill the user's processes (``helper/kill.c``), so that
        the stop makes no process, allocates nothing and reads no file of the agent's."""
        ok, detail = self._ask([contract.REQUEST_PARK, user or "0"], close_channel=False)
        if not ok:
            raise SandboxError(f"the keeper cannot prepare the stop of user {user!r}: {detail}")
        self._parked.add(user)

    def logs_tail(self) -> str:
        """The environment's last output lines, for an error (backends that have them)."""
        return ""

    def _keeper(self, fields: list[str]) -> str | None:
        """One request to the keeper: None when it answered ok, else its error's code and
        problem."""
        ok, detail = self._ask(fields)
        return None if ok else detail

    def _ask(self, fields: list[str], *, close_channel: bool = True) -> tuple[bool, str]:
        """One request to the keeper: whether it answered ok, and the rest of its answer. The
        exec channel is closed first unless ``close_channel`` is False."""
        if any("\t" in field or "\n" in field for field in fields):
            raise SandboxError(f"a tab or a newline in a keeper request: {fields!r}")
        ident = uuid.uuid4().hex[:12]
        with self._stopping:
            if close_channel:
                self.channel.close()
            answer = self.ask_keeper("\t".join([ident, *fields]), timeout_s=_KEEPER_TIMEOUT_S)
        head, _, rest = answer.partition(" ")
        status, _, detail = rest.partition(" ")
        if head != ident or status not in (contract.ANSWER_OK, contract.ANSWER_ERR):
            raise SandboxError(f"the keeper gave an answer out of turn: {answer[:200]!r}")
        return status == contract.ANSWER_OK, detail


def _go_after(work: Callable[[], object]) -> bytes:
    """The line a command waiting on :meth:`Sandbox.exec`'s ``after`` reads, once it is done."""
    work()
    return b"\n"
