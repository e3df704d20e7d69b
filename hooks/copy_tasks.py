"""Copier task: check a Harbor dataset, then copy it byte for byte into the new project's tasks/.

Run by copier (on `copy` only) inside the rendered project:

    python hooks/copy_tasks.py --dataset /abs/dataset --dest . [--wheel /abs/harbor_openenv-X.whl]

Steps: find the tasks root (DATASET/tasks or DATASET), classify every task with the runtime's own
parser, print a summary, and stop with exit code 1 before writing anything when a task is invalid
(copier then deletes the half-made project). Otherwise copy the tasks into tasks/, write
tasks.sha256, copy a wheel pin into wheels/ and fill the dataset summary into README.md.

It runs on copier's Python, which has pydantic (a copier dependency) but not the runtime's server
extras, so it imports only harbor_openenv.dataset, .manifest and .sync, from the template's
runtime/src, without running the package's __init__ (which may import the server stack).
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import time
import types
from pathlib import Path

RUNTIME_SRC = Path(__file__).resolve().parents[1] / "runtime" / "src"
PROGRESS_FROM = 500  # show progress for datasets with more files than this


def _import_runtime() -> tuple[types.ModuleType, types.ModuleType]:
    """Import harbor_openenv.manifest and .sync from the template's runtime/src."""
    package_dir = RUNTIME_SRC / "harbor_openenv"
    if "harbor_openenv" not in sys.modules:
        package = types.ModuleType("harbor_openenv")
        package.__path__ = [str(package_dir)]
        sys.modules["harbor_openenv"] = package
    return (
        importlib.import_module("harbor_openenv.manifest"),
        importlib.import_module("harbor_openenv.sync"),
    )


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fail(message: str) -> None:
    print(f"\nERROR: {message}", file=sys.stderr)
    sys.exit(1)


class Progress:
    """Percentage on stderr, for big datasets only."""

    def __init__(self) -> None:
        self.last = -1
        self.started = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        if total <= PROGRESS_FROM:
            return
        percent = done * 100 // total
        if percent // 5 != self.last // 5 or done == total:
            self.last = percent
            elapsed = time.monotonic() - self.started
            print(
                f"  copying tasks: {done}/{total} files ({percent}%, {elapsed:.0f}s)",
                file=sys.stderr,
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, type=Path, help="dataset folder (absolute)")
    parser.add_argument("--dest", default=Path("."), type=Path, help="the new project")
    parser.add_argument("--wheel", default="", help="wheel file to copy into wheels/ ('' = none)")
    args = parser.parse_args(argv)
    manifest_mod, sync = _import_runtime()

    source = args.dataset
    if not source.is_absolute():
        fail(f"dataset path {source} is not absolute (the template passes an absolute path)")
    wheel = Path(args.wheel).expanduser() if args.wheel else None
    if wheel is not None and not wheel.is_file():
        fail(f"runtime_pin: wheel file not found: {wheel} (python -m build --wheel runtime)")
    try:
        dataset, by_kind = sync.open_dataset(source)
    except sync.SyncError as exc:
        fail(str(exc).replace("try again", "run copier again"))
    root, count = dataset.root, len(dataset)

    print(f"Dataset: {root} ({count} task{'s' if count != 1 else ''})", file=sys.stderr)
    print(
        f"  runnable: {len(by_kind['runnable'])}, text-only: {len(by_kind['text-only'])}, "
        f"unsupported: {len(by_kind['unsupported'])}",
        file=sys.stderr,
    )
    if by_kind["text-only"]:
        print(
            f"  WARNING: {len(by_kind['text-only'])} text-only task(s) have no environment/ and no"
            " tests/: the server lists them, but they are scored client-side against"
            " solution/patch.diff, never in a container.",
            file=sys.stderr,
        )
    for task in by_kind["unsupported"]:
        for problem in task.problems:
            print(f"  WARNING (unsupported, kept but not runnable): {problem}", file=sys.stderr)

    dest = args.dest.resolve()
    tasks_dir = dest / "tasks"
    started = time.monotonic()
    try:
        digests = manifest_mod.copy_tasks(root, tasks_dir, progress=Progress())
    except (manifest_mod.CopyError, OSError) as exc:
        fail(f"cannot copy the dataset: {exc}")
    count = manifest_mod.write_manifest(tasks_dir, dest / manifest_mod.MANIFEST_NAME, digests)
    print(
        f"  copied {count} files into tasks/ in {time.monotonic() - started:.2f} s;"
        f" checksums in {manifest_mod.MANIFEST_NAME}",
        file=sys.stderr,
    )
    if wheel is not None:
        (dest / "wheels").mkdir(exist_ok=True)
        shutil.copyfile(wheel, dest / "wheels" / wheel.name)
        print(f"  copied {wheel.name} into wheels/", file=sys.stderr)
    if not sync.write_summary(dest / "README.md", sync.summary_markdown(by_kind)):
        print("  README.md has no dataset summary markers; summary not written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
