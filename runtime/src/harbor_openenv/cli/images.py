"""``images [build|push]``: make every image the tasks' episodes start, ``--jobs`` at once, as
``images/plan.py`` plans them; with push, push them and write images.lock."""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from harbor_openenv.cli.common import (
    EXIT_OK,
    EXIT_PROBLEMS,
    SERVER_EXTRA,
    UsageError,
    open_dataset,
    print_table,
    server_settings,
)


@dataclass
class ImageResult:
    """What became of one image: present, built, pulled or failed, and with push its digest."""

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
    settings = server_settings()
    dataset = open_dataset(dataset_path or settings.tasks or Path("."))
    try:
        import docker

        from harbor_openenv.events import configure_images
        from harbor_openenv.images.lock import (
            LOCK_NAME,
            LockError,
            push_image,
            read_lock,
            write_lock,
        )
        from harbor_openenv.images.plan import plan_images
        from harbor_openenv.images.resolver import ImageError, ImageResolver
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
    plan = plan_images(dataset, pins)
    for line in plan.skipped:
        print(f"skipped {line}", file=sys.stderr)
    results = {ref: ImageResult(ref, image.tasks) for ref, image in plan.images.items()}
    try:
        client = engine.connect()
    except Exception as exc:
        raise UsageError(f"cannot reach the Docker engine: {exc}") from None
    configure_images()
    resolver = ImageResolver(client, build_network=settings.build_network)
    total = len(plan.images)
    print(f"{total} image(s) for {len(dataset)} task(s), {args.jobs} at once", file=sys.stderr)

    def make_one(ref: str) -> ImageResult:
        image, result = plan.images[ref], results[ref]
        started = time.monotonic()
        try:
            present = resolver.has(ref)
            image.make(resolver)
            result.status = "present" if present else ("pulled" if image.pulls else "built")
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

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=args.jobs, thread_name_prefix="images") as pool:
        futures = [pool.submit(make_one, ref) for ref in plan.images]
        for done, future in enumerate(as_completed(futures), 1):
            result = future.result()
            what = result.status if result.error is None else f"FAILED: {result.error}"
            print(
                f"[{done}/{total}] {result.image} ({', '.join(result.tasks[:3])}"
                f"{' ...' if len(result.tasks) > 3 else ''}): {what} in {result.seconds:.1f} s",
                file=sys.stderr,
            )
        if action == "push":
            to_push = plan.to_push(failed={ref for ref, r in results.items() if r.error})
            futures = [pool.submit(push_one, ref) for ref in to_push]
            for done, future in enumerate(as_completed(futures), 1):
                result = future.result()
                what = f"FAILED: {result.error}" if result.error else f"pushed {result.pushed}"
                print(f"[push {done}/{len(to_push)}] {result.image}: {what}", file=sys.stderr)
    _report(list(results.values()), pushing=action == "push")
    failed = [r for r in results.values() if r.error]
    problems = [*plan.problems, *(f"{r.image} ({', '.join(r.tasks)}): {r.error}" for r in failed)]
    for line in problems:
        print(line)
    invalid = len(plan.problems)
    print(
        f"{total} image(s) in {time.monotonic() - started:.1f} s: {total - len(failed)} ready,"
        f" {len(failed)} failed" + (f", {invalid} invalid task(s)" if invalid else "")
    )
    if action == "push":
        if problems:
            print(f"{lock} not written: every image must push first")
        else:
            assert registry is not None
            pushed = {ref: r.pushed for ref, r in results.items() if r.pushed}
            entries = plan.lock(pushed)
            write_lock(lock, registry, entries)
            print(f"wrote {lock}: {len(entries)} task(s) pinned to {registry}")
    return EXIT_PROBLEMS if problems else EXIT_OK


def _report(results: list[ImageResult], *, pushing: bool) -> None:
    """The table of every image: its tasks, status and seconds, and with push its digest."""
    rows = [["IMAGE", "TASKS", "STATUS", "SECONDS", *(["PUSHED"] if pushing else [])]]
    rows += [
        [
            r.image,
            str(len(r.tasks)),
            r.status,
            f"{r.seconds:.1f}",
            *([r.pushed or "-"] if pushing else []),
        ]
        for r in results
    ]
    if len(rows) > 1:
        print_table(rows, sys.stdout)
