"""Dataset references: a local folder, a Harbor registry ``name@version``, a Hub dataset repo.

Resolving a reference gives a local folder holding the dataset's tasks (then copied byte for byte
into tasks/ like any local folder) and a record of what it resolved to, written to
``tasks.source.json`` and the README so ``harbor-openenv sync-tasks`` can re-resolve it later.

- ``name@version``: looked up in a Harbor registry file (Harbor 0.25's format: a JSON list of
  datasets, each with tasks naming a git URL, a commit and a path; the same file ``harbor datasets
  download --registry-path`` reads), given as a path or a URL. Each task is cloned with ``git``,
  checked out at its pinned commit, and its folder placed at ``tasks/<last part of path>``, as
  Harbor's download lays it out. The registry file is parsed with the small models below, which
  match Harbor's ``harbor.models.registry`` (this package never imports harbor).
- ``hf://owner/name[@revision]``: a Hugging Face Hub dataset repo laid out as ``tasks/<name>/``,
  fetched with huggingface_hub's ``snapshot_download`` at the revision's commit (huggingface_hub
  is not a dependency: it must be installed to use this kind).

Standard library and pydantic only: the copier task imports this inside copier's Python.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from harbor_openenv.errors import HarborOpenEnvError

SOURCE_NAME = "tasks.source.json"
HUB_PREFIX = "hf://"
_REGISTRY_REF = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._/-]*)@(?P<version>[A-Za-z0-9._+-]+)$")
_HUB_REF = re.compile(
    r"^hf://(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)(@(?P<rev>[^\s@]+))?$"
)


class RefError(HarborOpenEnvError):
    """A reference that cannot be resolved; the message is one line naming the reference."""


class RegistryTask(BaseModel):
    """One task of a registry dataset (Harbor's ``RegistryTaskId``)."""

    name: str
    git_url: str | None = None
    git_commit_id: str | None = None
    path: str


class RegistryDataset(BaseModel):
    """One dataset version of a registry (Harbor's ``DatasetSpec``; metrics are not used here)."""

    name: str
    version: str
    description: str = ""
    tasks: list[RegistryTask]
    metrics: list[dict[str, Any]] = Field(default_factory=list)


@dataclass
class Resolved:
    """Where the dataset now is on disk, and what the reference resolved to."""

    root: Path
    record: dict[str, Any] = field(default_factory=dict)


def kind_of(reference: str) -> str:
    """``hub``, ``registry`` or ``local``: a path (``/``, ``~``, ``.``, or an existing folder) is
    always local; ``hf://...`` is the Hub; ``name@version`` is a registry reference."""
    text = reference.strip()
    if text.startswith(HUB_PREFIX):
        return "hub"
    if text.startswith(("/", "~", ".")) or Path(text).exists():
        return "local"
    return "registry" if _REGISTRY_REF.match(text) else "local"


def load_registry(location: str, reference: str) -> list[RegistryDataset]:
    """The datasets of the registry file at ``location`` (a path, or an http(s)/file URL)."""
    if not location.strip():
        raise RefError(
            f"{reference}: a registry reference needs a registry file (copier: -d registry=PATH"
            " or URL; sync-tasks: --registry)"
        )
    try:
        if re.match(r"^[a-z]+://", location):
            with urllib.request.urlopen(location, timeout=60) as response:
                text = response.read().decode("utf-8")
        else:
            text = Path(location).expanduser().read_text(encoding="utf-8")
        rows = json.loads(text)
        if not isinstance(rows, list):
            raise ValueError("the registry must be a JSON list of datasets")
        return [RegistryDataset.model_validate(row) for row in rows]
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RefError(f"{reference}: cannot read the registry {location}: {first}") from None


_REMOTE_URL = re.compile(r"^(https?|ssh|git)://[^/\s]|^[\w.-]+@[\w.-]+:[^\s]")  # or scp-like
_OBJECT_ID = re.compile(r"^[0-9a-fA-F]{7,64}$")


def _checked_source(task: RegistryTask, reference: str, local_repos: bool) -> tuple[str, str]:
    """A registry task's git URL and commit, refused unless safe to hand to git: the commit a
    hex object id (or none: HEAD), the URL a remote one (http(s), ssh, git or scp-like) unless
    ``local_repos`` (the user's explicit opt-in: a registry file could name any repository on
    this machine, whose files would land in tasks/ and in a published environment repo)."""
    assert task.git_url is not None
    commit = task.git_commit_id or "HEAD"
    if commit != "HEAD" and not _OBJECT_ID.match(commit):
        raise RefError(
            f"{reference}: task {task.name}: git_commit_id {commit[:80]!r} is not a commit id"
            " (7 to 64 hex digits)"
        )
    if not local_repos and not _REMOTE_URL.match(task.git_url):
        raise RefError(
            f"{reference}: task {task.name}: git_url {task.git_url[:200]!r} is a local"
            " repository (a path or file://); allow local repositories explicitly to use it"
            " (copier: -d registry_local_repos=true; sync-tasks: --allow-local-repos)"
        )
    return task.git_url, commit


def _git(args: list[str], cwd: Path | None, reference: str, what: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=600
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()
        raise RefError(f"{reference}: {what} failed: {tail[-1] if tail else result.returncode}")
    return result.stdout.strip()


def resolve_registry(
    reference: str, registry: str, workdir: Path, *, local_repos: bool = False
) -> Resolved:
    """Clone every task of ``name@version`` at its pinned commit into ``workdir/tasks``; a
    task in a local repository only with ``local_repos`` (see :func:`_checked_source`)."""
    match = _REGISTRY_REF.match(reference.strip())
    if match is None:
        raise RefError(f"{reference}: not a registry reference (name@version)")
    name, version = match["name"], match["version"]
    datasets = load_registry(registry, reference)
    found = [d for d in datasets if d.name == name and d.version == version]
    if not found:
        versions = sorted(d.version for d in datasets if d.name == name)
        known = f" (versions there: {', '.join(versions)})" if versions else " (no such dataset)"
        raise RefError(f"{reference}: not in the registry {registry}{known}")
    spec = found[0]
    if not spec.tasks:
        raise RefError(f"{reference}: the registry lists no task for it")
    tasks_root, clones = workdir / "tasks", workdir / "clones"
    tasks_root.mkdir(parents=True)
    clones.mkdir()
    checked_out: dict[tuple[str, str], Path] = {}
    record_tasks: list[dict[str, str]] = []
    for task in spec.tasks:
        if task.git_url is None:
            raise RefError(
                f"{reference}: task {task.name} has no git_url (local registry tasks"
                " are not supported; give the dataset folder instead)"
            )
        key = _checked_source(task, reference, local_repos)
        clone = checked_out.get(key)
        if clone is None:
            clone = clones / str(len(checked_out))
            _git(  # "--": a URL is never read as an option
                ["clone", "--quiet", "--no-checkout", "--", task.git_url, str(clone)],
                None,
                reference,
                f"git clone of {task.git_url}",
            )
            _git(
                ["-c", "advice.detachedHead=false", "checkout", "--quiet", key[1], "--"],
                clone,
                reference,
                f"checkout of {key[1]} from {task.git_url}",
            )
            checked_out[key] = clone
        commit = _git(["rev-parse", "HEAD"], clone, reference, "git rev-parse")
        source = (clone / task.path).resolve()
        root = clone.resolve()
        if not source.is_dir() or (source != root and root not in source.parents):
            raise RefError(
                f"{reference}: task {task.name}: no folder {task.path} in {task.git_url}"
                f" at {commit}"
            )
        # `.` (or any path naming the repository itself): a repository that is one task, placed
        # at tasks/<last part of the task's name>
        folder = source.name if source != root else task.name.rstrip("/").rsplit("/", 1)[-1]
        if folder in ("", ".", ".."):
            raise RefError(f"{reference}: task {task.name!r}: no name to place it under tasks/")
        target = tasks_root / folder
        if target.exists():
            raise RefError(f"{reference}: two tasks would both be tasks/{target.name}")
        shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        record_tasks.append(
            {"name": task.name, "git_url": task.git_url, "commit": commit, "path": task.path}
        )
    record = {"reference": reference, "registry": registry, "tasks": record_tasks}
    return Resolved(tasks_root, record)


def _hub_functions() -> tuple[Callable[[str, str | None], str], Callable[[str, str, Path], Path]]:
    try:
        import huggingface_hub
    except ImportError:
        raise RefError("huggingface_hub is not installed (pip install huggingface_hub)") from None

    def commit_of(repo_id: str, revision: str | None) -> str:
        info = huggingface_hub.HfApi().dataset_info(repo_id, revision=revision)
        return str(info.sha)

    def download(repo_id: str, commit: str, dest: Path) -> Path:
        path = huggingface_hub.snapshot_download(
            repo_id, repo_type="dataset", revision=commit, local_dir=dest
        )
        return Path(path)

    return commit_of, download


def resolve_hub(
    reference: str,
    workdir: Path,
    *,
    commit_of: Callable[[str, str | None], str] | None = None,
    download: Callable[[str, str, Path], Path] | None = None,
) -> Resolved:
    """Download ``hf://owner/name[@revision]`` at the revision's commit into ``workdir``.

    ``commit_of`` and ``download`` default to huggingface_hub's ``HfApi().dataset_info`` and
    ``snapshot_download``; tests pass stand-ins (there is no Hub to reach from them).
    """
    match = _HUB_REF.match(reference.strip())
    if match is None:
        raise RefError(f"{reference}: not a Hub reference (hf://owner/name[@revision])")
    repo_id, revision = match["repo"], match["rev"]
    if commit_of is None or download is None:
        commit_of, download = _hub_functions()
    try:
        commit = commit_of(repo_id, revision)
        root = download(repo_id, commit, workdir / "snapshot")
    except RefError:
        raise
    except Exception as exc:  # huggingface_hub's errors are many; all mean "not resolved"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RefError(f"{reference}: cannot download from the Hub: {first}") from None
    record = {"reference": reference, "repo_id": repo_id, "revision": revision, "commit": commit}
    return Resolved(Path(root), record)


def resolve(reference: str, registry: str, workdir: Path, *, local_repos: bool = False) -> Resolved:
    """Resolve a registry or Hub reference into ``workdir`` (an empty folder the caller owns);
    ``local_repos``: a registry's tasks may come from repositories on this machine."""
    kind = kind_of(reference)
    if kind == "hub":
        return resolve_hub(reference, workdir)
    if kind == "registry":
        return resolve_registry(reference, registry, workdir, local_repos=local_repos)
    return Resolved(Path(reference).expanduser().resolve(), {})


def source_markdown(record: dict[str, Any]) -> str:
    """The README lines naming where the tasks came from."""
    if not record:
        return ""
    if "tasks" in record:
        lines = [
            f"Resolved from the Harbor registry reference `{record['reference']}` (registry"
            f" `{record['registry']}`), each task at its pinned commit:",
            "",
            "| Task | Git URL | Commit | Path |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| `{t['name']}` | `{t['git_url']}` | `{t['commit']}` | `{t['path']}` |"
            for t in record["tasks"]
        ]
    else:
        lines = [
            f"Resolved from the Hugging Face Hub dataset `{record['reference']}` at commit"
            f" `{record['commit']}`."
        ]
    lines += ["", f"(Recorded in `{SOURCE_NAME}`; `harbor-openenv sync-tasks` re-resolves it.)", ""]
    return "\n".join(lines)


def write_source(path: Path, record: dict[str, Any]) -> None:
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def read_source(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise RefError(
            f"no {SOURCE_NAME} here: this repo's tasks came from a local folder; give DATASET"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "reference" not in data:
        raise RefError(f"{path}: not a dataset source record")
    return data
