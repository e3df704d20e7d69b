"""Copier task: check a Harbor dataset, then copy it byte for byte into the new project's tasks/.

Run by copier (on `copy` only) inside the rendered project:

    python hooks/copy_tasks.py --dataset /abs/dataset --dest . [--wheel /abs/harbor_openenv-X.whl]
        [--build-runtime /template/runtime]

and (as an unversioned migration, after every `copier update` to an unreleased template):

    python hooks/copy_tasks.py --runtime-wheel-only --dest . --build-runtime /template/runtime

Steps: find the tasks root (DATASET/tasks or DATASET), classify every task with the runtime's own
parser, print a summary, and stop with exit code 1 before writing anything when a task is invalid
(copier then deletes the half-made project). Otherwise copy the tasks into tasks/, write
tasks.sha256, copy a wheel pin into wheels/ and fill the dataset summary into README.md.

--build-runtime: the template version is not a published release (a dev version, or an untagged
commit), so the pin ``harbor-openenv==X.Y.Z`` names a version no package index has: build the
runtime's wheel from the template's own runtime/ (``uv build --wheel``, else ``pip wheel
--no-deps``) into wheels/, where the image build, ``uv sync`` and ``harbor-openenv wheels`` look
first. Built wheels are cached by the runtime's content under ~/.cache/harbor-openenv.

It runs on copier's Python, which has pydantic (a copier dependency) but not the runtime's server
extras, so it imports only harbor_openenv.datasets.manifest and .sync and harbor_openenv.tasks
(the task format they use), from the template's runtime/src, without running the package's __init__
(which may import the server stack).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

RUNTIME_SRC = Path(__file__).resolve().parents[1] / "runtime" / "src"
PROGRESS_FROM = 500  # show progress for datasets with more files than this


def _import_runtime() -> tuple[types.ModuleType, ...]:
    """Import harbor_openenv.datasets.task_copy, .manifest, .sync and .task from the template's
    runtime/src."""
    package_dir = RUNTIME_SRC / "harbor_openenv"
    if "harbor_openenv" not in sys.modules:
        package = types.ModuleType("harbor_openenv")
        package.__path__ = [str(package_dir)]
        sys.modules["harbor_openenv"] = package
    return (
        importlib.import_module("harbor_openenv.datasets.task_copy"),
        importlib.import_module("harbor_openenv.datasets.manifest"),
        importlib.import_module("harbor_openenv.datasets.sync"),
        importlib.import_module("harbor_openenv.tasks.task"),
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


def _runtime_digest(runtime: Path) -> str:
    """SHA-256 over the runtime's build inputs (pyproject.toml, README.md, src/)."""
    digest = hashlib.sha256()
    files = [runtime / "pyproject.toml", runtime / "README.md"]
    files += sorted(
        p for p in (runtime / "src").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )
    for path in files:
        if path.is_file():
            digest.update(path.relative_to(runtime).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_runtime_wheel(runtime: Path, wheels: Path) -> Path:
    """The runtime's wheel built from ``runtime`` (cached by content), copied into ``wheels``.

    Its version gets a local label naming the content (``0.2.0.dev0+src.<digest>``): the pin
    ``==0.2.0.dev0`` still matches it, and two different snapshots of one dev version are two
    versions to pip's and uv's caches, which would otherwise reuse the first one they saw.
    """
    if not (runtime / "pyproject.toml").is_file():
        fail(f"no runtime to build at {runtime} (the template's runtime/ folder)")
    digest = _runtime_digest(runtime)
    cache_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cache = cache_root / "harbor-openenv" / "runtime-wheels" / digest
    built = sorted(cache.glob("harbor_openenv-*.whl")) if cache.is_dir() else []
    how = "cached"
    if not built:
        with tempfile.TemporaryDirectory() as tmp:
            source, out = Path(tmp, "runtime"), Path(tmp, "out")
            shutil.copytree(runtime, source, ignore=shutil.ignore_patterns("__pycache__"))
            version_file = source / "src" / "harbor_openenv" / "_version.py"
            text = version_file.read_text(encoding="utf-8")
            text = re.sub(r'__version__ = "([^"+]+)"', rf'__version__ = "\1+src.{digest}"', text)
            version_file.write_text(text, encoding="utf-8")
            if shutil.which("uv"):
                how = "uv build --wheel"
                command = ["uv", "build", "--wheel", "--out-dir", str(out), str(source)]
            else:
                how = "pip wheel --no-deps"
                command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out)]
                command.append(str(source))
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            built = sorted(out.glob("harbor_openenv-*.whl"))
            if result.returncode != 0 or not built:
                tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
                fail(
                    f"could not build the runtime wheel with {how} (install uv, or pip for"
                    f" {sys.executable}): " + " | ".join(tail)
                )
            cache.mkdir(parents=True, exist_ok=True)
            for wheel in built:
                shutil.copyfile(wheel, cache / wheel.name)
            built = sorted(cache.glob("harbor_openenv-*.whl"))
    wheel = built[-1]
    wheels.mkdir(exist_ok=True)
    for stale in wheels.glob("harbor_openenv-*.whl"):
        if stale.name != wheel.name:
            stale.unlink()
            log(f"  removed {stale.name} from wheels/ (an earlier unreleased runtime)")
    shutil.copyfile(wheel, wheels / wheel.name)
    log(
        f"  this template version is not a published release: built {wheel.name} from the"
        f" template's runtime/ ({how}) into wheels/, which the pin installs from"
    )
    return wheels / wheel.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dataset", help="dataset folder (absolute), name@version, or hf://owner/name[@rev]"
    )
    parser.add_argument("--registry", default="", help="registry file or URL for name@version")
    parser.add_argument("--dest", default=Path("."), type=Path, help="the new project")
    parser.add_argument("--wheel", default="", help="wheel file to copy into wheels/ ('' = none)")
    parser.add_argument(
        "--build-runtime", default="", help="runtime/ to build a wheel of into wheels/ ('' = none)"
    )
    parser.add_argument(
        "--runtime-wheel-only",
        action="store_true",
        help="only --build-runtime, or without it remove unreleased runtime wheels (on update)",
    )
    parser.add_argument(
        "--runtime-pin", default="", help="the runtime_pin answer, checked first ('' = none)"
    )
    parser.add_argument(
        "--invalid-tasks",
        choices=("refuse", "keep"),
        default="refuse",
        help="keep: copy invalid tasks as they are (the server refuses them with their reasons)",
    )
    parser.add_argument(
        "--local-repos",
        choices=("allow", "refuse"),
        default="refuse",
        help="allow: a registry's tasks may come from repositories on this machine",
    )
    args = parser.parse_args(argv)
    if args.runtime_wheel_only:
        wheels = args.dest.resolve() / "wheels"
        if args.build_runtime:
            build_runtime_wheel(Path(args.build_runtime), wheels)
        else:  # a published release: the wheels earlier unreleased versions built are stale
            for stale in sorted(wheels.glob("harbor_openenv-*+src.*.whl")):
                stale.unlink()
                log(f"  removed {stale.name} from wheels/ (an unreleased runtime, now unused)")
        return 0
    if args.dataset is None:
        parser.error("--dataset is required")
    copy_mod, manifest_mod, sync, task_mod = _import_runtime()
    refs = importlib.import_module("harbor_openenv.datasets.sources")
    if args.runtime_pin.strip() and not args.runtime_pin.strip().endswith(".whl"):
        # Checked before anything is written; a wheel pin is checked with the dataset, below.
        pins = importlib.import_module("harbor_openenv.cli.pins")
        try:
            note = pins.check_pin(args.runtime_pin, args.dest.resolve() / "wheels")
        except pins.PinError as exc:
            fail(str(exc))
        if note:
            log(f"WARNING: {note}")
    with tempfile.TemporaryDirectory(prefix="harbor-openenv-dataset-") as workdir:
        record: dict[str, object] = {}
        if refs.kind_of(args.dataset) != "local":
            # Resolved before anything is written: a reference that fails leaves no tasks/.
            log(f"Resolving {args.dataset} ...")
            try:
                resolved = refs.resolve(
                    args.dataset,
                    args.registry,
                    Path(workdir),
                    local_repos=args.local_repos == "allow",
                )
            except refs.RefError as exc:
                fail(f"cannot resolve the dataset reference {exc}")
            source, record = resolved.root, resolved.record
        else:
            source = Path(args.dataset)
        return _copy(args, source, record, (copy_mod, manifest_mod, sync, task_mod), refs)


def _copy(
    args: argparse.Namespace,
    source: Path,
    record: dict[str, object],
    runtime: tuple[types.ModuleType, ...],
    refs: types.ModuleType,
) -> int:
    copy_mod, manifest_mod, sync, task_mod = runtime
    kind = task_mod.TaskKind
    if not source.is_absolute():
        fail(f"dataset path {source} is not absolute (the template passes an absolute path)")
    wheel = Path(args.wheel).expanduser() if args.wheel else None
    if wheel is not None and not wheel.is_file():
        fail(f"runtime_pin: wheel file not found: {wheel} (python -m build --wheel runtime)")
    try:
        dataset, by_kind = sync.open_dataset(source, allow_invalid=args.invalid_tasks == "keep")
    except sync.SyncError as exc:
        fail(str(exc).replace("try again", "run copier again"))
    root, count = dataset.root, len(dataset)

    print(f"Dataset: {root} ({count} task{'s' if count != 1 else ''})", file=sys.stderr)
    print(
        f"  runnable: {len(by_kind[kind.RUNNABLE])}, text-only: {len(by_kind[kind.TEXT_ONLY])},"
        f" unsupported: {len(by_kind[kind.UNSUPPORTED])}",
        file=sys.stderr,
    )
    if text_only := by_kind[kind.TEXT_ONLY]:
        print(
            f"  WARNING: {len(text_only)} text-only task(s) have no environment/ and no"
            " tests/: the server lists them, but they are scored client-side against"
            " solution/patch.diff, never in a container.",
            file=sys.stderr,
        )
    for task in by_kind[kind.UNSUPPORTED]:
        for problem in task.problems:
            print(f"  WARNING (unsupported, kept but not runnable): {problem}", file=sys.stderr)
    for task in by_kind[kind.INVALID]:  # only with --invalid-tasks keep
        for problem in task.problems:
            print(
                f"  WARNING (invalid, copied as it is, refused at reset): {problem}",
                file=sys.stderr,
            )

    dest = args.dest.resolve()
    tasks_dir = dest / "tasks"
    started = time.monotonic()
    try:
        digests = copy_mod.copy_tasks(root, tasks_dir, progress=Progress())
    except (copy_mod.CopyError, OSError) as exc:
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
    if args.build_runtime:
        build_runtime_wheel(Path(args.build_runtime), dest / "wheels")
    if record:
        refs.write_source(dest / refs.SOURCE_NAME, record)
        print(f"  recorded the reference and its commits in {refs.SOURCE_NAME}", file=sys.stderr)
    summary = refs.source_markdown(record) + sync.summary_markdown(by_kind)
    if not sync.write_summary(dest / "README.md", summary):
        print("  README.md has no dataset summary markers; summary not written", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
