"""The agent's file actions, confined to the working directory and run as the agent's user:
:class:`AgentFiles`, which :class:`.base.Sandbox` inherits, and the path rules they share."""

from __future__ import annotations

import functools
import posixpath
from abc import ABC, abstractmethod
from importlib import resources

from harbor_openenv import helper
from harbor_openenv.helper import contract

from .command import Command
from .errors import PathEscapeError, SandboxError
from .result import ExecResult


def resolve_within(workdir: str, path: str) -> str:
    """``path`` (relative to ``workdir`` or absolute) normalised, if it stays inside ``workdir``.

    Lexical only; the helper's file actions also resolve symlinks inside the sandbox.
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


class AgentFiles(ABC):
    """read, write and list, each one run of the runtime's helper (``helper file``, see
    ``helper/file.c``) as the agent's user on :meth:`_run_for` (the sandbox's run, through the
    exec channel when ``channel``, the agent's own action): the helper resolves the path inside
    the sandbox, symlinks included, refuses a result outside the real working directory, and
    acts on what it opened, in one round trip."""

    workdir: str  # the agent's working directory, as given
    _real_workdir: str  # the same, resolved by prepare

    @abstractmethod
    def _run_for(self, channel: bool, command: Command) -> ExecResult: ...

    def read_file(
        self, path: str, *, max_bytes: int, user: str | None = None, channel: bool = False
    ) -> tuple[bytes, bool]:
        """The bytes of the regular file at ``path`` (at most ``max_bytes``), and whether cut."""
        limit = max_bytes + 1
        result = self._file_action(
            contract.FILE_READ,
            path,
            str(limit),
            user=user,
            max_output=limit + contract.FILE_MESSAGE_ROOM,
            channel=channel,
        )
        if result.truncated:
            raise SandboxError(f"{path}: reading it failed (its answer was cut)")
        return result.data[:max_bytes], len(result.data) > max_bytes

    def write_file(
        self, path: str, data: bytes, *, user: str | None = None, channel: bool = False
    ) -> str:
        """Write ``data`` to ``path`` as ``user``, creating parent folders inside the working
        directory; an existing file keeps its mode, owner and group. Returns the real path
        written."""
        written = self._file_action(
            contract.FILE_WRITE, path, user=user, stdin=data, channel=channel
        )
        return written.output.strip()

    def list_dir(self, path: str, *, user: str | None = None, channel: bool = False) -> str:
        """``ls -la`` of the folder at ``path`` (``ls -lad`` of the entry when not a folder)."""
        return self._file_action(contract.FILE_LIST, path, user=user, channel=channel).output

    def _file_action(
        self,
        op: str,
        path: str,
        *args: str,
        user: str | None,
        max_output: int = 1 << 20,
        stdin: bytes | None = None,
        channel: bool = False,
    ) -> ExecResult:
        """``helper file op`` as ``user`` (None: the sandbox's own) on ``path`` (relative to the
        working directory or absolute); errors name ``path``."""
        lexical = resolve_within(self.workdir, path)
        result = self._run_for(
            channel,
            Command(
                [helper.HELPER, contract.COMMAND_FILE, op, self._real_workdir, lexical, *args],
                timeout_s=60,
                max_output=max_output,
                user=user or "",
                workdir="/",
                stdin=stdin,
            ),
        )
        if result.exit_code == 0:
            return result
        message = result.output.strip()
        if result.exit_code == contract.FILE_OUTSIDE:
            raise PathEscapeError(f"{path!r} resolves to {message}, outside the working directory")
        missing = (
            "cannot create its folder" if op == contract.FILE_WRITE else "no such file or folder"
        )
        problem = {
            None: f"{op} timed out",
            contract.FILE_MISSING: missing,
            contract.FILE_IS_FOLDER: "is a directory",
            contract.FILE_NOT_REGULAR: "not a regular file",
        }.get(result.exit_code)
        raise SandboxError(f"{path}: {problem or message or op + ' failed'}")
