"""The runtime's overhead against raw docker-py on the same engine, measured in one run.

The exec channel's rows come from ``exec_channel.py`` beside this script.

Prints one table of ratios (runtime ÷ raw floor) with the issue's goals. A benchmark, not a test:
it never fails on a missed goal, it says so. Run from the repository root:

    .venv/bin/python bench/run.py [--reps 10] [--sessions 32]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import docker
from exec_channel import TASK, TASKS, channel_rows, tests_archive  # bench/, beside this script

from harbor_openenv.client import driver
from harbor_openenv.client.launch import Server
from harbor_openenv.models import HarborAction

TOKEN = "bench-token"
# Harbor as .ci/interop-tools.sh installs it (HARBOR_OPENENV_HARBOR_VENV), else on PATH.
_HARBOR_VENV = (
    os.environ.get("HARBOR_OPENENV_HARBOR_VENV")
    or Path.home() / ".cache" / "harbor-openenv" / "harbor-venv"
)
HARBOR = Path(os.environ.get("HARBOR_BIN") or Path(_HARBOR_VENV, "bin", "harbor"))


def median_s(run: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_server(tasks: Path, **env: str) -> Server:
    """The runtime server as a trainer meets it: uvicorn in its own process, on 127.0.0.1."""
    return Server(tasks, token=TOKEN, **env)


def rss_mib(server: Server) -> float:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("VmRSS:")).split()[1]) / 1024


def raw_floor(client: docker.DockerClient, image: str, reps: int) -> dict[str, float]:
    """The same work done with docker-py directly: start, exec, stage tests/ and run test.sh."""
    containers = []

    def start():
        container = client.containers.run(
            image, ["sh", "-c", "sleep infinity"], detach=True, labels={"bench-raw": "1"}
        )
        container.exec_run("true")
        containers.append(container)

    archive = tests_archive()

    def evaluate():
        container = containers[-1]
        container.exec_run("sh -c 'mkdir -p /tests /logs/verifier'")
        container.put_archive("/tests", archive)
        container.exec_run("bash -c '/tests/test.sh > /logs/verifier/test-stdout.txt 2>&1'")
        stream, _ = container.get_archive("/logs/verifier")
        b"".join(stream)

    try:
        start_s = median_s(start, reps)
        exec_s = median_s(lambda: containers[-1].exec_run("true"), reps * 5)
        evaluate_s = median_s(evaluate, reps)
        remove_s = median_s(lambda: containers.pop().remove(force=True), reps)
    finally:
        for container in containers:
            container.remove(force=True)
    return {"start": start_s, "exec": exec_s, "evaluate": evaluate_s, "remove": remove_s}


def runtime_figures(server: Server, reps: int) -> dict[str, float]:
    resets, execs, evaluates, episodes = [], [], [], []
    with server.client() as env:
        env.reset(task_id=TASK)  # warm: the image is built and cached
        env.evaluate()
        for _ in range(reps):
            begin = time.perf_counter()
            env.reset(task_id=TASK)
            resets.append(time.perf_counter() - begin)
            for _ in range(5):
                start = time.perf_counter()
                env.exec("true")
                execs.append(time.perf_counter() - start)
            start = time.perf_counter()
            result = env.evaluate()
            evaluates.append(time.perf_counter() - start)
            assert result.reward == 0.0, result.observation
        for _ in range(reps):  # a whole no-op episode, connection included
            start = time.perf_counter()
            with server.client() as fresh:
                driver.run_episode(driver.ClientEnv(fresh), TASK, driver.nop, TOKEN)
            episodes.append(time.perf_counter() - start)
    median = statistics.median
    return {
        "reset": median(resets),
        "exec": median(execs),
        "evaluate": median(evaluates),
        "episode": median(episodes),
    }


def owned(client: docker.DockerClient, server: Server) -> list[dict]:
    """The server's task containers (its owner label: scope, PID, start time)."""
    prefix = server.owner_prefix
    listed = client.api.containers(all=True, filters={"label": "harbor-openenv"})
    return [c for c in listed if c["Labels"].get("harbor-openenv.owner", "").startswith(prefix)]


def warm_reset(server: Server, client: docker.DockerClient, size: int) -> tuple[float, bool]:
    """Seconds of one reset on a server with a warm pool of ``size``, once its pool is full, and
    whether the episode got a pooled container (its hostname is one of the idle ones)."""
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline:
        idle = [c["Id"] for c in owned(client, server) if "harbor-openenv.pool" in c["Labels"]]
        if len(idle) >= size:
            break
        time.sleep(0.05)
    time.sleep(0.5)  # a container is listed a moment before it is prepared and pooled
    with server.client() as env:
        start = time.perf_counter()
        env.reset(task_id=TASK)
        elapsed = time.perf_counter() - start
        host = env.exec("hostname").observation.output.strip()
        env.evaluate()
    return elapsed, any(full.startswith(host) for full in idle)


def throughput(server: Server, sessions: int, episodes_each: int) -> tuple[float, int]:
    """Episodes per minute with ``sessions`` concurrent sessions, and how many went wrong."""
    errors = []

    def answer(content: str) -> driver.Policy:
        write = HarborAction(action_type="write", path="answer.txt", content=content)
        return lambda observation: (write,)

    def session(i: int) -> None:
        with server.client() as client:
            for j in range(episodes_each):
                solved = (i + j) % 2 == 0
                policy = answer("42\n" if solved else "0\n")
                run = driver.run_episode(driver.ClientEnv(client), TASK, policy, TOKEN)
                if run.reward != (1.0 if solved else 0.0):
                    errors.append((i, j, run.reward))

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=sessions) as pool:
        for future in [pool.submit(session, i) for i in range(sessions)]:
            try:
                future.result()
            except Exception as exc:
                errors.append(repr(exc))
    elapsed = time.perf_counter() - start
    return sessions * episodes_each / elapsed * 60, len(errors)


def harbor_nop_trial() -> tuple[float | None, str]:
    """Seconds of one ``harbor run -a nop`` trial (its own start/finish stamps), or why not."""
    if not HARBOR.exists() and not shutil.which("harbor"):
        return None, "harbor not installed"
    harbor = str(HARBOR) if HARBOR.exists() else shutil.which("harbor")
    with tempfile.TemporaryDirectory() as jobs:
        command = [harbor, "run", "-p", str(TASKS / TASK), "-a", "nop", "-e", "docker"]
        command += ["-o", jobs, "-y", "-q"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        results = [p for p in Path(jobs).glob("*/*/result.json")]
        if not results:
            return None, f"harbor run failed ({done.returncode}): {done.stdout[-300:]}"
        result = json.loads(results[0].read_text())

    def stamp(key: str) -> datetime:
        return datetime.fromisoformat(result[key].replace("Z", "+00:00"))

    seconds = (stamp("finished_at") - stamp("started_at")).total_seconds()
    failure = (result.get("exception_info") or {}).get("exception_type")
    return seconds, f"harbor trial: {failure}" if failure else "harbor trial scored"


def big_dataset(root: Path, count: int) -> Path:
    tasks = root / "tasks"
    for i in range(count):
        task = tasks / f"group-{i // 100:03d}" / f"task-{i:05d}"
        (task / "environment").mkdir(parents=True)
        (task / "tests").mkdir()
        (task / "task.toml").write_text('schema_version = "1.4"\n[verifier]\ntimeout_sec = 60\n')
        (task / "instruction.md").write_text(f"Task {i}.\n")
        (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
        (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=32)
    args = parser.parse_args()
    client = docker.from_env(timeout=300)
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, ours: float, floor: float, goal: str, ok: bool | None, unit="ms") -> None:
        scale = 1000 if unit == "ms" else 1
        figures = f"{ours * scale:.1f} / {floor * scale:.1f} {unit}"
        verdict = "n/a" if ok is None else ("met" if ok else "NOT MET")
        rows.append((name, figures, f"{ours / floor:.2f}x", f"{goal} ({verdict})"))

    server = bench_server(TASKS, HARBOR_OPENENV_MAX_SESSIONS=str(args.sessions + 4))
    pooled = bench_server(TASKS, HARBOR_OPENENV_POOL_SIZE="2", HARBOR_OPENENV_DEFAULT_TASK=TASK)
    try:
        from harbor_openenv.config import Settings
        from harbor_openenv.images.resolver import ImageResolver
        from harbor_openenv.tasks.dataset import Dataset

        resolver = ImageResolver(client, build_network=Settings.from_env().build_network)
        image, reps = resolver.resolve(Dataset(TASKS)[TASK]), args.reps
        # Interleaved, one repetition of each at a time, so load from elsewhere hits both alike.
        pairs, warm = [], []
        for _ in range(reps):
            pairs.append((raw_floor(client, image, 1), runtime_figures(server, 1)))
            warm.append(warm_reset(pooled, client, 2))
        raw = {k: statistics.median(r[k] for r, _ in pairs) for k in pairs[0][0]}
        ours = {k: statistics.median(o[k] for _, o in pairs) for k in pairs[0][1]}
        row("reset (image cached) / raw create+start+exec", ours["reset"], raw["start"], "<= 1.3x",
            ours["reset"] <= 1.3 * raw["start"])  # fmt: skip
        pooled.stop()
        warm_s, hits = statistics.median(t for t, _ in warm), sum(hit for _, hit in warm)
        row("reset with warm pool / raw exec_run", warm_s, raw["exec"],
            f"<= 2x, {hits}/{reps} resets got a pooled container",
            warm_s <= 2 * raw["exec"] and hits == reps)  # fmt: skip
        added = ours["exec"] - raw["exec"]
        row("exec step over /ws / raw exec_run", ours["exec"], raw["exec"],
            f"<= 1.2x, +{added * 1000:.1f} ms (<= 5 ms)",
            ours["exec"] <= 1.2 * raw["exec"] and added <= 0.005)  # fmt: skip
        row("evaluate / raw stage tests + run test.sh", ours["evaluate"], raw["evaluate"],
            "<= 1.3x", ours["evaluate"] <= 1.3 * raw["evaluate"])  # fmt: skip
        row("  evaluate / raw stage + test.sh + remove", ours["evaluate"],
            raw["evaluate"] + raw["remove"], "context: evaluate also removes the container",
            None)  # fmt: skip
        harbor_s, note = harbor_nop_trial()
        if harbor_s is None:
            rows.append(("no-op episode / harbor run -a nop trial", note, "-", "<= 0.3x (skipped)"))
        else:
            row(f"no-op episode / harbor run -a nop ({note})", ours["episode"], harbor_s,
                "<= 0.3x", ours["episode"] <= 0.3 * harbor_s)  # fmt: skip
        one, one_errors = throughput(server, 1, 6)
        many, many_errors = throughput(server, args.sessions, 2)
        deadline = time.monotonic() + 30  # ended episodes' containers go in the background
        while (leaked := len(owned(client, server))) and time.monotonic() < deadline:
            time.sleep(0.5)
        rows.append((
            f"{args.sessions} sessions / 1 session, episodes per minute",
            f"{many:.0f} / {one:.0f} per min",
            f"{many / one:.2f}x",
            f"errors {one_errors + many_errors}, leaked containers {leaked}"
            f" ({'met' if one_errors + many_errors == 0 and leaked == 0 else 'NOT MET'})",
        ))  # fmt: skip
    finally:
        server.stop()
        pooled.stop()
    # Issue 15's rows: the exec channel on and off against the same raw floor.
    rows.extend(channel_rows(client, image, 4 * reps, args.sessions))

    with tempfile.TemporaryDirectory() as scratch:
        small = big_dataset(Path(scratch) / "one", 1)
        large = big_dataset(Path(scratch) / "many", 10_000)
        baseline = bench_server(small)
        baseline_s, baseline_rss = baseline.health_s, rss_mib(baseline)
        baseline.stop()
        big = bench_server(large)
        big_s, big_rss = big.health_s, rss_mib(big)
        with big.client() as env:
            start = time.perf_counter()
            first = env.reset(task_id="group-000/task-00000")  # lists all 10,000 tasks
            listed_s = time.perf_counter() - start
            assert first.observation.info is not None
            env.evaluate()
        listed_rss = rss_mib(big)
        big.stop()
    row("start to /health, 10,000 tasks / 1 task", big_s, baseline_s, "< 1 s",
        big_s < 1.0, unit="s")  # fmt: skip
    rows.append(("  resident memory at /health, 10,000 tasks / 1 task",
                 f"{big_rss:.0f} / {baseline_rss:.0f} MiB", f"{big_rss / baseline_rss:.2f}x",
                 f"< 150 MB ({'met' if big_rss * 1.048576 < 150 else 'NOT MET'})"))  # fmt: skip
    rows.append(("  first reset (lists 10,000 tasks), RSS after", f"{listed_s:.2f} s",
                 f"{listed_rss:.0f} MiB", "context"))  # fmt: skip
    imports = median_s(lambda: subprocess.run(
        [sys.executable, "-c", "import harbor_openenv._openenv"], check=True), 3)  # fmt: skip
    rows.append(("  of which importing OpenEnv's server (FastAPI, fastmcp)", f"{imports:.2f} s",
                 "-", "context: the floor of any OpenEnv server"))  # fmt: skip

    print(f"\nharbor-openenv bench: docker {client.version()['Version']}, {os.cpu_count()} cores,"
          f" task {TASK}, medians of {args.reps} runs\n")  # fmt: skip
    header = ("measure", "ours / floor", "ratio", "goal")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    for line in [header, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)))


if __name__ == "__main__":
    main()
