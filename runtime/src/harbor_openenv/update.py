"""``copier update`` for an environment repo, with the conflict check copier leaves to its users.

copier exits 0 even when its three-way merge left conflict markers or ``.rej`` files behind; an
update is only done when none remain.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# The markers copier's inline conflict mode writes (git merge-file with these labels).
CONFLICT_MARKERS = ("<<<<<<< before updating", ">>>>>>> after updating")


class UpdateError(Exception):
    """copier could not run, or its update failed; the message says why."""


def run_copier_update(repo: Path, vcs_ref: str | None = None, data: list[str] = ()) -> None:
    """Run ``copier update`` in ``repo`` keeping earlier answers (``data``: KEY=VALUE changes)."""
    try:
        import copier  # noqa: F401 - only to say clearly that it is missing
    except ImportError:
        raise UpdateError("copier is not installed here: pip install copier") from None
    command = [sys.executable, "-m", "copier", "update", "--trust", "--defaults"]
    command += ["--conflict", "inline"]
    if vcs_ref:
        command += ["--vcs-ref", vcs_ref]
    for item in data:
        command += ["--data", item]
    result = subprocess.run(command, cwd=repo, check=False)
    if result.returncode != 0:
        raise UpdateError(f"copier update failed with exit status {result.returncode}")


def find_conflicts(repo: Path) -> list[str]:
    """Files an update left unmerged: git's unmerged paths, conflict markers, ``*.rej`` files."""
    unmerged = subprocess.run(
        ["git", "diff", "--name-only", "--diff-filter=U"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    found = {f"{path}: unmerged" for path in unmerged}
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for raw in listed:
        if not raw or raw.startswith((b"tasks/", b"wheels/")):  # never part of an update's merge
            continue
        name = raw.decode(errors="surrogateescape")
        path = repo / name
        if name.endswith(".rej"):
            found.add(f"{name}: rejected hunks")
        elif path.is_file() and not path.is_symlink():
            text = path.read_bytes()
            if any(marker.encode() in text for marker in CONFLICT_MARKERS):
                found.add(f"{name}: conflict markers")
    return sorted(found)
