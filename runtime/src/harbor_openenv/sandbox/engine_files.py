"""The orchestrator's files through the engine, never through the agent's processes:
:class:`EngineFiles`, which :class:`.base.Sandbox` inherits, on its ``upload``, ``download`` and
``exec_root``; the read sizes are checked before a byte is read."""

from __future__ import annotations

import functools
import posixpath
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from harbor_openenv.sandbox import archives

from .errors import SandboxError, TooLargeError
from .result import ExecResult

TAIL_SCAN_BYTES = 64 << 20  # largest file whose tail a read streams through to keep its end
FOLDER_SKIP_BYTES = 1 << 20  # what a folder read streams through besides the files it keeps


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


class EngineFiles(ABC):
    """Copy folders in, unpack archives, read files (their size checked first), export paths and
    copy trees between sandboxes, each through the engine's archive API."""

    @abstractmethod
    def upload(self, destination: str, archive: bytes | IO[bytes]) -> None:
        """Unpack a tar archive into the existing folder ``destination`` as the engine does:
        owners and modes as the archive says, whatever runs inside the sandbox."""

    @abstractmethod
    def download(self, path: str) -> AbstractContextManager[Archive | None]:
        """``path`` as the engine reads it (never through a program inside the sandbox), None
        when absent; the archive is valid inside the ``with`` block."""

    @abstractmethod
    def exec_root(
        self, script: str, *args: str, workdir: str = "/", timeout_s: float = 60
    ) -> ExecResult:
        """Run a POSIX sh script as root for the orchestrator (not the agent)."""

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

    def copy_tree(self, path: str, target: EngineFiles, *, budget: int) -> bool:
        """Stream the engine's tar of the folder ``path`` as it is (owners, modes, links) straight
        into ``target``'s engine, unpacked at the same path (no copy on the server's disk); False
        when absent. :class:`TooLargeError` past ``budget`` bytes of archive (what arrived by
        then stays: the caller discards ``target``)."""
        with self.download(path) as found:
            if found is None:
                return False
            stream = archives.Bounded(found.stream, path=path, budget=budget)
            try:
                target.upload(posixpath.dirname(path) or "/", cast(IO[bytes], stream))
            except Exception:
                stream.check()  # a cut stream's own reason first (an upload fails on it)
                raise
            stream.check()
        return True


def _too_large(path: str, size: int, limit: int) -> TooLargeError:
    return TooLargeError(f"{path} is {size} bytes, over the limit of {limit}")
