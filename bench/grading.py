"""Grading an agent you cannot trust: evaluate in pristine mode (a fresh container of the task's
image, the workdir copied in) against evaluate in the shared container, and the tamper report's
cost per evaluate, asked of the keeper and of the engine, against a keeper round trip that does
nothing, in one run. A benchmark, not a test: it prints figures and whether each goal
(pristine <= 1.5x; the report <= 5 ms on a small diff) is met. Run from the repository root:

    .venv/bin/python bench/grading.py [--reps 8] [--files 10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker

from harbor_openenv.client.launch import Server
from harbor_openenv.episode import tamper
from harbor_openenv.sandbox import Sandbox, remove_containers
from harbor_openenv.sandbox.backend import DockerBackend
from harbor_openenv.sandbox.spec import ContainerSpec

ROOT = Path(__file__).resolve().parents[1]
TASK = "hello-world"


def evaluates_ms(tasks: Path, reps: int, **env: str) -> list[float]:
    """The wall time of each evaluate (after the agent's fix) over ``reps`` episodes."""
    times = []
    with Server(tasks, **env) as server, server.client() as client:
        for _ in range(reps):
            client.reset(task_id=TASK)
            client.solve()
            start = time.perf_counter()
            result = client.evaluate()
            times.append((time.perf_counter() - start) * 1000)
            assert result.reward == 1.0, result.observation
    return times


def report_ms(files: int) -> dict[str, tuple[float, float]]:
    """The tamper report's change list on a container with a small change and on one with
    ``files`` files added in site-packages, median ms of five each: asked of the keeper (its walk
    of what the container wrote), of the engine (its diff), and a keeper request that does
    nothing (the round trip both keeper figures include), each with the classification."""
    client = docker.from_env()
    owner = f"bench-grading-{time.monotonic_ns()}"
    backend = DockerBackend(lambda: client, owner=owner)
    skip = tamper.skipped("/app")
    ways: dict[str, Callable[[Sandbox], object]] = {
        "round trip": lambda box: box._ask(["nothing"]),
        "keeper": lambda box: tamper.classify(box.changes_since_mark(skip) or [], "/app"),
        "engine": lambda box: tamper.classify(box.changes() or [], "/app"),
    }
    timings: dict[str, list[float]] = {way: [] for way in ways}
    try:
        for count in (3, files):
            box = backend.start(ContainerSpec("python:3.12-slim", network="none"), task_id="b")
            script = (
                "d=/usr/local/lib/python3.11/site-packages/pkg && mkdir -p $d && cd $d &&"
                f" i=0; while [ $i -lt {count} ]; do : > f$i.py; i=$((i+1)); done"
            )
            box.exec_root(script, timeout_s=600)
            samples: dict[str, list[float]] = {way: [] for way in ways}
            for _ in range(5):
                for way, call in ways.items():  # interleaved: the same load for each
                    start = time.perf_counter()
                    call(box)
                    samples[way].append((time.perf_counter() - start) * 1000)
            for way in ways:
                timings[way].append(statistics.median(samples[way]))
            box.remove()
    finally:
        remove_containers(client, owner=owner)
    return {way: (small, big) for way, (small, big) in timings.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tasks = ROOT / "examples" / "dataset" / "tasks"
        shared, pristine = [], []
        for half in range(2):  # alternate which mode runs first
            first, second = ("shared", "pristine") if half == 0 else ("pristine", "shared")
            for mode in (first, second):
                env = {"HARBOR_OPENENV_PRISTINE_VERIFIER": TASK} if mode == "pristine" else {}
                (pristine if mode == "pristine" else shared).extend(
                    evaluates_ms(tasks, args.reps // 2 or 1, **env)
                )
        del tmp
    report = report_ms(args.files)
    ratio = statistics.median(pristine) / statistics.median(shared)
    print(f"evaluate, shared container: median {statistics.median(shared):.0f} ms")
    print(
        f"evaluate, pristine: median {statistics.median(pristine):.0f} ms = {ratio:.2f}x"
        f" (goal <= 1.5x: {'met' if ratio <= 1.5 else 'missed'})"
    )
    trip = report["round trip"]
    for way in ("keeper", "engine"):
        small, big = report[way]
        print(
            f"tamper report by the {way}, small diff: {small:.1f} ms"
            f" ({small - trip[0]:.1f} ms past a keeper round trip of {trip[0]:.1f} ms;"
            f" {small / statistics.median(shared):.1%} of a shared evaluate);"
            f" {args.files} files: {big:.1f} ms"
        )
    keeper, engine = report["keeper"][0], report["engine"][0]
    print(
        f"keeper / engine, small diff: {keeper / engine:.3f}x"
        f" (goal <= 5 ms: {'met' if keeper <= 5 else 'missed'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
