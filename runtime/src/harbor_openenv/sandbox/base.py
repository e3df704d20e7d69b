"""The sandbox interface: the primitives a backend implements, and the behaviour built on them.

A backend (:mod:`.docker`, :mod:`.compose`, :mod:`.memory`) implements ``name``, :meth:`run`,
:meth:`upload`, :meth:`download`, :meth:`is_running`, :meth:`remove` and :meth:`disk_usage`, and
calls :meth:`Sandbox.prepare` once its environment runs. Everything an episode does besides (its
commands, the agent's confined file actions, the engine reads, the helper's stop and the process
baseline) is written once here, on those primitives alone.
"""

from __future__ import annotations

import base64
import functools
import posixpath
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO, Protocol

from .. import helper
from . import archives
from .errors import PathEscapeError, SandboxError, TooLargeError

# What keeps an episode's container running (PID 1), as Harbor's compose file has it but with
# ``exec``: sh becomes sleep, so no process is forked after the container starts. With a plain
# ``sh -c "sleep infinity"`` the sleep was sh's child, started a moment later: under load the
# baseline (``prepare``) could be read before it existed, and the stop before grading then killed
# it, sh exited and the whole container with it (evaluate: helper exit 137, "not running").
KEEPER = ("sh", "-c", "exec sleep infinity")
EXEC_MARK = "HARBOR_OPENENV_EXEC"  # in each exec's environment, to find what a timed-out one left
TAIL_SCAN_BYTES = 64 << 20  # largest file whose tail a read streams through to keep its end
# Prepare arguments for the helper: the verifier's user, its output folder, the tests folder and
# "stage" (empty it for tests to be uploaded) or "keep" (the image brings them).
VerifierDirs = tuple[str, str, str, str]
_HELPER_TRIES = 20


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None  # None: it timed out
    output: str  # standard output and error, interleaved
    truncated: bool = False
    timed_out: bool = False


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


def resolve_within(workdir: str, path: str) -> str:
    """``path`` (relative to ``workdir`` or absolute) normalised, if it stays inside ``workdir``.

    Lexical only; :meth:`Sandbox.confine` also resolves symlinks inside the sandbox.
    """
    if not path or "\x00" in path:
        raise PathEscapeError(f"invalid path {path!r}")
    root = posixpath.normpath(workdir)
    joined = posixpath.normpath(posixpath.join(root, path))
    if not inside(root, joined):
        raise PathEscapeError(f"{path!r} is outside the working directory {root}")
    return joined


def inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@functools.cache
def load_script(name: str) -> str:
    """The in-container shell script ``scripts/<name>.sh`` (POSIX sh, run with ``sh -c``)."""
    return (resources.files(__package__) / "scripts" / f"{name}.sh").read_text(encoding="utf-8")


class Sandbox(ABC):
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
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run ``argv`` directly (no shell added) as ``user`` ("" the environment's own) in
        ``workdir`` ("" the image's), with ``env`` added to the environment's variables and
        ``stdin`` then end-of-file as standard input. Keep at most ``max_output`` bytes of
        output; past ``timeout_s`` stop waiting and answer ``timed_out`` (what it started is
        killed by :meth:`exec`). Raises :class:`SandboxError` when it cannot start."""

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

    # -- commands ------------------------------------------------------------------------------

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
    ) -> ExecResult:
        """Run ``bash -c command`` (``args`` as its $1...); on timeout every process it started
        is killed."""
        mark = uuid.uuid4().hex
        result = self.run(
            ["bash", "-c", command, *(("bash", *args) if args else ())],
            timeout_s=timeout_s,
            max_output=max_output,
            user=user or "",
            env={**(env or {}), EXEC_MARK: mark},
            workdir=workdir or self.workdir,
        )
        if result.timed_out:
            self.exec_root(load_script("kill-marked"), f"{EXEC_MARK}={mark}")
        return result

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

        The helper needs one free process slot: a container held at its pids limit is retried
        briefly, then reported as the agent's resource use.
        """
        command = [helper.HELPER, "stop", self._baseline]
        if prepare is not None:
            command += ["prepare", *prepare]
        for attempt in range(_HELPER_TRIES):
            result = self._run_helper(command)
            if result.exit_code == 0:
                return
            if not _no_process_slot(result):
                break
            time.sleep(0.05 * (attempt + 1))
        else:
            raise SandboxError(
                "could not stop the agent's processes: the container stayed at its process limit"
                " (pids_limit), so no process could start in it; the agent's processes used"
                " every slot"
            )
        problem = {97: "could not stop the agent's processes", 98: "cannot prepare the verifier"}
        if result.exit_code is None:
            why = "timed out" if result.timed_out else "the engine recorded no exit code"
            raise SandboxError(f"the runtime helper did not finish ({why})")
        raise SandboxError(
            f"{problem.get(result.exit_code, 'the runtime helper failed')}"
            f" (exit code {result.exit_code}): {result.output.strip()[-1000:]}"
        )

    def mark_baseline(self) -> None:
        """Count every process running now as the environment's: :meth:`stop_processes` keeps
        them. Called once an episode's environment is ready, before the agent's first action."""
        result = self._run_helper([helper.HELPER, "list"])
        if result.exit_code != 0:
            raise SandboxError(f"cannot list processes: {result.output.strip()}")
        self._baseline = result.output.strip()

    def _run_helper(self, argv: list[str]) -> ExecResult:
        """Run the runtime's helper as root, directly (no shell of the container's)."""
        return self.run(argv, timeout_s=60, max_output=1 << 20, user="root", env={}, workdir="/")

    # -- the agent's files ---------------------------------------------------------------------

    def confine(self, path: str, *, user: str | None = None) -> str:
        """Resolve an agent path inside the sandbox as ``user`` (None: the sandbox's own),
        symlinks included, refusing escapes."""
        lexical = resolve_within(self.workdir, path)
        result = self.run(
            ["sh", "-c", load_script("realpath"), "sh", lexical],
            timeout_s=60,
            max_output=1 << 16,
            user=user or "",
            env={},
            workdir="/",
        )
        if result.exit_code != 0:
            raise SandboxError(f"cannot resolve {path!r}: {result.output.strip()}")
        real = posixpath.normpath(result.output.strip())
        if not inside(self._real_workdir, real):
            raise PathEscapeError(f"{path!r} resolves to {real}, outside the working directory")
        return real

    def read_file(
        self, path: str, *, max_bytes: int, user: str | None = None
    ) -> tuple[bytes, bool]:
        """The bytes of the regular file at ``path`` (at most ``max_bytes``), and whether cut."""
        limit = max_bytes + 1
        result = self._file_action(
            "read", path, str(limit), user=user, max_output=limit * 3 // 2 + 1024
        )
        if result.truncated:
            raise SandboxError(f"{path}: reading it failed (its encoded copy was cut)")
        data = base64.b64decode(result.output)
        return data[:max_bytes], len(data) > max_bytes

    def write_file(self, path: str, data: bytes, *, user: str | None = None) -> None:
        """Write ``data`` to ``path`` as ``user``, creating parent folders inside the working
        directory; an existing file keeps its mode, owner and group."""
        self._file_action("write", path, user=user, stdin=data)

    def list_dir(self, path: str, *, user: str | None = None) -> str:
        """``ls -la`` of the folder at ``path`` (of the entry itself when not a folder)."""
        return self._file_action("list", path, user=user).output

    def _file_action(
        self,
        op: str,
        path: str,
        *args: str,
        user: str | None,
        max_output: int = 1 << 20,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run ``scripts/file-action.sh`` as ``user`` on a path :meth:`confine` returned; errors
        name ``path``."""
        root = self._real_workdir
        folder, name = (path, ".") if path == root else posixpath.split(path)
        result = self.run(
            ["sh", "-c", load_script("file-action"), "sh", root, folder, op, name, *args],
            timeout_s=60,
            max_output=max_output,
            user=user or "",
            env={},
            workdir="/",
            stdin=stdin,
        )
        if result.exit_code == 0:
            return result
        if result.exit_code == 3:
            raise PathEscapeError(f"{path} was moved outside the working directory {root}")
        problem = {
            None: f"{op} timed out",
            4: "no such file or folder" if op != "write" else "cannot create its folder",
            5: "is a directory",
            6: "not a regular file",
        }.get(result.exit_code)
        raise SandboxError(f"{path}: {problem or result.output.strip() or op + ' failed'}")

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
                raise TooLargeError(f"{path} is {found.size} bytes, over the limit of {limit}")
            return archives.last_bytes(found.stream, path, limit)

    def export_path(self, path: str, target: IO[bytes], *, budget: int) -> bool:
        """Stream a tar of ``path`` (file or folder, named by its basename) into ``target``,
        regular files and folders only, owned by root; False when ``path`` is absent. Raises
        :class:`TooLargeError` once its files' apparent sizes pass ``budget`` bytes."""
        with self.download(path) as found:
            if found is None:
                return False
            archives.copy_regular(found.stream, target, path=path, budget=budget)
        return True


def _no_process_slot(result: ExecResult) -> bool:
    """Whether an exec failed to start because the container has no free process slot."""
    return result.exit_code in (126, 127, None) and (
        "resource temporarily unavailable" in result.output.lower()
        or "cannot allocate memory" in result.output.lower()
    )
