"""An in-memory sandbox for fast unit tests of the logic above the interface.

For tests only, never the proof: it runs no program and knows no users, symlinks or processes.
What a real backend does is proven by the integration tests against a real engine. As httpx's
``MockTransport`` answers requests with a function, :class:`MemorySandbox` answers every command
with a handler; files live in a dict, and the agent's file actions honour the same confinement
errors as a real sandbox's.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import shlex
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO

from .base import Sandbox
from .command import Command
from .engine_files import Archive
from .errors import SandboxError
from .files import inside, resolve_within
from .result import ExecResult

# (command, user, env, workdir) -> its result. ``command`` is the script of ``sh -c`` or
# ``bash -c`` (exec, exec_root), else the argv joined shell-quoted (the helper's calls).
Handler = Callable[[str, str, Mapping[str, str], str], ExecResult]


class MemorySandbox(Sandbox):
    """Commands answered by ``handler``; ``files`` maps absolute paths to contents."""

    def __init__(
        self,
        handler: Handler,
        *,
        workdir: str = "/app",
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        super().__init__()
        self.workdir = self._real_workdir = workdir
        self.files = dict(files or {})
        self.removed = False
        self._handler = handler

    @property
    def name(self) -> str:
        return "memory"

    def run(self, command: Command) -> ExecResult:
        if callable(command.stdin):
            command.stdin()  # the command starts once its input is there
        argv, max_output = command.argv, command.max_output
        shell = len(argv) > 2 and argv[1] == "-c"
        script = argv[2] if shell else shlex.join(argv)
        result = self._handler(script, command.user, command.env, command.workdir)
        data = result.output.encode()
        if len(data) <= max_output:
            return result
        cut = data[:max_output].decode(errors="replace")
        return ExecResult(result.exit_code, cut, truncated=True, timed_out=result.timed_out)

    def upload(self, destination: str, archive: bytes | IO[bytes]) -> None:
        stream = io.BytesIO(archive) if isinstance(archive, bytes) else archive
        with tarfile.open(fileobj=stream, mode="r|") as members:
            for member in members:
                handle = members.extractfile(member) if member.isfile() else None
                if handle is not None:
                    path = posixpath.normpath(posixpath.join(destination, member.name))
                    self.files[path] = handle.read()

    @contextlib.contextmanager
    def download(self, path: str) -> Iterator[Archive | None]:
        path = posixpath.normpath(path)
        below = {name: data for name, data in self.files.items() if inside(path, name)}
        if not below:
            yield None
            return
        buffer = io.BytesIO()
        top = posixpath.dirname(path)
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            if path not in self.files:  # a folder: its own entry first, as the engine sends it
                folder = tarfile.TarInfo(posixpath.basename(path))
                folder.type = tarfile.DIRTYPE
                archive.addfile(folder)
            for name, data in sorted(below.items()):
                info = tarfile.TarInfo(posixpath.relpath(name, top))
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
        buffer.seek(0)
        yield Archive(len(self.files[path]) if path in self.files else 0, buffer)

    def ask_keeper(self, request: str, *, timeout_s: float) -> str:
        """The handler's answer to ``keeper REQUEST`` (the request without its id, tab-separated
        fields joined by spaces), as the keeper's line: exit code 0 is ``ok`` and the output,
        else ``err CODE output``."""
        ident, _, rest = request.partition("\t")
        result = self._handler(f"keeper {rest.replace(chr(9), ' ')}", "root", {}, "/")
        if result.exit_code == 0:
            return f"{ident} ok {result.output.strip()}".rstrip()
        return f"{ident} err {result.exit_code} {result.output.strip()}"

    def changes(self) -> list[tuple[str, int]]:
        """Every file it holds, as added (it starts empty)."""
        return [(path, 1) for path in sorted(self.files)]

    def changes_since_mark(self, skip: Sequence[str]) -> list[tuple[str, int]]:
        """:meth:`changes`: the fake has no keeper."""
        return self.changes()

    def is_running(self) -> bool:
        return not self.removed

    def remove(self) -> None:
        self.removed = True

    def disk_usage(self) -> int:
        return sum(len(data) for data in self.files.values())

    # -- the agent's files, on the dict --------------------------------------------------------

    def read_file(
        self, path: str, *, max_bytes: int, user: str | None = None, channel: bool = False
    ) -> tuple[bytes, bool]:
        path = resolve_within(self.workdir, path)
        data = self.files.get(path)
        if data is None:
            problem = "is a directory" if self._is_dir(path) else "no such file or folder"
            raise SandboxError(f"{path}: {problem}")
        return data[:max_bytes], len(data) > max_bytes

    def write_file(
        self, path: str, data: bytes, *, user: str | None = None, channel: bool = False
    ) -> str:
        path = resolve_within(self.workdir, path)
        if self._is_dir(path):
            raise SandboxError(f"{path}: is a directory")
        self.files[path] = data
        return path

    def list_dir(self, path: str, *, user: str | None = None, channel: bool = False) -> str:
        """The names below ``path``, one a line (not ``ls -la``'s format)."""
        path = resolve_within(self.workdir, path)
        if path in self.files:
            return posixpath.basename(path) + "\n"
        names = {
            name[len(path.rstrip("/")) + 1 :].split("/")[0]
            for name in self.files
            if inside(path, name) and name != path
        }
        if not names and path != self._real_workdir:
            raise SandboxError(f"{path}: no such file or folder")
        return "".join(f"{name}\n" for name in sorted(names))

    def _is_dir(self, path: str) -> bool:
        return any(inside(path, name) and name != path for name in self.files)
