"""An environment repo's tasks/ and a dataset: check, summarise, and copy or re-sync.

Used by the template's copy task (inside copier's Python, so standard library and pydantic only)
and by ``harbor-openenv sync-tasks``, which refreshes tasks/ from a dataset after ``copier
update`` (which never copies the dataset again).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harbor_openenv.datasets.manifest import (
    MANIFEST_NAME,
    executable,
    file_sha256,
    listed_files,
    read_manifest,
    read_modes,
    verify_manifest,
    write_manifest,
)
from harbor_openenv.datasets.task_copy import CopyError, copy_tasks
from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.tasks.config import DatasetError
from harbor_openenv.tasks.dataset import Dataset, find_tasks_root
from harbor_openenv.tasks.task import Task, TaskKind

SUMMARY_START = "<!-- harbor-openenv:dataset-summary:start"
SUMMARY_END = "<!-- harbor-openenv:dataset-summary:end -->"


class SyncError(HarborOpenEnvError):
    """The dataset cannot be copied (the copy failed); nothing was written."""


class SyncRefused(SyncError):
    """The dataset or the environment repo cannot be used as asked; nothing was written."""


def open_dataset(
    source: Path, *, allow_invalid: bool = False
) -> tuple[Dataset, dict[TaskKind, list[Task]]]:
    """The dataset under ``source`` with its tasks by kind; an empty dataset raises, and so does
    one with invalid tasks unless ``allow_invalid`` (they are then kept, and refused at reset)."""
    if not source.is_dir():
        raise SyncRefused(f"dataset folder not found: {source}")
    try:
        dataset = Dataset(find_tasks_root(source))
        ids = dataset.ids
    except DatasetError as exc:
        raise SyncRefused(
            f"{exc}\nGive the folder that holds the task folders (at its root or under tasks/)."
        ) from None
    if not ids:
        raise SyncRefused(f"no task found under {dataset.root}")
    by_kind: dict[TaskKind, list[Task]] = {kind: [] for kind in TaskKind}
    for task in dataset:
        by_kind[task.kind].append(task)
    invalid = by_kind[TaskKind.INVALID]
    if invalid and not allow_invalid:
        problems = [p for task in invalid for p in task.problems]
        raise SyncRefused(
            f"{len(invalid)} invalid task(s) in {dataset.root}; fix them (or remove"
            " them from the dataset) and try again, or keep them as they are, refused at reset"
            " with their reasons (copier: -d allow_invalid_tasks=true; sync-tasks:"
            " --allow-invalid):\n  " + "\n  ".join(problems)
        )
    return dataset, by_kind


def summary_markdown(by_kind: dict[TaskKind, list[Task]]) -> str:
    """The dataset section of the environment's README."""
    total = sum(len(tasks) for tasks in by_kind.values())
    lines = [
        f"This environment serves **{total}** task{'s' if total != 1 else ''}:",
        "",
        "| Kind | Count |",
        "|---|---|",
        f"| runnable (Docker container per episode) | {len(by_kind[TaskKind.RUNNABLE])} |",
        f"| text-only (scored client-side against `solution/patch.diff`) "
        f"| {len(by_kind[TaskKind.TEXT_ONLY])} |",
        f"| unsupported by this runtime (listed, not runnable) "
        f"| {len(by_kind[TaskKind.UNSUPPORTED])} |",
    ]
    invalid = by_kind[TaskKind.INVALID]
    if invalid:
        lines.append(
            f"| invalid (copied as they are; reset refuses them with the reasons below)"
            f" | {len(invalid)} |"
        )
    lines.append("")
    shown = 50
    for kind, label in (
        (TaskKind.TEXT_ONLY, "Text-only tasks"),
        (TaskKind.UNSUPPORTED, "Unsupported tasks"),
    ):
        tasks = by_kind[kind]
        if tasks:
            names = ", ".join(f"`{t.id}`" for t in tasks[:shown])
            more = f" and {len(tasks) - shown} more" if len(tasks) > shown else ""
            lines.append(f"{label}: {names}{more}.")
            lines.append("")
    if invalid:
        lines.append("Invalid tasks:")
        lines.append("")
        for task in invalid[:shown]:
            lines.append(f"- `{task.id}`: " + "; ".join(_within(task.id, p) for p in task.problems))
        if len(invalid) > shown:
            lines.append(f"- and {len(invalid) - shown} more")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _within(task_id: str, problem: str) -> str:
    """A problem without the task id it starts with (the list names the task once)."""
    for prefix in (f"{task_id}/", f"{task_id}: "):
        if problem.startswith(prefix):
            return problem[len(prefix) :]
    return problem


def write_summary(readme: Path, summary: str) -> bool:
    """Replace the text between the README's summary markers; False when they are gone."""
    if not readme.is_file():
        return False
    text = readme.read_text(encoding="utf-8")
    start, end = text.find(SUMMARY_START), text.find(SUMMARY_END)
    if start < 0 or end < start:
        return False
    start = text.index("\n", start) + 1
    new = text[:start] + summary + text[end:]
    if new != text:  # a sync that changes nothing leaves the README untouched
        readme.write_text(new, encoding="utf-8")
    return True


@dataclass
class SyncReport:
    """Task ids by what a sync does to them."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    readme_updated: bool = False
    written: bool = False  # False when nothing differed (or a dry run): tasks/ left untouched


def sync_tasks(
    source: Path,
    repo: Path,
    *,
    force: bool = False,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
    allow_invalid: bool = False,
    source_note: str = "",
) -> SyncReport:
    """Make ``repo/tasks`` a byte-for-byte copy of the dataset at ``source``.

    Refuses when tasks/ differs from the repo's tasks.sha256 (local changes would be lost) unless
    ``force``; refuses datasets with invalid tasks unless ``allow_invalid``; replaces tasks/ in
    one rename, then rewrites the manifest and the README's dataset summary (``source_note``, the
    resolved reference's lines, goes first).
    """
    tasks_dir, manifest = repo / "tasks", repo / MANIFEST_NAME
    if not manifest.is_file() or not tasks_dir.is_dir():
        raise SyncRefused(
            f"{repo}: no tasks/ and {MANIFEST_NAME} here; run this in an environment repo"
            " rendered by the harbor-openenv template"
        )
    local = verify_manifest(manifest, modes=True)
    if local and not force:
        shown = "\n  ".join(local[:20]) + ("\n  ..." if len(local) > 20 else "")
        raise SyncRefused(
            f"tasks/ has local changes that a sync would overwrite:\n  {shown}\n"
            "Move them into the dataset, or pass --force to discard them."
        )
    dataset, by_kind = open_dataset(source, allow_invalid=allow_invalid)
    report = _compare(dataset, tasks_dir, manifest)
    if dry_run or not (report.added or report.changed or report.removed or local):
        if not dry_run:
            report.readme_updated = write_summary(
                repo / "README.md", source_note + summary_markdown(by_kind)
            )
        return report
    incoming, outgoing = repo / ".tasks.sync-new", repo / ".tasks.sync-old"
    for leftover in (incoming, outgoing):
        shutil.rmtree(leftover, ignore_errors=True)
    try:
        digests = copy_tasks(dataset.root, incoming, progress=progress)
    except (CopyError, OSError) as exc:
        shutil.rmtree(incoming, ignore_errors=True)
        raise SyncError(f"cannot copy the dataset: {exc}") from None
    os.rename(tasks_dir, outgoing)
    os.rename(incoming, tasks_dir)
    write_manifest(tasks_dir, manifest, digests)
    shutil.rmtree(outgoing)
    report.readme_updated = write_summary(
        repo / "README.md", source_note + summary_markdown(by_kind)
    )
    report.written = True
    return report


def _compare(dataset: Dataset, tasks_dir: Path, manifest: Path) -> SyncReport:
    """Which tasks the dataset adds, changes or removes relative to the manifest.

    A file differs when its bytes or its execute bit do. The execute bits on the repo's side are
    the manifest's; for a manifest that records none (an older one), those of the files in tasks/.
    """
    old: dict[str, dict[str, tuple[str, bool]]] = {}
    entries, _ = read_manifest(manifest)
    marked = read_modes(manifest)
    old_ids = set(Dataset(tasks_dir).ids)
    base = manifest.parent
    for rel, digest in entries.items():
        parts = rel.removeprefix("tasks/").split("/")
        for depth in range(1, len(parts)):
            task_id = "/".join(parts[:depth])
            if task_id in old_ids:
                if marked is not None:
                    is_exec = rel in marked
                else:
                    is_exec = (base / rel).is_file() and executable(base / rel)
                old.setdefault(task_id, {})["/".join(parts[depth:])] = (digest, is_exec)
                break
    report = SyncReport()
    for task_id in dataset.ids:
        root = dataset.root / task_id
        files = {
            rel: (file_sha256(path), executable(path))
            for rel, path in listed_files(root, root / MANIFEST_NAME)
            if path.is_file()
        }
        if task_id not in old:
            report.added.append(task_id)
        elif files != old[task_id]:
            report.changed.append(task_id)
        else:
            report.unchanged += 1
    report.removed = sorted(set(old) - set(dataset.ids))
    return report
