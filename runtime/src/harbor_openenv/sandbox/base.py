"""The sandbox interface: the primitives a backend implements, and the behaviour built on them.

A backend (:mod:`.docker`, :mod:`.compose`, :mod:`.memory`) implements ``name``, :meth:`run`,
:meth:`upload`, :meth:`download`, :meth:`is_running`, :meth:`remove` and :meth:`disk_usage`, and
calls :meth:`Sandbox.prepare` once its environment runs. Everything an episode does besides (its
commands, the agent's confined file actions (inherited from :mod:`.files`), the engine reads, the
helper's stop and the process baseline) is written once here, on those primitives alone.

A backend may also offer an exec channel (:mod:`.channel`) by overriding :meth:`open_channel`:
Docker and compose do, the memory backend does not. The agent's own actions (``channel=True``)
go through it while it works; everything else, and every action once it failed, uses :meth:`run`.
"""

from __future__ import annotations

import functools
import logging
import posixpath
import threading
import time
import uuid
from abc import abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from .. import helper
from . import archives
from .channel import Channel, ChannelSlot
from .errors import SandboxError, TooLargeError
from .files import AgentFiles, load_script
from .result import ExecResult

# What keeps an episode's container running (its command; the image's ENTRYPOINT, if any, still
# runs first): the runtime's helper as PID 1, which reaps every orphan the agent leaves (zombies
# never fill the pids limit) and has no child whose death would end the container. Harbor's compose
# file has ``sh -c "sleep infinity"``, whose sleep the stop before grading killed, and the
# container with it, whenever the baseline was listed before sh had forked it.
KEEPER = (helper.HELPER, "keep")
EXEC_MARK = "HARBOR_OPENENV_EXEC"  # in each exec's environment, to find what a timed-out one left
TAIL_SCAN_BYTES = 64 << 20  # largest file whose tail a read streams through to keep its end
FOLDER_SKIP_BYTES = 1 << 20  # what a folder read streams through besides the files it keeps
# Prepare arguments for the helper: the verifier's user, its output folder, the tests folder and
# "stage" (empty it for tests to be uploaded) or "keep" (the image brings them).
VerifierDirs = tuple[str, str, str, str]
# A command's standard input: bytes, or a function called once the command started (the engine
# starts it meanwhile) whose bytes are sent then; end-of-file follows either.
Stdin = bytes | Callable[[], bytes] | None
log = logging.getLogger("harbor_openenv")
_HELPER_TRIES = 20
_KILLED = 128 + 9  # a helper ended by SIGKILL, as the engine counts it
_KILLED_TRIES = 2


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


@dataclass(frozen=True)
class Archive:
    """A path read through the engine: its apparent size, known before a byte is read, and a tar
    stream (read once) holding it under its basename."""

    size: int
    stream: IO[bytes]


@dataclass(frozen=True)
class EngineRead:
    """A file read through the engine: its bytes (None: absent), or why it could not be read."""

    data: bytes | None
    error: SandboxError | None = None

    @classmethod
    def attempt(cls, read: Callable[[], bytes | None]) -> EngineRead:
        """What ``read`` gives, or the :class:`SandboxError` it raises."""
        try:
            return cls(read())
        except SandboxError as exc:
            return cls(None, exc)

    def get(self) -> bytes | None:
        """The bytes (None: absent); raises the error if there was one."""
        if self.error is not None:
            raise self.error
        return self.data


class Sandbox(AgentFiles):
    """One episode's task environment: the abstract primitives, then the shared behaviour.

    Longer than the project's ~250 lines per class on purpose: it is every backend's shared
    behaviour in one place, so that a backend is only its primitives.
    """

    def __init__(self) -> None:
        self.workdir = "/"  # the agent's working directory
        self.default_user = ""  # the environment's own user (its image's USER), "" for root
        self.exceeded: str | None = None  # why the disk guard ended the episode, if it did
        self._real_workdir = "/"  # resolved once by prepare, before the agent can move things
        self._baseline = ""  # processes that ran before the agent did (see mark_baseline)
        self._stopping = threading.Lock()  # one stop or list at a time: a stop kills the other
        self.channel = ChannelSlot(self.open_channel)

    # -- the primitives every backend implements -----------------------------------------------

    @property
    @abstractmethod
    def name(self) -> str:
        """A short label for logs, such as a container's short id."""

    @abstractmethod
    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        max_output: int,
        user: str,
        env: Mapping[str, str],
        workdir: str,
        stdin: Stdin = None,
    ) -> ExecResult:
        """Run ``argv`` directly (no shell added) as ``user`` ("" the environment's own) in
        ``workdir`` ("" the image's), with ``env`` added to the environment's variables and
        ``stdin`` (:data:`Stdin`) then end-of-file as standard input. Keep at most
        ``max_output`` bytes of output; past ``timeout_s`` (counted once the input is sent) stop
        waiting and answer ``timed_out`` (what it started is killed by :meth:`exec`). Raises
        :class:`SandboxError` when it cannot start, and what a ``stdin`` function raises."""

    @abstractmethod
    def upload(self, destination: str, archive: bytes | IO[bytes]) -> None:
        """Unpack a tar archive into the existing folder ``destination`` as the engine does:
        owners and modes as the archive says, whatever runs inside the sandbox."""

    @abstractmethod
    def download(self, path: str) -> AbstractContextManager[Archive | None]:
        """``path`` as the engine reads it (never through a program inside the sandbox), None
        when absent; the archive is valid inside the ``with`` block."""

    @abstractmethod
    def is_running(self) -> bool:
        """Whether the environment still runs (an idle pooled one may have stopped)."""

    @abstractmethod
    def remove(self) -> None:
        """Remove the environment and all it holds (idempotent)."""

    @abstractmethod
    def disk_usage(self) -> int:
        """Bytes the agent's writes take (apparent sizes), for the disk guard."""

    def open_channel(self, user: str) -> Channel | None:
        """A new exec channel running as ``user`` (:mod:`.channel`); None: this backend has none.
        Raises :class:`SandboxError` when it cannot start."""
        return None

    # -- commands ------------------------------------------------------------------------------

    def _run_for(
        self,
        channel: bool,
        argv: Sequence[str],
        *,
        timeout_s: float,
        max_output: int,
        user: str,
        env: Mapping[str, str],
        workdir: str,
        stdin: Stdin = None,
    ) -> ExecResult:
        """:meth:`run`, through the exec channel first when ``channel`` (an agent's action) and
        ``stdin`` is bytes."""
        if channel and not callable(stdin):
            answer = self.channel.run(
                argv,
                timeout_s=timeout_s,
                max_output=max_output,
                user=user,
                env=env,
                workdir=workdir,
                stdin=stdin,
            )
            if answer is not None:
                return answer
        return self.run(
            argv,
            timeout_s=timeout_s,
            max_output=max_output,
            user=user,
            env=env,
            workdir=workdir,
            stdin=stdin,
        )

    def prepare(self, workdir: str | None) -> None:
        """Make ``/logs``'s folders, resolve the working directory (None: the image's) and record
        the process baseline; a backend calls it once its environment runs."""
        setup = self.exec_root(load_script("setup"), helper.HELPER, workdir=workdir or "")
        if setup.exit_code != 0:
            raise SandboxError(f"preparing the container failed: {setup.output.strip()}")
        lines = [*setup.output.splitlines(), "", ""]
        self.workdir = posixpath.normpath(workdir or lines[0])
        self._real_workdir = lines[1]
        self._baseline = lines[2].strip()

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
            ["bash", "-c", command, *(("bash", *args) if args else ())],
            timeout_s=timeout_s,
            max_output=max_output,
            user=user or "",
            env={**(env or {}), EXEC_MARK: mark},
            workdir=workdir or self.workdir,
            stdin=None if after is None else functools.partial(_go_after, after),
        )
        if result.timed_out:
            self._kill_marked(f"{EXEC_MARK}={mark}", user or "")
        return result

    def _kill_marked(self, mark: str, user: str) -> None:
        """Kill what a timed-out command left, by its mark: as root, then as the command's user
        (root without CAP_SYS_PTRACE cannot read another user's ``/proc/PID/environ``)."""
        for who in ("root", user) if user not in ("root", "0") else ("root",):
            self.run(
                ["sh", "-c", load_script("kill-marked"), "sh", mark],
                timeout_s=60,
                max_output=1 << 16,
                user=who,
                env={},
                workdir="/",
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
        """Run a POSIX sh script as root for the orchestrator (not the agent)."""
        return self.run(
            ["sh", "-c", script, "sh", *args],
            timeout_s=timeout_s,
            max_output=1 << 20,
            user="root",
            env={},
            workdir=workdir,
        )

    def stop_processes(self, prepare: VerifierDirs | None = None) -> None:
        """Kill every process but the baseline's, whatever its name, user or state, with the
        runtime's static helper (never the container's programs); then, with ``prepare``, empty
        the verifier's output folder for its user alone and the tests folder, in the same exec.
        The exec channel is closed first: the helper kills it with the rest.

        The helper needs one free process slot: a container held at its pids limit is retried
        briefly, then reported as the agent's resource use. One stop runs at a time (the disk
        guard's and an evaluate's would each kill the other's helper). A helper killed from
        outside (SIGKILL: a root agent racing its first instruction, or the engine) while the
        container still runs is run again, at most twice: the stop is the same from the start.
        """
        with self._stopping:
            self.channel.close()
            command = [helper.HELPER, "stop", self._baseline]
            if prepare is not None:
                command += ["prepare", *prepare]
            result = self._helper_with_a_slot(command)
            for _ in range(_KILLED_TRIES):
                if result.exit_code != _KILLED or not self.is_running():
                    break
                log.warning(
                    "the runtime helper's stop in %s was killed (exit code %d) while the"
                    " container runs: running it again",
                    self.name,
                    _KILLED,
                )
                result = self._helper_with_a_slot(command)
        if result.exit_code == 0:
            return
        if not self.is_running():
            raise SandboxError(
                "the environment stopped running while the agent's processes were being stopped"
                f" (the runtime helper's exit code: {result.exit_code})"
            )
        problem = {97: "could not stop the agent's processes", 98: "cannot prepare the verifier"}
        if result.exit_code is None:
            why = "timed out" if result.timed_out else "the engine recorded no exit code"
            raise SandboxError(f"the runtime helper did not finish ({why})")
        raise SandboxError(
            f"{problem.get(result.exit_code, 'the runtime helper failed')}"
            f" (exit code {result.exit_code}): {result.output.strip()[-1000:]}"
        )

    def _helper_with_a_slot(self, argv: list[str]) -> ExecResult:
        """:meth:`_run_helper`, retried briefly while the container has no free process slot."""
        for attempt in range(_HELPER_TRIES):
            result = self._run_helper(argv)
            if not _no_process_slot(result):
                return result
            time.sleep(0.05 * (attempt + 1))
        raise SandboxError(
            "could not stop the agent's processes: the container stayed at its process limit"
            " (pids_limit), so no process could start in it; the agent's processes used every"
            " slot"
        )

    def mark_baseline(self) -> None:
        """Count every process running now as the environment's: :meth:`stop_processes` keeps
        them. Called once an episode's environment is ready, before the agent's first action
        (the exec channel, opened by that action, is never in the baseline)."""
        with self._stopping:  # a stop would kill the list
            self.channel.close()
            result = self._run_helper([helper.HELPER, "list"])
        if result.exit_code != 0:
            raise SandboxError(f"cannot list processes: {result.output.strip()}")
        self._baseline = result.output.strip()

    def _run_helper(self, argv: list[str]) -> ExecResult:
        """Run the runtime's helper as root, directly (no shell of the container's)."""
        return self.run(argv, timeout_s=60, max_output=1 << 20, user="root", env={}, workdir="/")

    # -- the orchestrator's files, through the engine ------------------------------------------

    def put_dir(
        self,
        source: Path,
        destination: str,
        *,
        replace: bool = True,
        prepared: bool = False,
        executable: str | None = None,
    ) -> None:
        """Copy the host folder ``source`` into ``destination`` (emptied first when ``replace``),
        owned by root. ``prepared``: the caller made ``destination`` already (one round trip
        fewer). ``executable``: a file at the folder's top that gets its execute bits."""
        if not prepared:
            script = 'rm -rf -- "$1" && mkdir -p -- "$1"' if replace else 'mkdir -p -- "$1"'
            cleared = self.exec_root(script, destination)
            if cleared.exit_code != 0:
                raise SandboxError(f"cannot prepare {destination}: {cleared.output.strip()}")
        self.upload(destination, archives.pack(source, executable=executable))

    def import_archive(self, parent: str, archive: IO[bytes]) -> None:
        """Unpack a tar archive (a file object, streamed) into the folder ``parent``, creating
        it."""
        made = self.exec_root('mkdir -p -- "$1"', parent)
        if made.exit_code != 0:
            raise SandboxError(f"cannot create {parent}: {made.output.strip()}")
        self.upload(parent, archive)

    def read_engine_file(self, path: str, *, limit: int, tail: bool = False) -> bytes | None:
        """The regular file at ``path`` as the engine reads it, None when absent.

        Its size (the apparent one: a sparse file counts whole) is checked before a byte is read:
        over ``limit`` raises :class:`TooLargeError`, or with ``tail`` gives its last ``limit``
        bytes when it is at most :data:`TAIL_SCAN_BYTES`, else raises too.
        """
        with self.download(path) as found:
            if found is None:
                return None
            if found.size > (TAIL_SCAN_BYTES if tail else limit):
                raise _too_large(path, found.size, limit)
            return archives.last_bytes(found.stream, path, limit)

    def read_engine_files(
        self, folder: str, limits: Mapping[str, int], *, tails: Collection[str] = ()
    ) -> dict[str, EngineRead]:
        """The files ``limits`` names directly inside ``folder``, each as :meth:`read_engine_file`
        reads it with its limit (by its tail for the names in ``tails``), in one engine read of
        the folder where that can answer.

        That read keeps the named regular files and streams through at most
        :data:`FOLDER_SKIP_BYTES` of anything else (other files, nested ones, oversized named
        ones, whose size alone answers). A name that is not a regular file there (a link, a hard
        link, a folder) is read alone; so are the names left open when the folder is not one or
        the read stopped at that bound.
        """
        wanted = {
            name: (limit, TAIL_SCAN_BYTES if name in tails else limit)
            for name, limit in limits.items()
        }
        kept: dict[str, bytes | int | None] = {}
        try:
            with self.download(folder) as found:
                kept, whole = (
                    archives.folder_files(
                        found.stream, posixpath.basename(folder), wanted, skip=FOLDER_SKIP_BYTES
                    )
                    if found is not None
                    else ({}, True)
                )
        except SandboxError:
            whole = False  # the reads one by one say what is wrong
        reads = {}
        for name, limit in limits.items():
            path, data = f"{folder}/{name}", kept.get(name)
            if isinstance(data, int):
                reads[name] = EngineRead(None, _too_large(path, data, limit))
            elif data is not None or (whole and name not in kept):
                reads[name] = EngineRead(data)
            else:
                reads[name] = EngineRead.attempt(
                    functools.partial(self.read_engine_file, path, limit=limit, tail=name in tails)
                )
        return reads

    def export_path(self, path: str, target: IO[bytes], *, budget: int) -> bool:
        """Stream a tar of ``path`` (file or folder, named by its basename) into ``target``,
        regular files and folders only, owned by root; False when ``path`` is absent. Raises
        :class:`TooLargeError` once its files' apparent sizes pass ``budget`` bytes."""
        with self.download(path) as found:
            if found is None:
                return False
            archives.copy_regular(found.stream, target, path=path, budget=budget)
        return True


def _go_after(work: Callable[[], object]) -> bytes:
    """The line a command waiting on :meth:`Sandbox.exec`'s ``after`` reads, once it is done."""
    work()
    return b"\n"


def _too_large(path: str, size: int, limit: int) -> TooLargeError:
    return TooLargeError(f"{path} is {size} bytes, over the limit of {limit}")


def _no_process_slot(result: ExecResult) -> bool:
    """Whether an exec failed to start because the container has no free process slot."""
    return result.exit_code in (126, 127, None) and (
        "resource temporarily unavailable" in result.output.lower()
        or "cannot allocate memory" in result.output.lower()
    )
