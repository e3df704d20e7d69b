"""Forking against fresh resets: the time from a running episode to N ready branches (the fork
action, then N ``reset(fork=ID)`` one after the other, as ``HarborEnvClient.fork`` does them)
over the time to N fresh resets of the same task (N sessions, each reset), measured in one run
against one server. A benchmark, not a test: it prints the figures and the ratio. Run from the
repository root:

    .venv/bin/python bench/fork.py [--n 4] [--reps 3] [--mb 0]

``--mb``: megabytes the agent writes into the workdir before the fork (what the commit carries).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from harbor_openenv.client.launch import Server
from harbor_openenv.models import HarborAction

ROOT = Path(__file__).resolve().parents[1]
TASK = "hello-world"


def fork_s(server: Server, n: int, mb: int) -> tuple[float, float]:
    """Seconds from the fork action to n branches reset and ready (the parent set up first), and
    of those the fork action's (the commit)."""
    with server.client() as parent:
        parent.reset(task_id=TASK)
        if mb:
            parent.exec(f"head -c {mb}M /dev/urandom > blob.bin")
        start = time.perf_counter()
        ids = parent.step(HarborAction(action_type="fork", n=n, token=server.token))
        ids = ids.observation.info["forks"]
        commit = time.perf_counter() - start
        branches = [server.client() for _ in ids]
        for branch, ident in zip(branches, ids, strict=True):
            assert branch.reset(fork=ident).observation.error is None
        elapsed = time.perf_counter() - start
        for branch in branches:
            assert branch.exec("true").observation.exit_code == 0
            branch.close()
    return elapsed, commit


def fresh_s(server: Server, n: int) -> float:
    """Seconds to n fresh resets of the task, one session each, one after the other."""
    clients = [server.client() for _ in range(n)]
    try:
        start = time.perf_counter()
        for client in clients:
            result = client.reset(task_id=TASK)
            assert result.observation.error is None, result.observation.error
        return time.perf_counter() - start
    finally:
        for client in clients:
            client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--mb", type=int, default=0)
    args = parser.parse_args()
    tasks = ROOT / "examples" / "dataset" / "tasks"
    forks, commits, fresh = [], [], []
    with Server(tasks, HARBOR_OPENENV_MAX_SESSIONS=str(args.n + 1)) as server:
        with server.client() as warm:  # build or pull the task's image once, outside the timings
            warm.reset(task_id=TASK)
        for rep in range(args.reps):  # alternate which runs first
            if rep % 2:
                fresh.append(fresh_s(server, args.n))
            total, commit = fork_s(server, args.n, args.mb)
            forks.append(total)
            commits.append(commit)
            if not rep % 2:
                fresh.append(fresh_s(server, args.n))
            time.sleep(2)  # let the ended episodes' containers go
    fork_median, fresh_median = statistics.median(forks), statistics.median(fresh)
    written = f"{args.mb} MB written"
    print(f"{args.n} branches ready after a fork ({written}): median {fork_median:.2f} s")
    print(f"  of which the fork action (the commit): median {statistics.median(commits):.2f} s")
    print(f"{args.n} fresh resets of {TASK}: median {fresh_median:.2f} s")
    print(f"ratio fork / fresh: {fork_median / fresh_median:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
