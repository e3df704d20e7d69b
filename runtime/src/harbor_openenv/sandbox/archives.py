"""The tar archives that carry files into and out of a sandbox, built and read on the server."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

from .errors import SandboxError, TooLargeError


def root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def pack(source: Path, *, executable: str | None = None) -> bytes:
    """The host folder ``source`` as a tar of ``.``, owned by root; ``executable``: a file at its
    top that gets its execute bits."""

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if executable is not None and info.name == f"./{executable}" and info.isfile():
            info.mode |= 0o111
        return root_owned(info)

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(source, arcname=".", filter=owned)
    return buffer.getvalue()


def last_bytes(stream: IO[bytes], path: str, limit: int) -> bytes:
    """The last ``limit`` bytes of the regular file a tar stream of ``path`` holds."""
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        member = archive.next()
        if member is None or not member.isfile():
            raise SandboxError(f"{path} is not a regular file")
        return _tail(archive, member, limit)


def folder_files(
    stream: IO[bytes], top: str, wanted: Mapping[str, tuple[int, int]], *, skip: int
) -> tuple[dict[str, bytes | int | None], bool]:
    """The regular files ``wanted`` names (name: (kept, largest)) directly inside the folder a
    tar stream of it holds (``top``: its basename, the stream's first member): each one's last
    ``kept`` bytes, or its size when over ``largest`` (its bytes never kept), or None for a name
    that is something else (a link, a hard link, a folder: to be read alone).

    The flag says the stream was read whole, so a wanted name not found is absent. It is False,
    and the stream left where it is, when the first member is not the folder or the members not
    kept (other files, nested ones, oversized wanted ones) pass ``skip`` bytes.
    """
    found: dict[str, bytes | int | None] = {}
    prefix = top + "/"
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        first = archive.next()
        if first is None or not first.isdir() or first.name != top:
            return found, False
        for member in archive:
            name = member.name[len(prefix) :] if member.name.startswith(prefix) else ""
            want = wanted.get(name)
            if want is not None and not member.isfile():
                found[name] = None
            elif want is not None and member.size <= want[1]:
                found[name] = _tail(archive, member, want[0])
                continue
            elif want is not None:
                found[name] = member.size
            skip -= member.size
            if skip < 0:
                return found, False  # the next member would read through these bytes
    return found, True


def _tail(archive: tarfile.TarFile, member: tarfile.TarInfo, limit: int) -> bytes:
    """The last ``limit`` bytes of a regular file member, read in blocks."""
    handle = archive.extractfile(member)
    assert handle is not None
    kept = b""
    while block := handle.read(1 << 16):
        kept = (kept + block)[-limit:]
    return kept


def copy_regular(stream: IO[bytes], target: IO[bytes], *, path: str, budget: int) -> None:
    """Copy a tar stream of ``path`` into ``target``: regular files and folders only, owned by
    root, permission bits only; :class:`TooLargeError` once its files pass ``budget`` bytes."""
    with (
        tarfile.open(fileobj=stream, mode="r|") as source,
        tarfile.open(fileobj=target, mode="w|") as copy,
    ):
        for member in source:
            if not (member.isfile() or member.isdir()):
                continue
            budget -= member.size
            if budget < 0:
                raise TooLargeError(f"{path} holds more than the limit's bytes")
            root_owned(member)
            member.mode &= 0o777
            copy.addfile(member, source.extractfile(member) if member.isfile() else None)


class Bounded(io.RawIOBase):
    """A tar stream of ``path`` read through, for another sandbox's upload to consume, that ends
    early once it passes ``budget`` bytes or its source fails; :meth:`check` then raises why
    (:class:`TooLargeError`, or the source's error), after the upload that read it."""

    def __init__(self, stream: IO[bytes], *, path: str, budget: int) -> None:
        self._stream, self._path, self._budget, self._read = stream, path, budget, 0
        self._error: Exception | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, target: WriteableBuffer) -> int:
        if self._error is not None:
            return 0
        view = memoryview(target).cast("B")
        try:
            chunk = self._stream.read(len(view))
        except Exception as exc:  # raised by check(), once the upload is done
            self._error = exc
            return 0
        self._read += len(chunk)
        if self._read > self._budget:
            self._error = TooLargeError(
                f"{self._path} is over {self._budget} bytes (HARBOR_OPENENV_MAX_ARTIFACT_BYTES)"
            )
            return 0
        view[: len(chunk)] = chunk
        return len(chunk)

    def check(self) -> None:
        """Raise what ended the stream early, if anything did."""
        if self._error is not None:
            raise self._error
