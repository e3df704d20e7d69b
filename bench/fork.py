"""Forking against fresh resets: the time from a running episode to N ready branches (the fork
action, then N ``reset(fork=ID)``, as ``HarborEnvClient.fork`` does them) over the time to N fresh
resets of the same task (N sessions, each reset), measured in one run against one server. A
benchmark, not a test: it prints the figures and the ratios. Run from the repository root:

    .venv/bin/python bench/fork.py [--n 16] [--reps 3] [--mb 0] [--together]

``--mb``: megabytes the agent writes into the workdir before the fork (what the commit carries).
``--together``: the N resets of both kinds sent at once, from N threads (default: one after the
other, as ``HarborEnvClient.fork`` and a simple trainer loop send them). It also prints the extra
disk per branch: the committed layer (once per fork) and a branch's own writable layer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker

from harbor_openenv.client.launch import Server
from harbor_openenv.models import HarborAction

ROOT = Path(__file__).resolve().parents[1]
TASK = "hello-world"


def resets(calls: list[Callable[[], object]], together: bool) -> None:
    """Run the reset calls one after the other, or all at once."""
    if not together:
        for call in calls:
            call()
        return
    with ThreadPoolExecutor(len(calls)) as pool:
        list(pool.map(lambda call: call(), calls))


def ready(result: object) -> None:
    error = result.observation.error  # type: ignore[attr-defined]
    assert error is None, error


def fork_s(server: Server, n: int, mb: int, together: bool) -> tuple[float, float, int, int]:
    """Seconds from the fork action to n branches reset and ready (the parent set up first), of
    those the fork action's (the commit), the committed layer's bytes and a branch's own."""
    with server.client() as parent:
        parent.reset(task_id=TASK)
        if mb:
            parent.exec(f"head -c {mb}M /dev/urandom > blob.bin")
        branches = [server.client() for _ in range(n)]
        for branch in branches:
            branch.connect()  # sessions open before the clock starts, as for the fresh resets
        start = time.perf_counter()
        answer = parent.step(HarborAction(action_type="fork", n=n, token=server.token))
        ids = answer.observation.info["forks"]
        commit = time.perf_counter() - start
        calls = [
            (lambda b=branch, i=ident: ready(b.reset(fork=i)))
            for branch, ident in zip(branches, ids, strict=True)
        ]
        resets(calls, together)
        elapsed = time.perf_counter() - start
        layer, own = disk(parent)
        for branch in branches:
            assert branch.exec("true").observation.exit_code == 0
            branch.close()
    return elapsed, commit, layer, own


def disk(parent: object) -> tuple[int, int]:
    """The fork image's own layer (its size over its parent image's) and the largest writable
    layer of a branch container (the fork label on its image) of this engine."""
    client = docker.from_env()
    images = client.api.images(filters={"label": "harbor-openenv.fork"})
    if not images:
        return 0, 0
    newest = max(images, key=lambda image: image["Created"])
    parent_id = client.api.inspect_image(newest["Id"])["Parent"]
    below = client.api.inspect_image(parent_id)["Size"] if parent_id else 0
    own = 0
    for container in client.api.containers(filters={"ancestor": newest["Id"]}, size=True):
        own = max(own, int(container.get("SizeRw") or 0))
    return int(newest["Size"]) - int(below), own


def fresh_s(server: Server, n: int, together: bool) -> float:
    """Seconds to n fresh resets of the task, one session each."""
    clients = [server.client() for _ in range(n)]
    try:
        for client in clients:
            client.connect()
        start = time.perf_counter()
        resets([(lambda c=client: ready(c.reset(task_id=TASK))) for client in clients], together)
        return time.perf_counter() - start
    finally:
        for client in clients:
            client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--mb", type=int, default=0)
    parser.add_argument("--together", action="store_true")
    args = parser.parse_args()
    tasks = ROOT / "examples" / "dataset" / "tasks"
    forks, commits, fresh, ratios = [], [], [], []
    layer = own = 0
    with Server(tasks, HARBOR_OPENENV_MAX_SESSIONS=str(args.n + 1)) as server:
        with server.client() as warm:  # build or pull the task's image once, outside the timings
            warm.reset(task_id=TASK)
        for rep in range(args.reps):  # alternate which runs first
            if rep % 2:
                fresh.append(fresh_s(server, args.n, args.together))
                time.sleep(2)  # let the ended episodes' containers go
            total, commit, layer, own = fork_s(server, args.n, args.mb, args.together)
            forks.append(total)
            commits.append(commit)
            time.sleep(2)
            if not rep % 2:
                fresh.append(fresh_s(server, args.n, args.together))
                time.sleep(2)
            ratios.append(forks[-1] / fresh[-1])
    how = "at once" if args.together else "one after the other"
    fork_median, fresh_median = statistics.median(forks), statistics.median(fresh)
    print(f"resets {how}; {args.mb} MB written before the fork; {args.reps} rounds")
    print(f"{args.n} branches ready after a fork: median {fork_median:.2f} s")
    print(f"  of which the fork action (the commit): median {statistics.median(commits):.2f} s")
    print(f"{args.n} fresh resets of {TASK}: median {fresh_median:.2f} s")
    print(f"ratio fork / fresh: median {statistics.median(ratios):.2f}", end="")
    print(f" (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
    print(f"extra disk: {layer / 1e6:.2f} MB committed layer per fork,", end="")
    print(f" {own / 1e3:.1f} kB written per branch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
