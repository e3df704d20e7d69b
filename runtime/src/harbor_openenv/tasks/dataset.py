"""A Harbor dataset: a folder of task directories, discovered lazily.

A task directory is a folder with a ``task.toml``, nested folders allowed; a task's id is its path
relative to the root. Listing never parses; each task parses its ``task.toml`` on first use (see
:mod:`harbor_openenv.tasks.task`), so a 10,000-task dataset lists in milliseconds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

from harbor_openenv.tasks.config import TASK_FILE, DatasetError
from harbor_openenv.tasks.task import Task


def find_tasks_root(path: Path) -> Path:
    """The folder holding a dataset's tasks: ``path/tasks`` when that holds tasks, else ``path``."""
    path = Path(path)
    if not path.is_dir():
        raise DatasetError(f"{path}: not a folder")
    for candidate in (path / "tasks", path):
        if candidate.is_dir() and next(_discover(candidate), None) is not None:
            return candidate
    raise DatasetError(f"{path}: no task directory (a folder with {TASK_FILE}) found under it")


def _discover(root: Path, prefix: str = "") -> Iterator[str]:
    """Yield task ids below root, depth first, without reading any file."""
    try:
        entries = sorted(os.scandir(root / prefix if prefix else root), key=lambda e: e.name)
    except OSError:
        return
    if any(entry.name == TASK_FILE and entry.is_file() for entry in entries):
        if prefix:
            yield prefix
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and not entry.name.startswith((".", "__")):
            yield from _discover(root, f"{prefix}/{entry.name}" if prefix else entry.name)


class Dataset:
    """The tasks under one root, listed lazily and parsed one by one on demand."""

    def __init__(self, root: Path) -> None:
        # Absolute (lexically: a symlinked tasks/ keeps its name, which tasks.sha256 lists), so
        # every path into a task holds wherever it is used: compose runs in environment/ with
        # the compose file's path, which a relative root would resolve twice.
        self.root = Path(os.path.abspath(root))
        if not self.root.is_dir():
            raise DatasetError(f"{self.root}: tasks folder does not exist")
        self._tasks: dict[str, Task] = {}

    @cached_property
    def ids(self) -> list[str]:
        if (self.root / TASK_FILE).is_file():
            raise DatasetError(f"{self.root}: is a single task, not a folder of tasks")
        return sorted(_discover(self.root))

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[Task]:
        return (self[task_id] for task_id in self.ids)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._index

    @cached_property
    def _index(self) -> frozenset[str]:
        return frozenset(self.ids)

    def __getitem__(self, task_id: str) -> Task:
        if task_id not in self._index:
            raise DatasetError(f"unknown task id {task_id!r} (the dataset has {len(self)} tasks)")
        task = self._tasks.get(task_id)
        if task is None:
            task = self._tasks[task_id] = Task(self.root, task_id)
        return task
