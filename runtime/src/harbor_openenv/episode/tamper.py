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
the verifier runs as it likes, ``/opt/app/run.py`` included; or a module added beside the
image's own), and, not suspect, ``installs`` and ``other`` (files added where nothing
reaches). An install is recognised by its own metadata in a real site folder of the image's
interpreters: a ``.dist-info`` (``.egg-info``) written there makes the files added in that
folder, and the programs added to a ``PATH`` folder, an install's; files of the image changed
in place there are an install's only where one of its metadata folders went and another came
(an upgrade). Its ``RECORD`` is not read (the engine reads a file in some 150 ms).

Never counted: the working directory, ``/logs``, ``/tests``, ``/solution`` and the helper's
read-only mount (the agent's and the runtime's own, the tests staged afresh), the kernel's
``/proc`` and ``/sys``, and the engine's ``/etc/hosts``, ``/etc/hostname`` and
``/etc/resolv.conf`` (which its uploads touch).

Added or changed comes from the image's list of shipped paths (else from the engine's list).
A deleted path (the engine's kind 2) counts in the same classes, apart (``deleted``); deletions
in a site folder are an install's only in an upgrade. The keeper's walk cannot see a deleted
entry, only that its folder changed (:func:`hides_deletions`): the engine's list then names
what went.
"""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harbor_openenv.images.reach import GUESSED, LIB_DIRS, Reach
from harbor_openenv.sandbox import Sandbox

if TYPE_CHECKING:
    from prometheus_client import Counter

SUSPECT = (
    "executables",
    "libraries",
    "interpreter_hooks",
    "pytest",
    "shell_startup",
    "image_files",
)
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
_LIBS = frozenset(LIB_DIRS)
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

    def count(self, counter: Counter) -> None:
        """Count each class found once in ``counter`` (the tamper metric), deletions as
        ``<class>_deleted``."""
        for kind, n in [
            *self.counts.items(),
            *((f"{k}_deleted", n) for k, n in self.deleted.items()),
        ]:
            if n:
                counter.labels(kind).inc()


def classify(
    changes: Iterable[tuple[str, int]],
    workdir: str,
    reach: Reach = GUESSED,
) -> TamperReport:
    """The report of the changes (path, kind) of an agent working in ``workdir`` in an image of
    ``reach``."""
    shipped = reach.shipped
    changes = [
        (path, kind if kind == DELETED or shipped is None else int(path not in shipped))
        for path, kind in changes
    ]
    parents = {posixpath.dirname(path) for path, _ in changes}
    places = _Places(reach, workdir, changes)
    never = _never_counted(workdir)
    report = TamperReport()
    for path, kind in sorted(changes):
        if path in parents or path in _ENGINE_FILES:
            continue  # a folder holding other changes, or the engine's own
        chain = _chain(path)
        if _below(chain, never):
            continue  # the agent's and the runtime's own
        name = places.class_of(path, kind, chain)
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
    ) -> None:
        self.reach, self.workdir = reach, workdir.rstrip("/") or "/"
        self.roots = frozenset(reach.import_roots)
        self.sites = frozenset(reach.site_dirs)
        self.path_dirs = set(reach.path_dirs)
        self.interpreter_dirs = set(reach.interpreter_dirs)
        self.named = dict(reversed(reach.named()))  # the first variable naming a path wins
        written: dict[str, set[str]] = {}  # per site folder: metadata folders written, gone
        gone: dict[str, set[str]] = {}
        for path, kind in changes:
            if not any(marker in path for marker in _METADATA):
                continue
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
        self.installing = set(written)  # the site folders an install wrote its metadata in

    def class_of(self, path: str, kind: int, chain: list[str]) -> str:
        """The class of ``path`` (its :func:`_chain`: ``chain``) changed as ``kind`` says."""
        base, folder = posixpath.basename(path), posixpath.dirname(path)
        site = _below(chain, self.sites)
        if (base.endswith(".pth") and folder in self.sites) or base.split(".")[0] in _HOOKS:
            return "interpreter_hooks"
        if folder in self.interpreter_dirs and (
            base in _INTERPRETER_FILES or base.endswith("._pth")
        ):
            return "interpreter_hooks"
        if base == "conftest.py" or (_below(chain, self.roots) and base.startswith("pytest_")):
            return "pytest"
        if base in _PYTEST_FILES and _within(folder, self.workdir):
            return "pytest"  # where pytest looks for its configuration: the rootdir and above
        if site and (
            (kind != DELETED and _below(chain, self.written))
            or (kind == ADDED and site in self.installing)
            or site in self.upgraded
        ):
            return "installs"  # an install's metadata, what it added beside, what it upgraded
        if folder in self.path_dirs and kind == ADDED and self.installing:
            return "installs"  # an entry point an install added
        named = _below(chain, self.named)
        if named:
            return self.named[named]
        if _below(chain, self.roots) or _below(chain, _LIBS) or path.startswith("/etc/ld.so"):
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


def _chain(path: str) -> list[str]:
    """``path`` and the folders above it, longest first."""
    chain, end = [path], len(path)
    while (end := path.rfind("/", 0, end)) > 0:
        chain.append(path[:end])
    return [*chain, "/"]


def _below(path: str | list[str], roots: Collection[str]) -> str:
    """The longest of ``roots`` that ``path`` (or its :func:`_chain`) is in or equal to ('' if
    none)."""
    return next((p for p in (_chain(path) if isinstance(path, str) else path) if p in roots), "")


def _within(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


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
    return path in _ENGINE_FILES or bool(_below(path, _never_counted(workdir)))


@functools.cache
def _never_counted(workdir: str) -> frozenset[str]:
    return frozenset(skipped(workdir))
