"""Writing task folders for tests."""

from __future__ import annotations

from pathlib import Path


def write(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_task(root: Path, name: str, toml: str = "", *, dockerfile=True, tests=True) -> Path:
    task = root / name
    write(task / "task.toml", toml)
    write(task / "instruction.md", "Do it.\n")
    if dockerfile:
        write(task / "environment" / "Dockerfile", "FROM debian:bookworm-slim\n")
    if tests:
        write(task / "tests" / "test.sh", "#!/bin/bash\n")
    return task
