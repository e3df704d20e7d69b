"""The tar archives that go into the helper's volume (the harness cache's builds, codex), kept
once per content in a private folder of this user's, shared by every server of the user.

An archive is named by a digest of what it holds (paths, sizes, modification times), written
under a temporary name and renamed into place: a server that dies (SIGKILL included) leaves no
copy behind but the one the next server reuses, and two servers never make the same one twice at
once into one name. The folder is this uid's, mode 0700, not a symbolic link: a predictable name
in the shared temporary folder would let another local user plant what every container mounts.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from .base import HarnessError


def folder() -> Path:
    """This user's archive folder (made if missing), checked to be its own and private."""
    place = Path(tempfile.gettempdir()) / f"harbor-openenv-archives-{os.getuid()}"
    try:
        place.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(place)
    except OSError as exc:
        raise HarnessError(f"cannot make the archive folder {place}: {exc}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise HarnessError(f"{place} is not a private folder of this user's (mode 0700): remove it")
    return place


def digest(parts: Iterable[str]) -> str:
    """A short digest of ``parts`` (what names an archive's content)."""
    hashed = hashlib.sha256()
    for part in parts:
        hashed.update(part.encode(errors="surrogateescape") + b"\0")
    return hashed.hexdigest()[:20]


def files_of(root: Path) -> list[str]:
    """Each file and folder under ``root`` as ``path size mtime``, sorted: an archive's key."""
    found = []
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        found.append(f"{path.relative_to(root)} {info.st_size} {info.st_mtime_ns}")
    return found


def shared(name: str, key: Iterable[str], write: Callable[[Path], None]) -> Path:
    """The archive ``name``-<digest of ``key``>.tar, written by ``write(path)`` if missing."""
    place = folder()
    target = place / f"{name}-{digest(key)}.tar"
    if target.is_file():
        return target
    partial = place / f".{target.name}.{os.getpid()}.partial"
    try:
        write(partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target
