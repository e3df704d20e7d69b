"""Tamper evidence: what the agent's container changed outside its working directory, classed by
what the verifier can execute or import, asked of the keeper (and the engine) before the verifier
runs, no program of the container's (:meth:`Sandbox.changes_since_mark`). Reported, never acted
on: the reward is the verifier's; a trainer that cannot trust it drops the rollout
(``info["tamper"]["suspect"]``).

The classes come from the image's reach (:class:`~harbor_openenv.images.reach.Reach`, probed once
per image: its ``PATH`` folders, each interpreter's ``sys.path`` and site folders, the variables
of its ``Env`` and the task's ``[verifier].env``), not from folder names: ``executables`` (an
entry of a ``PATH`` folder), ``libraries`` (below an import root, ``/etc/ld.so.*``, a shared
object, below a library folder, a folder ``PYTHONPATH``/``LD_LIBRARY_PATH`` names, an
``LD_PRELOAD`` file), ``interpreter_hooks`` (a ``.pth`` in a site folder, ``sitecustomize``,
``usercustomize``, an interpreter's ``pyvenv.cfg``/``._pth``/``pybuilddir.txt`` beside or above
it, ``PYTHONSTARTUP``), ``pytest`` (``conftest.py``, a pytest configuration file in ``/`` or above
the working directory, a ``pytest_*`` module), ``shell_startup`` (profiles, rc files,
``BASH_ENV``), ``image_files`` (any other file the image shipped, changed in place or deleted:
the verifier runs as it likes, ``/opt/app/run.py`` included), and, not suspect, ``installs``
(files an install's own metadata lists: the ``RECORD`` of a ``.dist-info`` written in a real
site folder) and ``other`` (files added where nothing reaches). Never counted: the working
directory, ``/logs``, ``/tests``, ``/solution`` and the helper's read-only mount (the agent's
and the runtime's own, the tests staged afresh), the kernel's ``/proc`` and ``/sys``, and the
engine's ``/etc/hosts``, ``/etc/hostname`` and ``/etc/resolv.conf`` (which its uploads touch).

Added or changed comes from the image's list of shipped paths (else from the engine's list).
A deleted path (the engine's kind 2) counts in the same classes, apart (``deleted``); deletions
in a site folder are an install's only where a ``.dist-info`` there went and another came (an
upgrade). The keeper's walk cannot see a deleted entry, only that its folder changed
(:func:`hides_deletions`): the engine's list then names what went.
"""

from __future__ import annotations

import csv
import posixpath
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from harbor_openenv.images.reach import GUESSED, LIB_DIRS, Reach
from harbor_openenv.sandbox import Sandbox

SUSPECT = (
    "executables",
    "libraries",
    "interpreter_hooks",
    "pytest",
    "shell_startup",
    "image_files",
)
CLASSES = (*SUSPECT, "installs", "other")
_IGNORED = ("/logs", "/tests", "/solution", "/proc", "/sys", "/.harbor-openenv")
# The engine's own files of each container, bind-mounted: its list names them, and its archive
# operations (every upload) set their ctime, so neither list tells whether the agent changed them.
_ENGINE_FILES = ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf")
_SHELL_FILES = {".bashrc", ".profile", ".bash_profile", ".bash_login", ".zshrc", ".zshenv"}
_SHELL_ETC = ("/etc/profile", "/etc/profile.d/", "/etc/bash.bashrc", "/etc/environment", "/etc/zsh")
_HOOKS = ("sitecustomize", "usercustomize")
_INTERPRETER_FILES = ("pyvenv.cfg", "pybuilddir.txt")
_PYTEST_FILES = {"pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"}
_METADATA = (".dist-info", ".egg-info")
_RECORD_BYTES = 4 << 20
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


Records = Callable[[str], bytes | None]  # a metadata file's bytes, as the engine reads it


def classify(
    changes: Iterable[tuple[str, int]],
    workdir: str,
    reach: Reach = GUESSED,
    records: Records | None = None,
) -> TamperReport:
    """The report of the changes (path, kind) of an agent working in ``workdir`` in an image of
    ``reach``; ``records`` reads an install's metadata (None: nothing is an install)."""
    shipped = reach.shipped
    changes = [
        (path, kind if kind == DELETED or shipped is None else int(path not in shipped))
        for path, kind in changes
    ]
    parents = {posixpath.dirname(path) for path, _ in changes}
    places = _Places(reach, workdir, changes, records)
    report = TamperReport()
    for path, kind in sorted(changes):
        if path in parents or _ignored(path, workdir):
            continue  # a folder holding other changes, or the agent's and the runtime's own
        name = places.class_of(path, kind)
        counts, shown = (
            (report.deleted, report.deleted_paths)
            if kind == DELETED
            else (report.counts, report.paths)
        )
        counts[name] = counts.get(name, 0) + 1
        if len(shown.setdefault(name, [])) < SHOWN:
            shown[name].append(path)
    return report


class _Places:
    """Where a path lies in an image's reach, for one list of changes."""

    def __init__(
        self,
        reach: Reach,
        workdir: str,
        changes: list[tuple[str, int]],
        records: Records | None,
    ) -> None:
        self.reach, self.workdir = reach, workdir.rstrip("/") or "/"
        self.roots = reach.import_roots
        self.sites = reach.site_dirs
        self.path_dirs = set(reach.path_dirs)
        self.interpreter_dirs = set(reach.interpreter_dirs)
        self.named = reach.named()
        written: dict[str, set[str]] = {}  # per site folder: metadata folders written, gone
        gone: dict[str, set[str]] = {}
        for path, kind in changes:
            site = _below(path, self.sites)
            top = path[len(site) + 1 :].split("/", 1)[0] if site and site != path else ""
            if top.endswith(_METADATA):
                folder = f"{site}/{top}"
                if kind != DELETED:
                    written.setdefault(site, set()).add(folder)
                elif path == folder:
                    gone.setdefault(site, set()).add(folder)
        self.upgraded = {site for site in gone if written.get(site)}
        self.written = {folder for folders in written.values() for folder in folders}
        self.recorded: set[str] = set()
        if records is not None:
            for site, folders in written.items():
                for folder in sorted(folders):
                    self.recorded |= _recorded(site, folder, records)

    def class_of(self, path: str, kind: int) -> str:
        base, folder = posixpath.basename(path), posixpath.dirname(path)
        site = _below(path, self.sites)
        if (base.endswith(".pth") and folder in self.sites) or base.split(".")[0] in _HOOKS:
            return "interpreter_hooks"
        if folder in self.interpreter_dirs and (
            base in _INTERPRETER_FILES or base.endswith("._pth")
        ):
            return "interpreter_hooks"
        if base == "conftest.py" or (_below(path, self.roots) and base.startswith("pytest_")):
            return "pytest"
        if base in _PYTEST_FILES and _within(folder, self.workdir):
            return "pytest"  # where pytest looks for its configuration: the rootdir and above
        if site and (
            self._recorded(path)
            or (kind == DELETED and site in self.upgraded)
            or (kind != DELETED and _below(path, self.written))
        ):
            return "installs"  # listed by its install's metadata, or that metadata itself
        if folder in self.path_dirs and self._recorded(path) and kind != DELETED:
            return "installs"  # an entry point its install's RECORD lists
        for named, name in self.named:
            if _within(named, path):
                return name
        if _below(path, self.roots) or _below(path, LIB_DIRS) or path.startswith("/etc/ld.so"):
            return "libraries"
        if ".so." in base or base.endswith(".so"):
            return "libraries"
        if folder in self.path_dirs:
            return "executables"
        if base in _SHELL_FILES or path.startswith(_SHELL_ETC):
            return "shell_startup"
        if kind != ADDED:
            return "image_files"
        shipped = self.reach.shipped
        if base.endswith(".py") and shipped is not None and shipped.holds_code(folder):
            return "image_files"  # beside the image's code: a script run there imports it first
        return "other"

    def _recorded(self, path: str) -> bool:
        """Whether an install's metadata lists ``path`` (or the source a ``__pycache__`` file
        compiles)."""
        if path in self.recorded:
            return True
        folder = posixpath.dirname(path)
        if posixpath.basename(folder) != "__pycache__":
            return False
        source = posixpath.basename(path).split(".")[0] + ".py"
        return posixpath.join(posixpath.dirname(folder), source) in self.recorded


def _recorded(site: str, folder: str, records: Records) -> set[str]:
    """The paths the metadata in ``folder`` (of site folder ``site``) says its install wrote:
    a ``.dist-info``'s ``RECORD`` (relative to the site folder), an ``.egg-info``'s
    ``installed-files.txt`` (relative to itself)."""
    if folder.endswith(".dist-info"):
        data, base = records(f"{folder}/RECORD"), site
    else:
        data, base = records(f"{folder}/installed-files.txt"), folder
    if not data:
        return set()
    lines = data.decode(errors="replace").splitlines()
    rows = csv.reader(lines) if folder.endswith(".dist-info") else ([line] for line in lines)
    return {posixpath.normpath(posixpath.join(base, row[0])) for row in rows if row and row[0]}


def _below(path: str, roots: Iterable[str]) -> str:
    """The longest of ``roots`` that ``path`` is in or equal to ('' if none)."""
    found = ""
    for root in roots:
        if len(root) > len(found) and _within(root, path):
            found = root
    return found


def _within(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def reader(sandbox: Sandbox) -> Records:
    """An install's metadata files of ``sandbox``, as the engine reads them (no program of the
    container's), at most 4 MiB each."""

    def read(path: str) -> bytes | None:
        with sandbox.download(path) as archive:
            if archive is None or archive.size > _RECORD_BYTES:
                return None
            with tarfile.open(fileobj=archive.stream, mode="r|") as tar:
                for member in tar:
                    stream = tar.extractfile(member) if member.isfile() else None
                    return stream.read(_RECORD_BYTES) if stream is not None else None
        return None

    return read


def changes(sandbox: Sandbox, reach: Reach = GUESSED) -> list[tuple[str, int]] | None:
    """What ``sandbox`` changed since its baseline outside the folders never counted (the
    keeper's walk, else the engine's list), with the engine's deletions where the walk shows a
    folder an entry may have left (:func:`hides_deletions`); the engine's list alone where the
    image's shipped paths are not known (it tells added from changed); None where the backend
    cannot tell."""
    workdir = sandbox.workdir
    found = sandbox.changes_since_mark(skipped(workdir))
    if found is None or any(kind == DELETED for _, kind in found):
        return found  # none, or the engine's list already
    if reach.shipped is None:
        engine = sandbox.changes()
        return found if engine is None else engine
    if hides_deletions(found, workdir, reach):
        engine = sandbox.changes() or []
        found += [(path, kind) for path, kind in engine if kind == DELETED]
    return found


def hides_deletions(changes: Iterable[tuple[str, int]], workdir: str, reach: Reach) -> bool:
    """Whether a list without deletions (the keeper's) holds a changed folder with nothing in it
    changed where the image shipped something (an entry of it may have gone: the engine's list
    then tells). A deletion beside another change in the same folder is not seen this way."""
    changes = list(changes)
    if any(kind == DELETED for _, kind in changes):
        return False  # the engine's list already
    shipped = reach.shipped
    parents = {posixpath.dirname(path) for path, _ in changes}
    return any(
        path not in parents
        and not _ignored(path, workdir)
        and (shipped is None or shipped.holds(path))
        for path, _ in changes
    )


def skipped(workdir: str) -> list[str]:
    """The folders whose changes are never counted, for the keeper's walk to leave out."""
    root = workdir.rstrip("/") or "/"
    return [*_IGNORED, *([root] if root != "/" else [])]


def _ignored(path: str, workdir: str) -> bool:
    if path in _ENGINE_FILES:
        return True
    root = workdir.rstrip("/") or "/"
    if root != "/" and _within(root, path):
        return True
    return any(_within(top, path) for top in _IGNORED)
