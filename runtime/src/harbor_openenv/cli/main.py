"""``harbor-openenv``: validate a dataset, check its tasks in Docker, or serve it locally.

Longer than ~400 lines: it is the parser (a third of it, each command's help text) and one
short function per command with its report; each command's engine lives in its own module
(check, sync, update, image).

``validate`` needs only the core package; ``check`` and ``serve`` import the server extra (OpenEnv,
Docker, uvicorn) when they run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from harbor_openenv._version import __version__
from harbor_openenv.cli.check import (
    SERVER_EXTRA,
    CheckError,
    CheckResult,
    check_in_docker,
    select_tasks,
)
from harbor_openenv.config import Settings
from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.tasks.config import TASK_FILE, DatasetError, serve_time_variables
from harbor_openenv.tasks.dataset import Dataset, find_tasks_root
from harbor_openenv.tasks.task import Task, TaskKind

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130


class UsageError(HarborOpenEnvError):
    """A mistake in what the user asked for: printed as one line, exit status 2."""


# -- validate ------------------------------------------------------------------------------------


def _task_row(task: Task) -> dict[str, Any]:
    """What validate reports about one task: its kind, image source, timeouts, problems, what
    Harbor 0.25 would refuse in it, and the variables the server needs to run it."""
    from harbor_openenv.tasks.harbor_rules import harbor_warnings
    from harbor_openenv.tasks.lint import shadowing, system_state

    try:
        config = task.config
    except DatasetError:  # reported in problems
        config = None
    return {
        "task": task.id,
        "kind": str(task.kind),
        "image": task.image.model_dump() if task.image else None,
        "agent_timeout_sec": config and config.agent.timeout_sec,
        "verifier_timeout_sec": config and config.verifier.timeout_sec,
        "build_timeout_sec": config and config.environment.build_timeout_sec,
        "problems": task.problems,
        "harbor_warnings": harbor_warnings(task),
        "shadowing": shadowing(task),
        "system_state": system_state(task),
        "needs": serve_time_variables(config) if config else {},
    }


def _harbor_text(warnings: list[dict[str, str]]) -> str:
    """The HARBOR column: ``ok``, or ``refuses:`` and the fields Harbor 0.25 would refuse."""
    if not warnings:
        return "ok"
    fields = dict.fromkeys(warning["field"].replace(" ", "-") for warning in warnings)
    return "refuses:" + ",".join(fields)


def _image_text(image: dict[str, Any] | None) -> str:
    if image is None:
        return "-"
    return image["kind"] if image["ref"] is None else f"{image['kind']}:{image['ref']}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _print_table(rows: list[list[str]], out: TextIO) -> None:
    """Left-aligned columns; the last column is never padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = (
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )
    out.write("\n".join(line.rstrip() for line in lines) + "\n")


def _open_dataset(path: Path) -> Dataset:
    """The dataset at ``path`` (tasks at its root or under tasks/), or a UsageError."""
    if not path.exists():
        raise UsageError(f"{path}: no such folder")
    if (path / TASK_FILE).is_file():
        raise UsageError(f"{path}: is a single task; pass the folder that holds it")
    try:
        return Dataset(find_tasks_root(path))
    except DatasetError as exc:
        raise UsageError(str(exc)) from None


def cmd_validate(args: argparse.Namespace) -> int:
    dataset = _open_dataset(args.dataset)
    rows = [_task_row(task) for task in dataset]
    counts = {str(kind): 0 for kind in TaskKind}
    for row in rows:
        counts[row["kind"]] += 1
    ok = counts[TaskKind.INVALID] == 0
    if args.json:
        report = {"root": str(dataset.root), "ok": ok, "counts": counts, "tasks": rows}
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK if ok else EXIT_PROBLEMS
    table = [["TASK", "KIND", "IMAGE", "AGENT_S", "VERIFIER_S", "BUILD_S", "HARBOR", "PROBLEMS"]]
    table += [
        [
            row["task"],
            row["kind"],
            _image_text(row["image"]),
            _seconds(row["agent_timeout_sec"]),
            _seconds(row["verifier_timeout_sec"]),
            _seconds(row["build_timeout_sec"]),
            _harbor_text(row["harbor_warnings"]),
            "; ".join(row["problems"]) or "-",
        ]
        for row in rows
    ]
    _print_table(table, sys.stdout)
    for row in rows:
        for warning in row["harbor_warnings"]:
            print(f"Harbor 0.25 would refuse {warning['warning']}")
    for row in rows:
        for found in [*row["shadowing"], *row["system_state"]]:
            print(f"{row['task']}/{found['file']}:{found['line']}: {found['warning']}")
    for row in rows:
        for variable, fields in row["needs"].items():
            print(f"{row['task']}: needs {variable} at serve time ({', '.join(fields)})")
    summary = ", ".join(f"{count} {kind}" for kind, count in counts.items())
    verdict = "ok" if ok else f"{counts[TaskKind.INVALID]} invalid task(s) must be fixed"
    refused = sum(bool(row["harbor_warnings"]) for row in rows)
    extra = f"; Harbor 0.25 would refuse {refused}" if refused else ""
    shadowed = sum(bool(row["shadowing"]) for row in rows)
    extra += f"; {shadowed} run something the agent can shadow" if shadowed else ""
    systemic = sum(bool(row["system_state"]) for row in rows)
    extra += f"; {systemic} read the system (not for a pristine verifier)" if systemic else ""
    print(f"{len(rows)} tasks in {dataset.root}: {summary} ({verdict}{extra})")
    return EXIT_OK if ok else EXIT_PROBLEMS


# -- check ---------------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {args.jobs}")
    if args.json not in (None, "-") and not Path(args.json).parent.is_dir():
        raise UsageError(f"--json {args.json}: its folder does not exist")
    dataset = _open_dataset(args.dataset)
    try:
        tasks, results = select_tasks(dataset, args.task)
        started = time.monotonic()
        if tasks:
            # The server's defaults, but for the build network (a check builds images as the
            # server does).
            build_network = _settings().build_network
            results += check_in_docker(dataset.root, tasks, args.jobs, build_network)
    except CheckError as exc:
        raise UsageError(str(exc)) from None
    order = {task_id: index for index, task_id in enumerate(dataset.ids)}
    results.sort(key=lambda result: order[result.task])
    _report_check(results, args.json, time.monotonic() - started)
    return EXIT_OK if all(result.ok for result in results) else EXIT_PROBLEMS


def _reward_text(value: float | None) -> str:
    return "None" if value is None else f"{value:g}"


def _changes_text(result: CheckResult) -> str:
    """The CHANGES column: the oracle's changes outside its workdir by class, suspect first."""
    counts = {name: n for name, n in result.oracle_changes.items() if n}
    if not counts:
        return "-"
    text = ", ".join(f"{name} {n}" for name, n in counts.items())
    return f"SUSPECT {text}" if result.oracle_suspect else text


def _report_check(results: list[CheckResult], json_target: str | None, seconds: float) -> None:
    out = sys.stderr if json_target == "-" else sys.stdout
    if results:
        table = [["TASK", "NOP", "ORACLE", "SECONDS", "STATUS", "CHANGES"]]
        table += [
            [
                r.task,
                _reward_text(r.nop),
                _reward_text(r.oracle),
                f"{r.seconds:.1f}",
                "ok" if r.ok else "PROBLEM",
                _changes_text(r),
            ]
            for r in results
        ]
        _print_table(table, out)
    problems = [line for r in results for line in r.problems]
    for line in problems:
        print(line, file=out)
    for line in (line for r in results for line in r.warnings):
        print(f"warning: {line}", file=out)
    failed = sum(not r.ok for r in results)
    suspect = sum(bool(r.oracle_suspect) for r in results)
    print(
        f"{len(results)} tasks checked in {seconds:.1f} s: {len(results) - failed} ok,"
        f" {failed} with problems; the tamper report flagged {suspect} oracle runs",
        file=out,
    )
    if json_target:
        text = json.dumps([asdict(r) for r in results], indent=2) + "\n"
        if json_target == "-":
            sys.stdout.write(text)
        else:
            Path(json_target).write_text(text, encoding="utf-8")


# -- images --------------------------------------------------------------------------------------


@dataclass
class ImageResult:
    image: str
    tasks: list[str]
    status: str = "failed"  # present, built, pulled or failed
    seconds: float = 0.0
    error: str | None = None
    pushed: str | None = None  # push: the digest reference


IMAGES_ACTIONS = ("build", "push")


def _images_args(args: argparse.Namespace) -> tuple[str, Path | None, str | None]:
    """``images [build|push] [DATASET]``: the action (build without one), dataset and registry."""
    words: list[str] = list(args.words)
    action = words.pop(0) if words and words[0] in IMAGES_ACTIONS else "build"
    if len(words) > 1:
        raise UsageError(f"one DATASET, not {' '.join(words)!r} (images [build|push] [DATASET])")
    dataset = Path(words[0]) if words else None
    registry = None
    if action == "push":
        if not args.registry:
            raise UsageError("push needs --registry HOST/PREFIX (e.g. 127.0.0.1:5000/envs/my-env)")
        from harbor_openenv.images.lock import parse_registry

        try:
            registry = parse_registry(args.registry)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    elif args.registry:
        raise UsageError("--registry goes with push (images push DATASET --registry HOST/PREFIX)")
    return action, dataset, registry


def cmd_images(args: argparse.Namespace) -> int:
    """Build or pull every image the runnable tasks need, ``jobs`` at once, before serving; with
    push, also push each task's image to a registry and write images.lock."""
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {args.jobs}")
    action, dataset_path, registry = _images_args(args)
    settings = _settings()
    dataset = _open_dataset(dataset_path or settings.tasks or Path("."))
    try:
        import docker

        from harbor_openenv.events import configure_images
        from harbor_openenv.images.lock import (
            LOCK_NAME,
            LockedImage,
            LockError,
            lock_source,
            push_image,
            read_lock,
            stale_pin,
            write_lock,
        )
        from harbor_openenv.images.resolver import (
            ImageError,
            ImageResolver,
            task_images,
            verifier_source,
            verifier_steps,
        )
        from harbor_openenv.sandbox import engine
    except ImportError as exc:
        raise UsageError(
            f"images needs the server extra ({exc.name} is missing): {SERVER_EXTRA}"
        ) from None
    lock = dataset.root.parent / LOCK_NAME
    try:  # build: the images a server would start, so a pinned task's locked image is pulled
        pins = read_lock(lock) if action == "build" and lock.is_file() else {}
    except LockError as exc:
        raise UsageError(str(exc)) from None
    wanted: dict[str, tuple[Task, Any]] = {}
    results: dict[str, ImageResult] = {}
    pinned: set[str] = set()
    problems = []
    for task in dataset:
        if task.kind is TaskKind.INVALID:
            problems.append(f"{task.id}: is invalid: {'; '.join(task.problems)}")
        elif task.kind is not TaskKind.RUNNABLE:
            print(f"skipped {task.id} ({task.kind}: no image to build)", file=sys.stderr)
            continue
        else:
            try:
                images = task_images(task)
            except ImageError as exc:  # a compose file whose main build does not resolve
                problems.append(str(exc))
                continue
            pin = pins.get(task.id)
            stale = pin and stale_pin(task, pin)
            if stale:  # the server refuses the task: nothing to make for its own image
                problems.append(stale)
                source = lock_source(task)
                images = [(ref, make) for ref, make in images if ref != source]
            elif pin is not None:  # the task's image and its separate verifiers', pulled
                locked = {pin.source: pin.image, **pin.verifiers}
                pinned.update(locked[ref] for ref, _ in images if ref in locked)
                images = [
                    (locked[ref], _pulling(task, locked[ref])) if ref in locked else (ref, make)
                    for ref, make in images
                ]
            for ref, make in images:
                wanted.setdefault(ref, (task, make))
                results.setdefault(ref, ImageResult(ref, [])).tasks.append(task.id)
    try:
        client = engine.connect()
    except Exception as exc:
        raise UsageError(f"cannot reach the Docker engine: {exc}") from None
    configure_images()
    resolver = ImageResolver(client, build_network=settings.build_network)
    total = len(wanted)
    print(f"{total} image(s) for {len(dataset)} task(s), {args.jobs} at once", file=sys.stderr)

    def make_one(ref: str) -> ImageResult:
        task, make = wanted[ref]
        result = results[ref]
        started = time.monotonic()
        try:
            present = resolver.has(ref)
            make(resolver)
            source = task.image
            pulled = ref in pinned or (
                source is not None and source.kind != "dockerfile" and ref == source.ref
            )
            result.status = "present" if present else ("pulled" if pulled else "built")
        except (ImageError, docker.errors.DockerException) as exc:
            result.error = str(exc).splitlines()[0]
        result.seconds = round(time.monotonic() - started, 1)
        return result

    def push_one(ref: str) -> ImageResult:
        result = results[ref]
        started = time.monotonic()
        try:
            assert registry is not None
            result.pushed = push_image(client, ref, registry)
        except (ImageError, docker.errors.DockerException) as exc:
            result.error = str(exc).splitlines()[0]
        result.seconds = round(result.seconds + time.monotonic() - started, 1)
        return result

    from concurrent.futures import ThreadPoolExecutor, as_completed

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.jobs, thread_name_prefix="images") as pool:
        futures = [pool.submit(make_one, ref) for ref in wanted]
        for done, future in enumerate(as_completed(futures), 1):
            result = future.result()
            what = result.status if result.error is None else f"FAILED: {result.error}"
            print(
                f"[{done}/{total}] {result.image} ({', '.join(result.tasks[:3])}"
                f"{' ...' if len(result.tasks) > 3 else ''}): {what} in {result.seconds:.1f} s",
                file=sys.stderr,
            )
        # push: each task's own image and its separate verifiers' own images
        runnable = [task for task in dataset if task.kind is TaskKind.RUNNABLE]
        sources = {task.id: s for task in runnable if (s := lock_source(task)) in results}
        verifiers = {
            task.id: [s for step in verifier_steps(task) if (s := verifier_source(task, step))]
            for task in runnable
        }
        every = [*sources.values(), *(ref for refs in verifiers.values() for ref in refs)]
        to_push = [ref for ref in dict.fromkeys(every) if ref in results and not results[ref].error]
        if action == "push":
            futures = [pool.submit(push_one, ref) for ref in to_push]
            for done, future in enumerate(as_completed(futures), 1):
                result = future.result()
                what = f"FAILED: {result.error}" if result.error else f"pushed {result.pushed}"
                print(f"[push {done}/{len(to_push)}] {result.image}: {what}", file=sys.stderr)
    rows = [["IMAGE", "TASKS", "STATUS", "SECONDS"]]
    rows += [[r.image, str(len(r.tasks)), r.status, f"{r.seconds:.1f}"] for r in results.values()]
    if action == "push":
        rows = [[*row, "PUSHED"] for row in rows[:1]] + [
            [*row, r.pushed or "-"] for row, r in zip(rows[1:], results.values(), strict=True)
        ]
    if len(rows) > 1:
        _print_table(rows, sys.stdout)
    failed = [r for r in results.values() if r.error]
    invalid = len(problems)
    problems += [f"{r.image} ({', '.join(r.tasks)}): {r.error}" for r in failed]
    for line in problems:
        print(line)
    print(
        f"{total} image(s) in {time.monotonic() - started:.1f} s: {total - len(failed)} ready,"
        f" {len(failed)} failed" + (f", {invalid} invalid task(s)" if invalid else "")
    )
    if action == "push":
        if problems:
            print(f"{lock} not written: every image must push first")
        else:
            assert registry is not None
            entries = {
                task_id: LockedImage(
                    results[ref].pushed or "",
                    ref,
                    {v: results[v].pushed or "" for v in verifiers[task_id] if v in results},
                )
                for task_id, ref in sorted(sources.items())
            }
            write_lock(lock, registry, entries)
            print(f"wrote {lock}: {len(entries)} task(s) pinned to {registry}")
    return EXIT_PROBLEMS if problems else EXIT_OK


def _pulling(task: Task, ref: str) -> Any:
    """How ``images build`` makes a pinned task's image: pulled (by digest) if absent."""
    return lambda resolver: resolver.use(task, ref)


# -- serve ---------------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    settings = _settings()
    tasks = args.tasks or settings.tasks or Path(".")
    root = _open_dataset(tasks).root
    if args.token is not None:
        raise UsageError(
            "serve refuses --token: a command line is visible to every user of the host (ps,"
            " /proc); give the token in HARBOR_OPENENV_ORCHESTRATION_TOKEN or a file (--token-file)"
        )
    if args.token_file is not None:
        token = _read_token(args.token_file)
        settings = replace(settings, orchestration_token=token)
    try:
        import uvicorn

        from harbor_openenv.images.lock import LockError
        from harbor_openenv.server.app import build_app
    except ImportError as exc:
        raise UsageError(
            f"serve needs the server extra ({exc.name} is missing): {SERVER_EXTRA}"
        ) from None
    try:
        app = build_app(root, settings=settings)
    except LockError as exc:
        raise UsageError(str(exc)) from None
    if app.state.runtime.settings.orchestration_token is None:
        print(
            "note: no HARBOR_OPENENV_ORCHESTRATION_TOKEN (or --token-file): evaluate and solve"
            " are refused",
            file=sys.stderr,
        )
    print(f"serving {root} on http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port)
    return EXIT_OK


def _settings() -> Settings:
    """The server settings from the ``HARBOR_OPENENV_*`` variables; a malformed one: UsageError."""
    try:
        return Settings.from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _read_token(path: Path) -> str:
    """The orchestration token in ``path``: its first line, surrounding whitespace removed."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--token-file {path}: cannot read it: {exc}") from None
    token = lines[0].strip() if lines else ""
    if not token:
        raise UsageError(f"--token-file {path}: the file is empty; put the token on its first line")
    return token


# -- sync-tasks and update ----------------------------------------------------------------------


def cmd_sync_tasks(args: argparse.Namespace) -> int:
    import tempfile

    from harbor_openenv.datasets import sources as refs
    from harbor_openenv.datasets.sync import SyncError, SyncRefused, sync_tasks

    source_file = args.repo / refs.SOURCE_NAME
    with tempfile.TemporaryDirectory(prefix="harbor-openenv-dataset-") as workdir:
        try:
            if args.dataset is None:  # re-resolve the recorded reference
                recorded = refs.read_source(source_file)
                reference = str(recorded["reference"])
                registry = args.registry or str(recorded.get("registry", ""))
            else:
                reference, registry = args.dataset, args.registry
            resolved = refs.resolve(
                reference, registry, Path(workdir), local_repos=args.allow_local_repos
            )
        except refs.RefError as exc:
            print(f"harbor-openenv sync-tasks: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            report = sync_tasks(
                resolved.root,
                args.repo,
                force=args.force,
                dry_run=args.dry_run,
                allow_invalid=args.allow_invalid,
                source_note=refs.source_markdown(resolved.record),
            )
        except SyncRefused as exc:  # the repo, the dataset or local changes: nothing was written
            print(f"harbor-openenv sync-tasks: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except SyncError as exc:
            print(f"harbor-openenv sync-tasks: {exc}", file=sys.stderr)
            return EXIT_PROBLEMS
    if not args.dry_run:
        if resolved.record:
            refs.write_source(source_file, resolved.record)
        elif source_file.is_file():  # a local folder now: the old reference no longer applies
            source_file.unlink()
    for label, ids in (("added", report.added), ("changed", report.changed)):
        for task_id in ids:
            print(f"{label}: {task_id}")
    for task_id in report.removed:
        print(f"removed: {task_id}")
    counts = (
        f"{len(report.added)} added, {len(report.changed)} changed, {len(report.removed)} removed,"
        f" {report.unchanged} unchanged"
    )
    if args.dry_run:
        print(f"{counts} (dry run, nothing written)")
    elif report.written:
        readme = ", README counts updated" if report.readme_updated else ""
        print(f"{counts} (replaced tasks/, tasks.sha256 rewritten{readme})")
    else:
        print(f"{counts}: tasks/ already up to date, nothing written")
    return EXIT_OK


def cmd_update(args: argparse.Namespace) -> int:
    from harbor_openenv.cli.update import (
        UpdateError,
        conflict_advice,
        find_conflicts,
        run_copier_update,
    )

    repo = args.repo.resolve()
    try:
        run_copier_update(repo, args.vcs_ref, args.data or [])
    except UpdateError as exc:
        raise UsageError(str(exc)) from None
    conflicts = find_conflicts(repo)
    for line in conflicts:
        print(f"conflict: {line}", file=sys.stderr)
    if conflicts:
        print(conflict_advice(len(conflicts)), file=sys.stderr)
        return EXIT_PROBLEMS
    print("updated without conflicts; rebuild the image", file=sys.stderr)
    return EXIT_OK


# -- wheels --------------------------------------------------------------------------------------


def cmd_wheels(args: argparse.Namespace) -> int:
    from harbor_openenv.images.wheels import WheelsError, fill_wheels

    try:
        fill_wheels(
            args.repo.resolve(),
            args.python,
            args.platform,
            say=lambda line: print(line, file=sys.stderr),
        )
    except WheelsError as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


def cmd_harnesses_fill(args: argparse.Namespace) -> int:
    import platform

    from harbor_openenv.harness.base import HarnessError
    from harbor_openenv.harness.cache import BUILDS, RUNTIMES, fill, host_platforms

    # all: a runtime (node) before the harnesses on it, which then find it filled
    names = args.names or sorted(
        [*BUILDS, *RUNTIMES], key=lambda name: (name in BUILDS and bool(BUILDS[name].runtime), name)
    )
    try:
        platforms = tuple(args.platform or host_platforms(platform.machine()))
        for name in names:
            sizes = fill(args.folder, name, platforms)
            for where, size in sizes.items():
                version = BUILDS[name].version if name in BUILDS else "from Debian"
                print(f"{name} {version} {where}: {size / 1e6:.1f} MB")
    except HarnessError as exc:
        raise UsageError(str(exc)) from None
    print(f"point HARBOR_OPENENV_HARNESS_CACHE at {args.folder.resolve()}")
    return EXIT_OK


# -- entry point ---------------------------------------------------------------------------------

_DATASET_HELP = "a dataset folder: tasks at its root or under its tasks/ folder"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harbor-openenv",
        description="Validate, check and serve Harbor task datasets as an OpenEnv environment.",
    )
    parser.add_argument("--version", action="version", version=f"harbor-openenv {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser(
        "validate",
        help="parse every task and report its kind, image and timeouts",
        description="Parse every task.toml and report each task's kind, image source, timeouts"
        " and problems. Exits 1 when a task is invalid; unsupported and text-only tasks are"
        " reported but do not fail. Needs no Docker.",
    )
    validate.add_argument("dataset", type=Path, metavar="DATASET", help=_DATASET_HELP)
    validate.add_argument("--json", action="store_true", help="print a JSON report instead")
    validate.set_defaults(run=cmd_validate)

    check = commands.add_parser(
        "check",
        help="run a no-op and an oracle episode of every runnable task in Docker",
        description="For every runnable task, run a no-op episode (reset, evaluate) and an oracle"
        " episode (reset, solve, evaluate) in containers; a multi-step task is evaluated step"
        " after step (the oracle solving each) until the episode ends. Exits 1 when an oracle"
        " does not score 1.0, a no-op scores 1.0, a verifier writes no reward, or a task is"
        " invalid; text-only and unsupported tasks are skipped unless named with --task.",
    )
    check.add_argument("dataset", type=Path, metavar="DATASET", help=_DATASET_HELP)
    check.add_argument("--jobs", "-j", type=int, default=2, help="episodes at once (default 2)")
    check.add_argument(
        "--json", metavar="FILE", help="also write the results as JSON to FILE ('-': stdout)"
    )
    check.add_argument(
        "--task", action="append", metavar="ID", help="check only this task (repeatable)"
    )
    check.set_defaults(run=cmd_check)

    images = commands.add_parser(
        "images",
        help="build or pull every task image ahead of serving; push them to a registry",
        usage="harbor-openenv images [-h] [build|push] [DATASET] [--jobs N] [--registry R]",
        description="build (the default): build (environment/Dockerfile) or pull (docker_image)"
        " the image of every runnable task, and any separate verifier's image, JOBS at once, so"
        " no reset waits for one. Prints a line per image as it is ready and a table at the end;"
        " exits 1 when an image fails or a task is invalid. push: the same, then tag each task's"
        " image under --registry HOST/PREFIX (as HOST/PREFIX/task:<image id>), push it, and write"
        " images.lock beside the tasks folder (only when every image pushed): a server with that"
        " lock pulls those images by digest and never builds them.",
    )
    images.add_argument(
        "words",
        nargs="*",
        metavar="[build|push] [DATASET]",
        help=_DATASET_HELP + " (default: $HARBOR_OPENENV_TASKS or the current folder);"
        " a dataset folder named build or push is written ./build",
    )
    images.add_argument("--jobs", "-j", type=int, default=2, help="images at once (default 2)")
    images.add_argument(
        "--registry",
        metavar="HOST/PREFIX",
        help="push: the registry and path to push under, e.g. 127.0.0.1:5000/envs/my-env",
    )
    images.set_defaults(run=cmd_images)

    serve = commands.add_parser(
        "serve",
        help="run the environment server on a local dataset (no image build)",
        description="Serve TASKS (default: $HARBOR_OPENENV_TASKS or the current folder) with"
        " uvicorn. HARBOR_OPENENV_* variables apply as in the image.",
    )
    serve.add_argument("tasks", type=Path, nargs="?", metavar="TASKS", help=_DATASET_HELP)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="read the orchestration token enabling evaluate/solve from FILE's first line"
        " (or set HARBOR_OPENENV_ORCHESTRATION_TOKEN); --token TOKEN is refused, since a command"
        " line is visible to every user of the host (ps)",
    )
    serve.add_argument("--token", help=argparse.SUPPRESS)  # refused with the reason
    serve.set_defaults(run=cmd_serve)

    sync = commands.add_parser(
        "sync-tasks",
        help="re-sync an environment repo's tasks/ from a dataset",
        description="Make tasks/ of an environment repo a byte-for-byte copy of DATASET and"
        " rewrite tasks.sha256 and the README's dataset summary; reports added, changed and"
        " removed tasks. Refuses when tasks/ has local changes (files differing from"
        " tasks.sha256) unless --force, and refuses datasets with invalid tasks unless"
        " --allow-invalid.",
    )
    sync.add_argument(
        "dataset",
        nargs="?",
        metavar="DATASET",
        help="a dataset folder (tasks at its root or under tasks/), a Harbor registry reference"
        " name@version (with --registry), or hf://owner/name[@revision]; default: re-resolve"
        " the reference recorded in tasks.source.json",
    )
    sync.add_argument(
        "--registry",
        default="",
        help="registry file or URL for name@version (default: the recorded one)",
    )
    sync.add_argument(
        "--repo", type=Path, default=Path("."), help="the environment repo (default: here)"
    )
    sync.add_argument(
        "--allow-local-repos",
        action="store_true",
        help="a registry's tasks may come from git repositories on this machine (a path or"
        " file:// as git_url); refused by default: a registry could name any repository here",
    )
    sync.add_argument("--force", action="store_true", help="discard local changes to tasks/")
    sync.add_argument("--dry-run", action="store_true", help="report, write nothing")
    sync.add_argument(
        "--allow-invalid",
        action="store_true",
        help="keep invalid tasks (copied as they are, refused at reset with their reasons)",
    )
    sync.set_defaults(run=cmd_sync_tasks)

    update = commands.add_parser(
        "update",
        help="copier update an environment repo, failing on conflicts copier leaves",
        description="Run `copier update --trust --defaults --conflict inline` in REPO, then fail"
        " (exit 1) when unmerged files, conflict markers or .rej files remain, which copier"
        " itself exits 0 on. Change an answer with -d KEY=VALUE (e.g. -d runtime_pin=...).",
    )
    update.add_argument("repo", type=Path, nargs="?", default=Path("."), metavar="REPO")
    update.add_argument("--vcs-ref", help="template version to update to (default: newest tag)")
    update.add_argument("-d", "--data", action="append", metavar="KEY=VALUE")
    update.set_defaults(run=cmd_update)

    wheels = commands.add_parser(
        "wheels",
        help="fill an environment repo's wheels/ for an offline image build",
        description="Put every wheel the image installs (pyproject.toml's dependencies and"
        " runtime group) into wheels/, for the base image's Python (asked from the image with"
        " Docker, else read from its tag), so `docker build --network none` works. Builds with"
        " `pip wheel` and a Python of that version found here; --platform downloads published"
        " wheels only (pip download --only-binary=:all:) instead.",
    )
    wheels.add_argument(
        "--repo", type=Path, default=Path("."), help="the environment repo (default: here)"
    )
    wheels.add_argument("--python", metavar="X.Y", help="the image's Python version")
    wheels.add_argument(
        "--platform",
        action="append",
        metavar="TAG",
        help="download wheels for this platform tag (repeatable), e.g. manylinux_2_28_x86_64",
    )
    wheels.set_defaults(run=cmd_wheels)

    harnesses = commands.add_parser(
        "harnesses",
        help="fill the harness cache the inside harnesses run from",
        description="The harness cache (HARBOR_OPENENV_HARNESS_CACHE): each inside harness's"
        " pinned build, fetched here with npm pack and put read-only into every task container"
        " by the server.",
    )
    harness_commands = harnesses.add_subparsers(dest="action", required=True, metavar="ACTION")
    fill = harness_commands.add_parser(
        "fill",
        help="fetch harnesses into FOLDER",
        description="Fetch each NAMEd harness (default: all) into FOLDER/NAME with npm pack, at"
        " the version this runtime pins, for this machine's architecture (glibc and musl builds)"
        " or the npm platforms --platform names; what was there is replaced.",
    )
    fill.add_argument("folder", type=Path, metavar="FOLDER")
    fill.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="a harness, e.g. claude-code, gemini-cli or qwen-code (these two fill node, their"
        " runtime, too), or tmux (terminus-2's, from Debian's packages)",
    )
    fill.add_argument(
        "--platform",
        action="append",
        metavar="PLATFORM",
        help="an npm platform to fill (repeatable), e.g. linux-x64 or linux-arm64-musl",
    )
    fill.set_defaults(run=cmd_harnesses_fill)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns (and, as a script, exits with) the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
        return status
    except UsageError as exc:
        print(f"harbor-openenv {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\nharbor-openenv {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
