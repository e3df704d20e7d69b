"""Tamper evidence: what the agent's container changed outside its working directory that the
verifier could execute or import, asked of the engine before the verifier runs (one call, no
program of the container's: :meth:`Sandbox.changes`). Reported, never acted on: the reward is
the verifier's; a trainer that cannot trust it drops the rollout (``info["tamper"]["suspect"]``).

Classes: ``executables`` (a program on the default PATH replaced or added), ``libraries``
(``/etc/ld.so.*``, shared objects, anything else below ``/usr/lib``, ``/usr/local/lib``, ``/lib``:
a standard library's modules), ``interpreter_hooks`` (``.pth``, ``sitecustomize``,
``usercustomize``), ``pytest`` (``conftest.py`` outside the working directory, pytest plugins),
``shell_startup`` (profiles and rc files), and ``installs``: site-packages changes and the entry
points an install adds beside them (``/usr/local/bin``), which are legitimate work (``pip
install``), named as such and not suspect. Paths under the working directory, ``/logs``,
``/tmp``, ``/tests`` and ``/solution`` are the agent's or the runtime's own and never counted.

A deleted path (the engine's kind 2) counts in the same classes, apart (``deleted``): removing a
site-packages module lets a workdir shadow win, removing ``/etc/ld.so.cache`` or an image's own
hook changes what the verifier loads. Site-packages deletions are an install's only beside an
added ``.dist-info`` (an upgrade replaced them); else they count as ``libraries``. The keeper's
walk cannot see a deleted entry, only that its folder changed (:func:`hides_deletions`): the
engine's list then names what went.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harbor_openenv.sandbox import Sandbox

SUSPECT = ("executables", "libraries", "interpreter_hooks", "pytest", "shell_startup")
CLASSES = (*SUSPECT, "installs")
_PATH_DIRS = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
_IGNORED = ("/logs", "/tmp", "/tests", "/solution", "/proc", "/dev", "/run", "/var/tmp")
_SHELL_FILES = {".bashrc", ".profile", ".bash_profile", ".bash_login", ".zshrc", ".zshenv"}
_SHELL_ETC = ("/etc/profile", "/etc/profile.d/", "/etc/bash.bashrc", "/etc/environment", "/etc/zsh")
_SITE = ("/site-packages/", "/dist-packages/")
_INFO = ".dist-info/"
_LIB_DIRS = ("/usr/lib/", "/usr/local/lib/", "/lib/", "/lib64/", "/usr/lib64/")
SHOWN = 5  # paths kept per class
ADDED, MODIFIED, DELETED = 1, 0, 2  # the engine's change kinds


@dataclass(frozen=True)
class TamperReport:
    """Changed (or added) paths by class, the first :data:`SHOWN` of each, the same of deleted
    paths, and whether any is suspect."""

    counts: dict[str, int] = field(default_factory=dict)
    paths: dict[str, list[str]] = field(default_factory=dict)
    deleted: dict[str, int] = field(default_factory=dict)
    deleted_paths: dict[str, list[str]] = field(default_factory=dict)

    @property
    def suspect(self) -> bool:
        return any(self.counts.get(name) or self.deleted.get(name) for name in SUSPECT)

    def info(self) -> dict[str, Any]:
        """What ``info["tamper"]`` carries."""
        return {
            "suspect": self.suspect,
            "counts": self.counts,
            "paths": self.paths,
            "deleted": {"counts": self.deleted, "paths": self.deleted_paths},
        }


def classify(changes: Iterable[tuple[str, int]], workdir: str) -> TamperReport:
    """The report of the engine's changes (path, kind) for an agent working in ``workdir``."""
    changes = list(changes)
    paths = {path for path, _ in changes}
    parents = {posixpath.dirname(path) for path in paths}
    installs = any(marker in path for path in paths for marker in _SITE)
    upgrade = any(
        kind != DELETED and path.endswith(".dist-info") and any(m in path for m in _SITE)
        for path, kind in changes
    )
    report = TamperReport()
    for path, kind in sorted(changes):
        if path in parents or _ignored(path, workdir):
            continue  # a folder holding other changes, or the agent's and the runtime's own
        name = _class_of(path, kind, workdir, installs)
        if kind == DELETED and name == "installs" and not upgrade:
            name = "libraries"  # a module removed outright: what imported it now comes from
        if name is None:
            continue
        counts, shown = (
            (report.deleted, report.deleted_paths)
            if kind == DELETED
            else (report.counts, report.paths)
        )
        counts[name] = counts.get(name, 0) + 1
        if len(shown.setdefault(name, [])) < SHOWN:
            shown[name].append(path)
    return report


def changes(sandbox: Sandbox) -> list[tuple[str, int]] | None:
    """What ``sandbox`` changed since its baseline outside the folders never counted (the
    keeper's walk, else the engine's list), with the engine's deletions where the walk shows a
    folder an entry may have left (:func:`hides_deletions`); None where the backend cannot tell."""
    workdir = sandbox.workdir
    found = sandbox.changes_since_mark(skipped(workdir))
    if found is not None and hides_deletions(found, workdir):
        engine = sandbox.changes() or []
        found += [(path, kind) for path, kind in engine if kind == DELETED]
    return found


def hides_deletions(changes: Iterable[tuple[str, int]], workdir: str) -> bool:
    """Whether a list without deletions (the keeper's) holds a changed entry with nothing in it
    changed where a deleted entry would count: a folder an entry left (or a folder whose own mode
    changed, or a file changed in place in such a place: the engine's list then tells). A
    deletion beside another change in the same folder is not seen this way."""
    changes = list(changes)
    if any(kind == DELETED for _, kind in changes):
        return False  # the engine's list already
    parents = {posixpath.dirname(path) for path, _ in changes}
    return any(
        kind == MODIFIED
        and path not in parents
        and not _ignored(path, workdir)
        and _may_hold_evidence(path, workdir)
        for path, kind in changes
    )


def _may_hold_evidence(folder: str, workdir: str) -> bool:
    """Whether an entry deleted from ``folder`` could count: its entries' class, a home's or
    ``/etc``'s start-up files, ``/etc/ld.so.*``. Below a site folder, a name with a dot or in a
    ``.dist-info`` is a file an install wrote (a package's folders have none): not a folder."""
    if any(m in folder for m in _SITE) and ("." in posixpath.basename(folder) or _INFO in folder):
        return False
    home = folder == "/root" or posixpath.dirname(folder) == "/home"
    return home or folder == "/etc" or _class_of(f"{folder}/-", DELETED, workdir, False) is not None


def skipped(workdir: str) -> list[str]:
    """The folders whose changes are never counted, for the keeper's walk to leave out."""
    root = workdir.rstrip("/") or "/"
    return [*_IGNORED, *([root] if root != "/" else [])]


def _ignored(path: str, workdir: str) -> bool:
    root = workdir.rstrip("/") or "/"
    if root != "/" and (path == root or path.startswith(root + "/")):
        return True
    return any(path == top or path.startswith(top + "/") for top in _IGNORED)


def _class_of(path: str, kind: int, workdir: str, installs: bool) -> str | None:
    base, folder = posixpath.basename(path), posixpath.dirname(path)
    if base.endswith(".pth") or base.split(".")[0] in ("sitecustomize", "usercustomize"):
        return "interpreter_hooks"
    if base == "conftest.py" or (any(m in path for m in _SITE) and base.startswith("pytest_")):
        return "pytest"
    if any(marker in path for marker in _SITE):
        return "installs"
    if path.startswith(("/etc/ld.so", *_LIB_DIRS)) or ".so." in base or base.endswith(".so"):
        return "libraries"  # a shared object, or a standard library's module (json/__init__.py)
    if folder in _PATH_DIRS:
        if installs and kind == ADDED and folder == "/usr/local/bin":
            return "installs"  # an entry point the install added beside its package
        return "executables"
    if base in _SHELL_FILES or path.startswith(_SHELL_ETC):
        return "shell_startup"
    return None
