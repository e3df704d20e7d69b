"""A remote engine's cost, in one run, against the same engine on its local socket: one
``dockerd`` of its own (tests/support/_engines.py) listening on its unix socket and on TCP with
TLS (certificates made here), reached by SSH too through a local sshd (tests/support/_sshd.py).
One server per way in, all on the same engine and the same task (``hello-world``, its image built
once), driven by a trainer client; alternating calls, medians of ``--reps``.

Prints, for TLS and for SSH, each ÷ the local socket:

- reset (a new container, prepared, the previous one removed): goal at most 1.2x over TLS;
- an exec step through the exec channel (the default): goal at most 1.5x over TLS;
- an exec step through the engine's exec API (``HARBOR_OPENENV_EXEC_CHANNEL=0``).

Episodes per minute with two engines behind one server ÷ one: bench/engines.py.

A benchmark, not a test: it never fails on a missed goal, it says so. From the repository root
(as root: dockerd and sshd need it):

    .venv/bin/python bench/remote.py [--reps 30]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import docker

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from _remote import NO_SOCKET, remote_engine, remote_env  # noqa: E402
from _server import TOKEN, Server  # noqa: E402
from _sshd import serve_sshd  # noqa: E402

TASKS = ROOT / "examples" / "dataset" / "tasks"
TASK = "hello-world"
GOALS = {("tls", "reset"): 1.2, ("tls", "exec (channel)"): 1.5}


def measure(servers: dict[str, Server], reps: int) -> dict[tuple[str, str], float]:
    """Median seconds of each operation per way in, the ways alternating call by call."""
    times: dict[tuple[str, str], list[float]] = {}
    with contextlib.ExitStack() as stack:
        envs = {way: stack.enter_context(srv.client()) for way, srv in servers.items()}
        for env in envs.values():  # the image built, a first container started: warm
            env.reset(task_id=TASK)
        for _ in range(reps):
            for way, env in envs.items():
                started = time.perf_counter()
                reset = env.reset(task_id=TASK)
                times.setdefault((way, "reset"), []).append(time.perf_counter() - started)
                assert reset.observation.error is None, reset.observation.error
                kind = "exec (engine)" if way.endswith("-engine") else "exec (channel)"
                for _ in range(5):
                    started = time.perf_counter()
                    done = env.exec("true")
                    times.setdefault((way, kind), []).append(time.perf_counter() - started)
                    assert done.observation.exit_code == 0, done.observation
    return {key: statistics.median(values) for key, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    local = docker.from_env()
    with contextlib.ExitStack() as stack:
        engine = stack.enter_context(remote_engine(local, "bench"))
        ssh = stack.enter_context(serve_sshd(engine.host))
        ways = {"local": {"DOCKER_HOST": engine.host}, "tls": engine.tls_env, "ssh": ssh}
        servers = {}
        for way, env in ways.items():
            for channel in ("1", "0"):
                name = way if channel == "1" else f"{way}-engine"
                servers[name] = stack.enter_context(
                    Server(
                        TASKS,
                        prefix=NO_SOCKET,
                        HARBOR_OPENENV_EXEC_CHANNEL=channel,
                        **remote_env(env),
                    )
                )
        assert all(srv.token == TOKEN for srv in servers.values())
        medians = measure(servers, args.reps)
    print(f"{args.reps} resets and {5 * args.reps} exec steps per way in, medians:")
    for kind in ("reset", "exec (channel)", "exec (engine)"):
        suffix = "-engine" if kind == "exec (engine)" else ""
        base = medians[(f"local{suffix}", kind)]
        print(f"  {kind:15} local socket {base * 1000:7.1f} ms")
        for way in ("tls", "ssh"):
            value = medians[(f"{way}{suffix}", kind)]
            ratio = value / base
            goal = GOALS.get((way, kind))
            verdict = (
                ""
                if goal is None
                else (" (goal met)" if ratio <= goal else f" (goal {goal}x MISSED)")
            )
            print(f"  {kind:15} {way:12} {value * 1000:7.1f} ms = {ratio:.2f}x{verdict}")


if __name__ == "__main__":
    main()
