"""The agent's file actions, confined to the working directory and run as the agent's user:
:class:`AgentFiles`, which :class:`.base.Sandbox` inherits, and the path rules they share."""

from __future__ import annotations

import base64
import functools
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from importlib import resources

from .errors import PathEscapeError, SandboxError
from .result import ExecResult


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


class AgentFiles(ABC):
    """confine, read, write and list, on :meth:`_run_for` (the sandbox's run, through the exec
    channel when ``channel``)."""

    workdir: str  # the agent's working directory, as given
    _real_workdir: str  # the same, resolved by prepare

    @abstractmethod
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
        stdin: bytes | None = None,
    ) -> ExecResult: ...

    def confine(self, path: str, *, user: str | None = None, channel: bool = False) -> str:
        """Resolve an agent path inside the sandbox as ``user`` (None: the sandbox's own),
        symlinks included, refusing escapes. ``channel`` here and in the file actions below: the
        agent's own action, which may use the exec channel."""
        lexical = resolve_within(self.workdir, path)
        result = self._run_for(
            channel,
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
        self, path: str, *, max_bytes: int, user: str | None = None, channel: bool = False
    ) -> tuple[bytes, bool]:
        """The bytes of the regular file at ``path`` (at most ``max_bytes``), and whether cut."""
        limit = max_bytes + 1
        result = self._file_action(
            "read", path, str(limit), user=user, max_output=limit * 3 // 2 + 1024, channel=channel
        )
        if result.truncated:
            raise SandboxError(f"{path}: reading it failed (its encoded copy was cut)")
        data = base64.b64decode(result.output)
        return data[:max_bytes], len(data) > max_bytes

    def write_file(
        self, path: str, data: bytes, *, user: str | None = None, channel: bool = False
    ) -> None:
        """Write ``data`` to ``path`` as ``user``, creating parent folders inside the working
        directory; an existing file keeps its mode, owner and group."""
        self._file_action("write", path, user=user, stdin=data, channel=channel)

    def list_dir(self, path: str, *, user: str | None = None, channel: bool = False) -> str:
        """``ls -la`` of the folder at ``path`` (of the entry itself when not a folder)."""
        return self._file_action("list", path, user=user, channel=channel).output

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
        """Run ``scripts/file-action.sh`` as ``user`` on a path :meth:`confine` returned; errors
        name ``path``."""
        root = self._real_workdir
        folder, name = (path, ".") if path == root else posixpath.split(path)
        result = self._run_for(
            channel,
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
