"""OpenEnv's Task API on a 10,000-task dataset, against a ``/health`` round trip in the same run.

Builds the dataset in a temporary folder (``group-000/`` … ``group-099/``: 101 splits), starts
the server and times each route over one HTTP connection: medians of ``--reps`` requests, each
ratio over the median ``/health`` round trip. ``get_task`` is timed cold (a task whose task.toml
the server has not parsed yet) and warm (the same task again). A benchmark, not a test: it never
fails on a missed goal, it says so. Run from the repository root:

    .venv/bin/python bench/task_api.py [--tasks 10000] [--reps 200]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from run import big_dataset

from harbor_openenv.client.launch import Server

ENV = "harbor_openenv"


def medians_ms(calls: dict[str, Callable[[int], httpx.Response]], reps: int) -> dict[str, float]:
    """Each call's median in ms, the calls interleaved so that the machine's load falls on all."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for rep in range(reps):
        for name, call in calls.items():
            start = time.perf_counter()
            call(rep).raise_for_status()
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    rows: list[tuple[str, float, float | None, str]] = []
    with tempfile.TemporaryDirectory() as scratch:
        tasks = big_dataset(Path(scratch), args.tasks)
        server = Server(tasks)
        try:
            with httpx.Client(base_url=server.url, timeout=600) as http:
                route = f"/{ENV}"

                def post(path: str, **body: object) -> httpx.Response:
                    return http.post(f"{route}/{path}", json=body)

                cold = random.Random(0).sample(range(args.tasks), args.reps)
                group = f"group-{(args.tasks - 1) // 200:03d}"  # one in the middle
                splits = f"splits ({-(-args.tasks // 100) + 1})"
                goals = {
                    "num_tasks('all')": 3.0,
                    f"num_tasks({group!r})": 3.0,
                    splits: 3.0,
                    "get_task, cold": 3.0,
                    "get_task, warm": 3.0,
                    "task_range, 10 tasks": 5.0,
                }
                medians = medians_ms(
                    {
                        "/health": lambda _: http.get("/health"),
                        "num_tasks('all')": lambda _: post("num_tasks", split="all"),
                        f"num_tasks({group!r})": lambda _: post("num_tasks", split=group),
                        splits: lambda _: http.get(f"{route}/splits"),
                        "get_task, cold": lambda r: post("task", split="all", index=cold[r]),
                        "get_task, warm": lambda r: post("task", split="all", index=cold[0]),
                        "task_range, 10 tasks": lambda r: post(
                            "task_range", split="all", start=r, stop=r + 10
                        ),
                    },
                    args.reps,
                )
                health = medians.pop("/health")
                for name, ms in medians.items():
                    ok = "met" if ms / health <= goals[name] else "NOT MET"
                    rows.append((name, ms, ms / health, f"<= {goals[name]:g}x: {ok}"))
                for label in ("list_tasks('all'), first", "list_tasks('all'), again"):
                    start = time.perf_counter()
                    post("tasks", split="all").raise_for_status()
                    rows.append((label, (time.perf_counter() - start) * 1000, None, "one request"))
        finally:
            server.stop()
    print(f"{args.tasks:,} tasks; /health round trip {health:.2f} ms (median of {args.reps})")
    print(f"{'route':<28} {'median':>10} {'/ health':>9}  goal")
    for name, ms, ratio, goal in rows:
        shown = f"{ratio:.2f}x" if ratio is not None else ""
        print(f"{name:<28} {ms:>7.2f} ms {shown:>9}  {goal}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
