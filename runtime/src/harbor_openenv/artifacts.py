"""Artifacts a separate verifier receives: ``/logs/artifacts`` and the task's ``artifacts`` entries,
copied from the agent's container to the same paths in the verifier's, as Harbor does.

Only regular files and folders travel (links and special files are dropped) and they arrive owned
by root; an entry's ``exclude`` patterns drop members whose path or any part of it matches.
"""

from __future__ import annotations

import fnmatch
import io
import posixpath
import tarfile
from dataclasses import dataclass
from pathlib import PurePosixPath

from .dataset import ArtifactConfig
from .sandbox import Sandbox


@dataclass(frozen=True)
class Artifact:
    path: str  # absolute path in both containers
    archive: bytes  # a tar holding basename(path)


def collect(sandbox: Sandbox, entries: list[ArtifactConfig]) -> list[Artifact]:
    """The entries that exist in ``sandbox`` (relative sources are inside its workdir)."""
    found = []
    for entry in entries:
        path = posixpath.normpath(posixpath.join(sandbox.workdir, entry.source))
        data = sandbox.export_path(path)
        if data is not None:
            found.append(Artifact(path, _sanitise(data, entry.exclude)))
    return found


def restore(sandbox: Sandbox, artifacts: list[Artifact]) -> None:
    """Recreate each artifact at its path in ``sandbox``."""
    for artifact in artifacts:
        sandbox.import_archive(posixpath.dirname(artifact.path) or "/", artifact.archive)


def _sanitise(data: bytes, exclude: list[str]) -> bytes:
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data), mode="r:") as source,
        tarfile.open(fileobj=out, mode="w") as target,
    ):
        for member in source:
            if not (member.isfile() or member.isdir()) or _excluded(member.name, exclude):
                continue
            member.uid = member.gid = 0
            member.uname = member.gname = "root"
            member.mode &= 0o777
            target.addfile(member, source.extractfile(member) if member.isfile() else None)
    return out.getvalue()


def _excluded(name: str, patterns: list[str]) -> bool:
    parts = PurePosixPath(name).parts[1:]  # below the artifact's own top entry
    relative = "/".join(parts)
    return any(
        fnmatch.fnmatch(relative, pattern) or any(fnmatch.fnmatch(p, pattern) for p in parts)
        for pattern in patterns
    )
