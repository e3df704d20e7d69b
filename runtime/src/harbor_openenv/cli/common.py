"""What every command shares: its exit statuses, the one-line UsageError, the dataset and server
settings it opens, and the table it prints."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from harbor_openenv.config import Settings
from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.tasks.config import TASK_FILE, DatasetError
from harbor_openenv.tasks.dataset import Dataset, find_tasks_root

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130
SERVER_EXTRA = "pip install 'harbor-openenv[server]'"  # what check, images and serve need


class UsageError(HarborOpenEnvError):
    """A mistake in what the user asked for: printed as one line, exit status 2."""


def print_table(rows: list[list[str]], out: TextIO) -> None:
    """Left-aligned columns; the last column is never padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = (
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )
    out.write("\n".join(line.rstrip() for line in lines) + "\n")


def open_dataset(path: Path) -> Dataset:
    """The dataset at ``path`` (tasks at its root or under tasks/), or a UsageError."""
    if not path.exists():
        raise UsageError(f"{path}: no such folder")
    if (path / TASK_FILE).is_file():
        raise UsageError(f"{path}: is a single task; pass the folder that holds it")
    try:
        return Dataset(find_tasks_root(path))
    except DatasetError as exc:
        raise UsageError(str(exc)) from None


def server_settings() -> Settings:
    """The server settings from the ``HARBOR_OPENENV_*`` variables; a malformed one: UsageError."""
    try:
        return Settings.from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
