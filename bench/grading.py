"""Grading an agent you cannot trust: evaluate in pristine mode (a fresh container of the task's
image, the workdir copied in) against evaluate in the shared container, and the tamper report's
cost per evaluate, asked of the keeper and of the engine, against a keeper round trip that does
nothing, in one run. A benchmark, not a test: it prints figures and whether each goal
(pristine <= 1.5x; the report <= 5 ms on a small diff) is met. Run from the repository root:

    .venv/bin/python bench/grading.py [--reps 8] [--files 10000] [--pause 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import docker

from harbor_openenv.client.launch import Server
from harbor_openenv.episode import tamper
from harbor_openenv.sandbox import Sandbox, remove_containers
from harbor_openenv.sandbox.spec import ContainerSpec
from harbor_openenv.sandbox.starter import DockerStarter

ROOT = Path(__file__).resolve().parents[1]
TASK = "hello-world"


def evaluates_ms(tasks: Path, reps: int, pause: float) -> tuple[list[float], list[float]]:
    """The wall time of each evaluate (after the agent's fix and ``pause`` seconds, the agent's
    work: the spare is readied meanwhile) in the shared container and in pristine mode, one
    server each, open together: an episode of each per round, in turn which goes first, so both
    meet the same load."""
    times: tuple[list[float], list[float]] = ([], [])
    with (
        Server(tasks) as shared,
        Server(tasks, HARBOR_OPENENV_PRISTINE_VERIFIER=TASK) as pristine,
        shared.client() as one,
        pristine.client() as other,
    ):
        for rep in range(reps):
            order = [(0, one), (1, other)] if rep % 2 == 0 else [(1, other), (0, one)]
            for mode, client in order:
                client.reset(task_id=TASK)
                client.solve()
                time.sleep(pause)
                start = time.perf_counter()
                result = client.evaluate()
                times[mode].append((time.perf_counter() - start) * 1000)
                assert result.reward == 1.0, result.observation
    return times


def report_ms(files: int) -> dict[str, dict[str, float]]:
    """The tamper report (:func:`tamper.changes` and the classification) by scene: a small
    change, ``files`` files added in site-packages, and a deleted program (which the keeper's
    walk cannot see: the engine's list is asked too), median ms of five each: as evaluate asks it
    (the keeper's walk), of the engine alone (its diff), and a keeper request that does nothing
    (the round trip the keeper's figure includes)."""
    client = docker.from_env()
    owner = f"bench-grading-{time.monotonic_ns()}"
    backend = DockerStarter(lambda: client, owner=owner)
    ways: dict[str, Callable[[Sandbox], object]] = {
        "round trip": lambda box: box._ask(["nothing"]),
        "keeper": lambda box: tamper.classify(tamper.changes(box) or [], "/app"),
        "engine": lambda box: tamper.classify(box.changes() or [], "/app"),
    }
    site = "/usr/local/lib/python3.12/site-packages/pkg"
    scenes = {
        "small diff": _add_files(site, 3),
        f"{files} files": _add_files(site, files),
        "a deleted program": "rm /usr/bin/xargs",
    }
    timings: dict[str, dict[str, float]] = {}
    try:
        for scene, script in scenes.items():
            box = backend.start(ContainerSpec("python:3.12-slim", network="none"), task_id="b")
            box.exec_root(script, timeout_s=600)
            samples: dict[str, list[float]] = {way: [] for way in ways}
            for _ in range(5):
                for way, call in ways.items():  # interleaved: the same load for each
                    start = time.perf_counter()
                    call(box)
                    samples[way].append((time.perf_counter() - start) * 1000)
            timings[scene] = {way: statistics.median(samples[way]) for way in ways}
            box.remove()
    finally:
        remove_containers(client, owner=owner)
    return timings


def _add_files(folder: str, count: int) -> str:
    return (
        f"mkdir -p {folder} && cd {folder} &&"
        f" i=0; while [ $i -lt {count} ]; do : > f$i.py; i=$((i+1)); done"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between fix and evaluate")
    args = parser.parse_args()
    tasks = ROOT / "examples" / "dataset" / "tasks"
    shared, pristine = evaluates_ms(tasks, args.reps, args.pause)
    report = report_ms(args.files)
    base = statistics.median(shared)
    ratio = statistics.median(pristine) / base
    print(f"evaluate, shared container: median {base:.0f} ms")
    print(
        f"evaluate, pristine: median {statistics.median(pristine):.0f} ms = {ratio:.2f}x"
        f" (goal <= 1.5x: {'met' if ratio <= 1.5 else 'missed'})"
    )
    for scene, ways in report.items():
        keeper, engine, trip = ways["keeper"], ways["engine"], ways["round trip"]
        print(
            f"tamper report, {scene}: {keeper:.1f} ms ({keeper - trip:.1f} ms past a keeper"
            f" round trip of {trip:.1f} ms; {keeper / base:.1%} of a shared evaluate);"
            f" the engine's diff alone: {engine:.1f} ms"
        )
    small = report["small diff"]["keeper"]
    print(f"tamper report, small diff: goal <= 5 ms {'met' if small <= 5 else 'missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
