"""The tar archives that carry files into and out of a sandbox, built and read on the server."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import IO

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
