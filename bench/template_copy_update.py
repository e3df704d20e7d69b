"""Benchmark: the template's dataset copy and `copier update` on a big dataset, against baselines.

Generates a dataset of 2,000 tasks and about 200 MB, then measures, in one run:

- the dataset copy inside `copier copy` (copy + tasks.sha256, as the copy task reports it)
  against a plain `cp -r` of the same folder (the faster of one run before and one after):
  goal at most 1.5x;
- the whole `copier copy` against that dataset copy: goal at most 2 s more (a `copier copy` of a
  one-task dataset is printed beside it: copier's own cost, which this template cannot lower);
- `copier update` (v0.1.0 to the working tree) of that environment against an update of the same
  environment rendered from a one-task dataset: goal at most 2x, and under 300 MB peak memory.

Each measure runs beside its baseline in one round; rounds repeat (3 by default) and every ratio
printed is the median over the rounds, so a busy moment of the machine moves one round only.

Usage: .venv/bin/python bench/template_copy_update.py [--tasks 2000] [--mb 200]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from _template_helpers import NEW, OLD, commit_all, git, tagged_template_clone  # noqa: E402

TASK_TOML = "[verifier]\ntimeout_sec = 60.0\n\n[environment]\nbuild_timeout_sec = 120.0\n"


def make_dataset(root: Path, tasks: int, megabytes: int) -> int:
    """``tasks`` task folders holding ``megabytes`` MB in all (one data file each)."""
    per_task = megabytes * 1_000_000 // tasks
    total = 0
    for i in range(tasks):
        task = root / "tasks" / f"group-{i // 100:02d}" / f"task-{i:05d}"
        for folder in ("environment", "tests", "solution"):
            (task / folder).mkdir(parents=True)
        (task / "task.toml").write_text(TASK_TOML)
        (task / "instruction.md").write_text(f"Task {i}: make the tests pass.\n")
        (task / "environment" / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\n")
        (task / "environment" / "data.bin").write_bytes(os.urandom(per_task))
        for script in (task / "tests" / "test.sh", task / "solution" / "solve.sh"):
            script.write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
            script.chmod(0o755)
        total += per_task
    return total


# Runs a command and prints the peak resident memory of it and its children, in KB, to stderr.
_PEAK = (
    "import resource, subprocess, sys;"
    "r = subprocess.run(sys.argv[1:]);"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr);"
    "sys.exit(r.returncode)"
)


def timed(command: list[str], cwd: Path | None = None) -> tuple[float, int, str]:
    """Wall seconds, peak resident MB of the command and its children, and its output.

    Dirty pages of the previous steps are flushed first, so no step pays for another's writeback.
    """
    subprocess.run(["sync"], check=True)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", _PEAK, *command], cwd=cwd, capture_output=True, text=True
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    *rest, peak = result.stderr.rstrip().splitlines()
    return elapsed, int(peak) // 1024, "\n".join(rest) + result.stdout


def copier_copy(template: Path, ref: str, dataset: Path, destination: Path):
    return timed(
        [sys.executable, "-m", "copier", "copy", "--trust", "--defaults", "--quiet"]
        + ["--vcs-ref", ref, "-d", f"dataset_path={dataset}", str(template), str(destination)]
    )


def copier_update(repo: Path) -> tuple[float, int]:
    """Time and peak memory of `copier update` to NEW."""
    elapsed, peak, _ = timed(
        [sys.executable, "-m", "copier", "update", "--trust", "--defaults", "--quiet"]
        + ["--vcs-ref", NEW],
        cwd=repo,
    )
    if "<<<<<<<" in (repo / "pyproject.toml").read_text():
        raise SystemExit("the update left conflict markers")
    return elapsed, peak


def rendered_repo(template: Path, dataset: Path, destination: Path) -> Path:
    copier_copy(template, OLD, dataset, destination)
    git("init", "-q", "-b", "main", cwd=destination)
    commit_all(destination, "rendered")
    return destination


def one_round(work: Path, template: Path, big: Path, tiny: Path) -> dict[str, float]:
    """Every measure once, each beside its baseline: cp -r before and after the copy (the faster
    one is the baseline), the tiny dataset's update right before the big one's."""
    work.mkdir()
    cp_before, _, _ = timed(["cp", "-r", str(big / "tasks"), str(work / "cp-copy-1")])
    tiny_copy, _, _ = copier_copy(template, NEW, tiny, work / "rendered-tiny")
    copy_seconds, copy_peak, output = copier_copy(template, NEW, big, work / "rendered")
    found = re.search(r"into tasks/ in ([0-9.]+) s", output)
    if found is None:
        raise SystemExit(f"the copy task did not report its time:\n{output[-2000:]}")
    inner = float(found.group(1))
    cp_after, _, _ = timed(["cp", "-r", str(big / "tasks"), str(work / "cp-copy-2")])
    repo_big = rendered_repo(template, big, work / "env-big")
    repo_tiny = rendered_repo(template, tiny, work / "env-tiny")
    update_tiny, peak_tiny = copier_update(repo_tiny)
    update_big, peak_big = copier_update(repo_big)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    measures = {
        "cp": min(cp_before, cp_after),
        "inner": inner,
        "copy": copy_seconds,
        "copy_peak": copy_peak,
        "tiny_copy": tiny_copy,
        "update_big": update_big,
        "update_tiny": update_tiny,
        "peak_big": peak_big,
        "peak_tiny": peak_tiny,
    }
    print(
        "round: "
        + ", ".join(f"{name} {value:.2f}" for name, value in measures.items())
        + f"; copy ratio {inner / measures['cp']:.2f}x, update ratio"
        f" {update_big / update_tiny:.2f}x",
        flush=True,
    )
    return measures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-template-") as tmp:
        work = Path(tmp)
        big, tiny = work / "big-dataset", work / "tiny-dataset"
        size = make_dataset(big, args.tasks, args.mb)
        make_dataset(tiny, 1, 1)
        template = tagged_template_clone(work / "template")
        print(f"dataset: {args.tasks} tasks, {size / 1e6:.0f} MB of task data")
        # Unmeasured: the first render builds the runtime's wheel (and its helper) in the clone.
        copier_copy(template, NEW, tiny, work / "warm-up")
        rounds = [one_round(work / f"round-{n}", template, big, tiny) for n in range(args.rounds)]

    def median(ratio) -> float:
        return statistics.median(ratio(r) for r in rounds)

    rows = [
        (
            "dataset copy inside copier copy / cp -r",
            median(lambda r: r["inner"] / r["cp"]),
            "<= 1.5x",
        ),
        ("copier copy - its dataset copy (s)", median(lambda r: r["copy"] - r["inner"]), "<= 2 s"),
        ("  of which copier's own cost (tiny dataset, s)", median(lambda r: r["tiny_copy"]), "-"),
        (
            "copier update, big / tiny dataset",
            median(lambda r: r["update_big"] / r["update_tiny"]),
            "<= 2x",
        ),
        (
            "copier update peak memory, big dataset (MB)",
            max(r["peak_big"] for r in rounds),
            "< 300 MB",
        ),
    ]
    print(f"median of {len(rounds)} interleaved rounds (peak memory: the highest)")
    width = max(len(name) for name, _, _ in rows)
    for name, value, goal in rows:
        print(f"{name:<{width}}  {value:8.2f}  goal {goal}")


if __name__ == "__main__":
    main()
