"""Episodes per minute with two engines behind one server ÷ one engine, in one run: two
``dockerd``'s of their own (tests/support/_engines.py) with the base images, and two servers
with no socket of the machine's engine (tests/support/_remote.py), one with
``HARBOR_OPENENV_DOCKER_HOSTS`` naming one engine, one naming both. ``--workers`` trainer clients
run whole episodes of ``hello-world`` (reset, the agent's fix, evaluate: 1.0) at once, for
``--episodes`` episodes per round; the servers take turns, round by round (``--rounds``), and the
best round of each counts.

Two engines serve more episodes a minute only where one engine is the bottleneck and the other
has its own CPUs: on one machine both engines (and the server, and the clients) share the same
cores, so the ratio here says what spreading costs or saves on this host, not what two hosts
would give.

A benchmark, not a test: it never fails on a missed goal. From the repository root (as root:
dockerd needs it):

    .venv/bin/python bench/engines.py [--workers 4] [--episodes 24] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from _remote import NO_SOCKET, remote_engine, remote_env  # noqa: E402
from _server import Server  # noqa: E402

TASKS = ROOT / "examples" / "dataset" / "tasks"
TASK = "hello-world"


def episode(srv: Server) -> None:
    """One whole episode, which must score 1.0."""
    with srv.client() as env:
        assert env.reset(task_id=TASK).observation.error is None
        assert env.write("/app/hello.txt", "Hello, world!\n").observation.error is None
        result = env.evaluate()
        assert result.reward == 1.0, result.observation


def per_minute(srv: Server, workers: int, episodes: int) -> float:
    """Episodes a minute, ``workers`` at once, over ``episodes`` of them."""
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: episode(srv), range(episodes)))
    return episodes / (time.perf_counter() - started) * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    local = docker.from_env()
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(remote_engine(local, "bench-a"))
        second = stack.enter_context(remote_engine(local, "bench-b"))
        hosts = {"one engine": first.host, "two engines": f"{first.host},{second.host}"}
        servers = {
            name: stack.enter_context(
                Server(
                    TASKS,
                    prefix=NO_SOCKET,
                    HARBOR_OPENENV_MAX_SESSIONS=str(args.workers + 2),
                    HARBOR_OPENENV_DOCKER_HOSTS=value,
                    **remote_env({}),
                )
            )
            for name, value in hosts.items()
        }
        for srv in servers.values():  # the image built on each engine: warm
            per_minute(srv, 2, 2)
        rates: dict[str, list[float]] = {name: [] for name in servers}
        for _ in range(args.rounds):
            for name, srv in servers.items():
                rates[name].append(per_minute(srv, args.workers, args.episodes))
    print(
        f"{args.rounds} rounds of {args.episodes} episodes of {TASK}, {args.workers} at once,"
        f" on {os.cpu_count()} CPUs:"
    )
    for name, values in rates.items():
        shown = ", ".join(f"{value:.0f}" for value in values)
        print(f"  {name:12} best {max(values):6.1f} episodes/min (rounds: {shown})")
    ratio = max(rates["two engines"]) / max(rates["one engine"])
    print(f"  two engines ÷ one: {ratio:.2f}x (both engines share this machine's CPUs)")


if __name__ == "__main__":
    main()
