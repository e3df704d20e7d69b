"""Artifacts a separate verifier receives: ``/logs/artifacts`` and the task's ``artifacts`` entries,
copied from the agent's container to the same paths in the verifier's, as Harbor does.

Only regular files and folders travel (links and special files are dropped) and they arrive owned
by root; an entry's ``exclude`` patterns drop members whose path or any part of it matches. They
travel through temporary files on the server's disk, never its memory, and their files' apparent
sizes together (a sparse file counts whole) must stay within a limit.
"""

from __future__ import annotations

import fnmatch
import itertools
import posixpath
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO

from harbor_openenv.sandbox import LOGS_ARTIFACTS, Sandbox, TooLargeError
from harbor_openenv.tasks.config import ArtifactConfig


@dataclass(frozen=True)
class Artifact:
    path: str  # absolute path in both containers
    archive: IO[bytes]  # a tar holding basename(path), on disk


def collect(sandbox: Sandbox, entries: list[ArtifactConfig], *, limit: int) -> list[Artifact]:
    """The entries that exist in ``sandbox`` (relative sources are inside its workdir); together
    at most ``limit`` bytes, else :class:`TooLargeError` naming the entry."""
    found: list[Artifact] = []
    for entry in entries:
        path = posixpath.normpath(posixpath.join(sandbox.workdir, entry.source))
        raw = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the caller
        try:
            present = sandbox.export_path(path, raw, budget=limit)
        except TooLargeError:
            raw.close()
            close(found)
            raise TooLargeError(
                f"the artifacts reached {path}, which takes them over the limit of {limit} bytes"
                " (HARBOR_OPENENV_MAX_ARTIFACT_BYTES); apparent sizes count, sparse files too"
            ) from None
        if not present:
            raw.close()
            continue
        limit -= raw.tell()
        raw.seek(0)
        found.append(Artifact(path, _sanitise(raw, entry.exclude)))
    return found


def restore(sandbox: Sandbox, artifacts: list[Artifact], *, made: bool = False) -> None:
    """Recreate each artifact at its path in ``sandbox``. ``made``: its parent folders exist
    (``ready_pristine`` made them), so an empty ``/logs/artifacts``, which every environment's
    set-up makes, is left as it is."""
    for artifact in artifacts:
        parent = posixpath.dirname(artifact.path) or "/"
        if made and artifact.path == LOGS_ARTIFACTS and _empty_folder(artifact.archive):
            continue
        artifact.archive.seek(0)
        if made:
            sandbox.upload(parent, artifact.archive)
        else:
            sandbox.import_archive(parent, artifact.archive)


def _empty_folder(archive: IO[bytes]) -> bool:
    """Whether a tar holds one folder and nothing in it."""
    archive.seek(0)
    with tarfile.open(fileobj=archive, mode="r|") as members:
        found = list(itertools.islice(members, 2))
    return len(found) == 1 and found[0].isdir()


def close(artifacts: list[Artifact]) -> None:
    """Delete the artifacts' temporary files."""
    for artifact in artifacts:
        artifact.archive.close()


def _sanitise(source: IO[bytes], exclude: list[str]) -> IO[bytes]:
    """``source`` without the excluded members (``source`` is closed; the copy is on disk)."""
    if not exclude:
        return source
    out = tempfile.TemporaryFile()  # noqa: SIM115 - returned
    with (
        source,
        tarfile.open(fileobj=source, mode="r|") as members,
        tarfile.open(fileobj=out, mode="w|") as target,
    ):
        for member in members:
            if not _excluded(member.name, exclude):
                target.addfile(member, members.extractfile(member) if member.isfile() else None)
    return out


def _excluded(name: str, patterns: list[str]) -> bool:
    parts = PurePosixPath(name).parts[1:]  # below the artifact's own top entry
    relative = "/".join(parts)
    return any(
        fnmatch.fnmatch(relative, pattern) or any(fnmatch.fnmatch(p, pattern) for p in parts)
        for pattern in patterns
    )
