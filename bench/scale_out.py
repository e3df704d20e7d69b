"""Scale-out figures on this machine, in one run, with the parts tests/deploy/test_scale_out.py
uses: three Docker engines of their own (tests/support/_engines.py), a replica on each pulling the
task's image by digest from a loopback registry (tests/support/_registry.py), HAProxy in front
(tests/support/_balancer.py).

Prints:

- exec through the balancer ÷ exec directly to the same replica (a one-replica balancer, so
  both reach the same server; median of ``--reps`` alternating calls): goal at most 1.1x;
- episodes per minute through the balancer with 1, 2 and 3 replicas (``--sessions`` trainers,
  ``--episodes`` whole episodes each, the agent's edit scoring 1.0), with the CPU seconds per
  episode of the replicas, of their engines (dockerd and containerd) and of the whole machine
  (/proc/stat: other work on the machine included). On 2 cores this is expected to stay flat once
  CPU-bound: more replicas add capacity only with more machines;
- the first reset of a task whose image a fresh engine pulls (from the loopback registry)
  ÷ the first reset of the same task whose image the machine's engine builds (its base image
  present, its own step not cached).

A benchmark, not a test: it never fails on a missed goal, it says so. From the repository root:

    .venv/bin/python bench/scale_out.py [--reps 200] [--sessions 6] [--episodes 4]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from _balancer import TASK, HAProxy, trainer_episode  # noqa: E402
from _engines import Engine, engines  # noqa: E402
from _registry import env_repo, remove_ours, run_cli, serve_registry  # noqa: E402
from conftest import TOKEN, Server  # noqa: E402

from harbor_openenv import HarborEnvClient  # noqa: E402
from harbor_openenv.images.lock import LOCK_NAME  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` used so far."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / _TICK


def machine_busy_s() -> float:
    """CPU seconds the whole machine was busy so far (every core; idle and iowait excluded)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / _TICK


def first_reset_s(url: str) -> float:
    with HarborEnvClient(url, orchestration_token=TOKEN) as env:
        started = time.perf_counter()
        reset = env.reset(task_id=TASK)
        took = time.perf_counter() - started
        assert reset.observation.error is None, reset.observation.error
        return took


def exec_ratio(balanced: str, direct: str, reps: int) -> tuple[float, float]:
    """Median seconds of ``exec true`` through the balancer and directly, alternating."""
    times: dict[str, list[float]] = {balanced: [], direct: []}
    with (
        HarborEnvClient(balanced, orchestration_token=TOKEN) as via,
        HarborEnvClient(direct, orchestration_token=TOKEN) as straight,
    ):
        for env in (via, straight):
            assert env.reset(task_id=TASK).observation.error is None
        for _ in range(reps):
            for url, env in ((balanced, via), (direct, straight)):
                started = time.perf_counter()
                assert env.exec("true").observation.exit_code == 0
                times[url].append(time.perf_counter() - started)
    return statistics.median(times[balanced]), statistics.median(times[direct])


def throughput(url: str, sessions: int, episodes: int) -> tuple[float, int]:
    """Wall seconds for ``sessions`` trainers doing ``episodes`` episodes each; wrong rewards."""
    started = time.perf_counter()
    with ThreadPoolExecutor(sessions) as pool:
        rewards = list(
            pool.map(lambda _: [trainer_episode(url) for _ in range(episodes)], range(sessions))
        )
    wrong = sum(reward != 1.0 for each in rewards for reward in each)
    return time.perf_counter() - started, wrong


@contextlib.contextmanager
def replicas_on(nodes: list[Engine], tasks: Path, folder: Path) -> Iterator[list[Server]]:
    servers: list[Server] = []
    try:
        for n, engine in enumerate(nodes, 1):
            servers.append(
                Server(
                    tasks,
                    log=folder / f"replica-r{n}.log",
                    DOCKER_HOST=engine.host,
                    HARBOR_OPENENV_MAX_SESSIONS="16",
                )
            )
        yield servers
    finally:
        for server in servers:
            server.stop()


def built_first_reset(folder: Path) -> float:
    """The first reset of the task on a server of the machine's own engine that builds it."""
    repo = env_repo(folder / "built", TASK)
    with (repo / "tasks" / TASK / "environment" / "Dockerfile").open("a") as dockerfile:
        dockerfile.write(f"RUN echo {uuid.uuid4().hex} > /built\n")  # never in the cache
    with Server(repo / "tasks") as server:
        took = first_reset_s(server.url)
        assert "image build" in server.output, server.output
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200, help="exec calls each way")
    parser.add_argument("--sessions", type=int, default=6, help="concurrent trainers")
    parser.add_argument("--episodes", type=int, default=4, help="episodes per trainer")
    args = parser.parse_args()
    main_engine = docker.from_env()
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scale-")))
        registry = stack.enter_context(serve_registry(folder))
        stack.callback(remove_ours, main_engine)
        repo = env_repo(folder, TASK)
        pushed = run_cli("images", "push", repo, "--registry", f"{registry}/bench")
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        assert (repo / LOCK_NAME).is_file()
        nodes = stack.enter_context(engines(3))
        servers = stack.enter_context(replicas_on(nodes, repo / "tasks", folder))

        pulled = first_reset_s(servers[0].url)  # a fresh engine: the image is pulled
        assert "image pull" in servers[0].output, servers[0].output
        built = built_first_reset(folder)
        for server in servers[1:]:  # every engine holds the image before the timings
            first_reset_s(server.url)

        one = HAProxy(folder, [servers[0].port])
        try:
            via, direct = exec_ratio(one.url, servers[0].url, args.reps)
        finally:
            one.stop()

        rows = []
        replica_pids = [server.process.pid for server in servers]
        every_engine = [pid for engine in nodes for pid in engine.processes()]
        for count in (1, 2, 3):
            sub = folder / f"lb{count}"
            sub.mkdir()
            balancer = HAProxy(sub, [server.port for server in servers[:count]])
            try:
                cpu = cpu_s(replica_pids), cpu_s(every_engine), machine_busy_s()
                wall, wrong = throughput(balancer.url, args.sessions, args.episodes)
                used = cpu_s(replica_pids), cpu_s(every_engine), machine_busy_s()
            finally:
                balancer.stop()
            episodes = args.sessions * args.episodes
            per = [(after - before) / episodes for before, after in zip(cpu, used, strict=True)]
            rows.append((count, episodes, wall, wrong, per))

    goal = "met" if via / direct <= 1.1 else "MISSED"
    print(f"\nscale-out on {os.cpu_count()} cores, 3 engines of their own, HAProxy, a registry\n")
    print(f"exec through the balancer / direct: {via * 1000:.2f} / {direct * 1000:.2f} ms ", end="")
    print(f"= {via / direct:.2f}x (goal <= 1.1x: {goal})")
    print(f"first reset, image pulled / built: {pulled:.2f} / {built:.2f} s", end="")
    print(f" = {pulled / built:.2f}x")
    print(
        f"\n{'replicas':>8} {'episodes':>8} {'seconds':>8} {'per min':>8} {'wrong':>6}"
        f" {'CPU s/episode: replicas':>24} {'engines':>8} {'machine':>8}"
    )
    for count, episodes, wall, wrong, (replica, engine, machine) in rows:
        print(
            f"{count:>8} {episodes:>8} {wall:>8.1f} {episodes / wall * 60:>8.1f} {wrong:>6}"
            f" {replica:>24.2f} {engine:>8.2f} {machine:>8.2f}"
        )


if __name__ == "__main__":
    main()
