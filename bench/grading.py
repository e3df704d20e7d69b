"""Grading an agent you cannot trust: evaluate in pristine mode (a fresh container of the task's
image, the workdir copied in) against evaluate in the shared container, and the tamper report's
cost per evaluate, in one run. A benchmark, not a test: it prints figures and whether each goal
(pristine <= 1.5x; the report <= 5 ms on a small diff) is met. Run from the repository root:

    .venv/bin/python bench/grading.py [--reps 8] [--files 10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import docker

from harbor_openenv.client.launch import Server
from harbor_openenv.episode.tamper import classify

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


def report_ms(files: int) -> tuple[float, float]:
    """The tamper report (the engine's diff and the classification) on a container with a small
    change and on one with ``files`` files added in site-packages, median ms of five each."""
    client = docker.from_env()
    timings = []
    for count in (3, files):
        container = client.containers.run(
            "debian:bookworm-slim", ["sleep", "600"], detach=True, network_mode="none"
        )
        try:
            script = (
                "d=/usr/local/lib/python3.11/site-packages/pkg && mkdir -p $d && cd $d &&"
                f" i=0; while [ $i -lt {count} ]; do : > f$i.py; i=$((i+1)); done"
            )
            container.exec_run(["sh", "-c", script])
            samples = []
            for _ in range(5):
                start = time.perf_counter()
                changes = [(c["Path"], c["Kind"]) for c in container.diff()]
                classify(changes, "/app")
                samples.append((time.perf_counter() - start) * 1000)
            timings.append(statistics.median(samples))
        finally:
            container.remove(force=True)
    return timings[0], timings[1]


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
    small, big = report_ms(args.files)
    ratio = statistics.median(pristine) / statistics.median(shared)
    print(f"evaluate, shared container: median {statistics.median(shared):.0f} ms")
    print(
        f"evaluate, pristine: median {statistics.median(pristine):.0f} ms = {ratio:.2f}x"
        f" (goal <= 1.5x: {'met' if ratio <= 1.5 else 'missed'})"
    )
    print(
        f"tamper report, small diff: {small:.1f} ms (goal <= 5 ms: "
        f"{'met' if small <= 5 else 'missed'}); {args.files} files: {big:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
