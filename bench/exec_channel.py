"""The exec channel's rows (issue 15): agent steps through one long-lived exec per episode,
against raw docker-py ``exec_run`` and against the same server with the channel off, in one run.

``bench/run.py`` prints these rows after its own; alone (a few minutes):

    .venv/bin/python bench/exec_channel.py [--reps 40] [--sessions 32]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tarfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker

from harbor_openenv.client import driver
from harbor_openenv.client.launch import Server
from harbor_openenv.models import HarborAction
from harbor_openenv.sandbox import LABEL

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "tests" / "fixtures" / "tasks"
TASK = "edit-file"
TOKEN = "bench-token"
ENGINE = ("dockerd", "containerd", "containerd-shim")  # comm names (shim-runc-v2, cut at 15)
Row = tuple[str, str, str, str]


def timed(run: Callable[[], object], reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def p95(times: list[float]) -> float:
    return statistics.quantiles(times, n=20)[-1]


def engine_cpu() -> dict[tuple[str, str], int]:
    """CPU ticks (user + system) of each engine process by (pid, start time), from /proc."""
    ticks = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_bytes().decode(errors="replace")  # a name may be any bytes
        except OSError:
            continue
        name, fields = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()
        if name in ENGINE:
            ticks[(stat.parent.name, fields[19])] = int(fields[11]) + int(fields[12])
    return ticks


def cpu_per_1000(run: Callable[[], object], steps: int) -> float:
    """Engine CPU seconds per 1,000 calls of ``run``: what each engine process alive at the end
    used meanwhile (a shim that exited in between is not counted; other users of the engine are)."""
    before = engine_cpu()
    for _ in range(steps):
        run()
    after = engine_cpu()
    used = sum(ticks - before.get(key, 0) for key, ticks in after.items())
    return used / 100 / steps * 1000


def raw_exec(
    client: docker.DockerClient, image: str, reps: int, cpu_steps: int
) -> dict[str, list[float]]:
    """raw ``exec_run`` of ``true`` (the floor), a raw stage + test.sh + reward read."""
    container = client.containers.run(
        image, ["sh", "-c", "sleep infinity"], detach=True, labels={"bench-raw": "1"}
    )
    try:
        exec_true = lambda: container.exec_run("true")  # noqa: E731
        exec_true()
        archive = tests_archive()

        def evaluate() -> None:
            container.exec_run("sh -c 'mkdir -p /tests /logs/verifier'")
            container.put_archive("/tests", archive)
            container.exec_run("bash -c '/tests/test.sh > /logs/verifier/test-stdout.txt 2>&1'")
            stream, _ = container.get_archive("/logs/verifier/reward.txt")
            b"".join(stream)

        figures = {
            "exec": timed(exec_true, reps),
            "cpu": [cpu_per_1000(exec_true, cpu_steps)],
            "evaluate": timed(evaluate, max(5, reps // 4)),
        }
        return figures
    finally:
        container.remove(force=True)


def tests_archive() -> bytes:
    """The benchmark task's tests/ as a tar, as the raw floor stages it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(TASKS / TASK / "tests", arcname=".")
    return buffer.getvalue()


def settle(client: docker.DockerClient, timeout_s: float = 60) -> None:
    """Wait until the runtime's only container is the measured session's: the other server's
    last episode is removed in the background, and its removal is not this session's step."""
    deadline = time.monotonic() + timeout_s
    while len(client.containers.list(all=True, filters={"label": LABEL})) > 1:
        if time.monotonic() > deadline:
            raise SystemExit("the other server's containers were not removed within a minute")
        time.sleep(0.1)


def over_ws(
    client: docker.DockerClient, server: Server, reps: int, cpu_steps: int
) -> dict[str, list[float]]:
    """One session's exec, 4 KiB read and write, engine CPU and evaluate."""
    content = "x" * 4095 + "\n"
    with server.client() as env:
        env.reset(task_id=TASK)
        env.exec("true")  # opens the channel (when on)
        settle(client)
        figures = {
            "exec": timed(lambda: env.exec("true"), reps),
            "write": timed(lambda: env.write("four-k.txt", content), reps),
            "read": timed(lambda: env.read("four-k.txt"), reps),
            "cpu": [cpu_per_1000(lambda: env.exec("true"), cpu_steps)],
        }
        evaluates = []
        for _ in range(max(5, reps // 4)):
            start = time.perf_counter()
            result = env.evaluate()
            evaluates.append(time.perf_counter() - start)
            assert result.reward == 0.0, result.observation
            env.reset(task_id=TASK)
        figures["evaluate"] = evaluates
    return figures


def throughput(server: Server, sessions: int, episodes_each: int, steps: int) -> tuple[float, int]:
    """Episodes per minute with ``sessions`` at once; each episode is ``steps`` exec steps, the
    answer's write and evaluate. Also how many rewards came out wrong."""
    errors = []
    execs = [HarborAction(action_type="exec", command=f"echo step {i}") for i in range(steps)]

    def policy(content: str) -> driver.Policy:
        write = HarborAction(action_type="write", path="answer.txt", content=content)
        return lambda observation: (*execs, write)

    def session(i: int) -> None:
        with server.client() as client:
            for j in range(episodes_each):
                solved = (i + j) % 2 == 0
                run = driver.run_episode(
                    driver.ClientEnv(client), TASK, policy("42\n" if solved else "0\n"), TOKEN
                )
                if run.reward != (1.0 if solved else 0.0):
                    errors.append((i, j, run.reward))

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=sessions) as pool:
        for future in [pool.submit(session, i) for i in range(sessions)]:
            try:
                future.result()
            except Exception as exc:
                errors.append(repr(exc))
    return sessions * episodes_each / (time.perf_counter() - start) * 60, len(errors)


def channel_rows(client: docker.DockerClient, image: str, reps: int, sessions: int) -> list[Row]:
    """Issue 15's rows: channel on and off over /ws, against raw docker-py, interleaved."""
    cpu_steps = 200
    env = {"HARBOR_OPENENV_MAX_SESSIONS": str(sessions + 4)}
    on = Server(TASKS, token=TOKEN, HARBOR_OPENENV_EXEC_CHANNEL="1", **env)
    off = Server(TASKS, token=TOKEN, HARBOR_OPENENV_EXEC_CHANNEL="0", **env)
    try:
        raws, ons, offs = [], [], []
        # Interleaved halves, so load from elsewhere hits all three alike; on and off swap places
        # in the second, as each follows the other's last container removal (in the background).
        for half in range(2):
            raws.append(raw_exec(client, image, reps // 2, cpu_steps // 2))
            for server, figures in ((on, ons), (off, offs))[:: 1 if half == 0 else -1]:
                figures.append(over_ws(client, server, reps // 2, cpu_steps // 2))
        raw, ours, engine = _merge(raws), _merge(ons), _merge(offs)
        steps, each = 10, 2
        many_on, errors_on = throughput(on, sessions, each, steps)
        many_off, errors_off = throughput(off, sessions, each, steps)
    finally:
        on.stop()
        off.stop()
    med = statistics.median
    floor = med(raw["exec"])
    rows: list[Row] = []

    def ms_row(name: str, key: str, stat: Callable[[list[float]], float], goal: float) -> None:
        a, b = stat(ours[key]), stat(engine[key])
        bound = stat(raw["exec"])
        verdict = "met" if a <= goal * bound else "NOT MET"
        rows.append((
            name,
            f"on {a * 1000:.1f} / off {b * 1000:.1f} / raw {bound * 1000:.1f} ms",
            f"on {a / bound:.2f}x, off {b / bound:.2f}x",
            f"<= {goal}x ({verdict})",
        ))  # fmt: skip

    ms_row("exec step over /ws / raw exec_run, median", "exec", med, 0.1)
    ms_row("exec step over /ws / raw exec_run, p95", "exec", p95, 0.1)
    ms_row("read 4 KiB over /ws / raw exec_run, median", "read", med, 0.1)
    ms_row("write 4 KiB over /ws / raw exec_run, median", "write", med, 0.1)
    cpu_on, cpu_off, cpu_raw = (statistics.mean(f["cpu"]) for f in (ours, engine, raw))
    rows.append((
        "engine CPU per 1,000 exec steps / raw (dockerd+containerd+shims)",
        f"on {cpu_on:.1f} / off {cpu_off:.1f} / raw {cpu_raw:.1f} s",
        f"on {cpu_on / cpu_raw:.2f}x, off {cpu_off / cpu_raw:.2f}x",
        f"<= 0.2x ({'met' if cpu_on <= 0.2 * cpu_raw else 'NOT MET'}; the engine is shared)",
    ))  # fmt: skip
    ok = many_on >= 1.5 * many_off and errors_on + errors_off == 0
    rows.append((
        f"{sessions} sessions, episodes/min, channel on / off ({steps} execs, write, evaluate)",
        f"{many_on:.0f} / {many_off:.0f} per min",
        f"{many_on / many_off:.2f}x",
        f">= 1.5x ({'met' if ok else 'NOT MET'}), wrong rewards {errors_on + errors_off}",
    ))  # fmt: skip
    ev_on, ev_off, ev_raw = med(ours["evaluate"]), med(engine["evaluate"]), med(raw["evaluate"])
    rows.append((
        "evaluate / raw stage + test.sh + reward read (through the engine either way)",
        f"on {ev_on * 1000:.0f} / off {ev_off * 1000:.0f} / raw {ev_raw * 1000:.0f} ms",
        f"on {ev_on / ev_raw:.2f}x, off {ev_off / ev_raw:.2f}x",
        f"<= 1.0x ({'met' if ev_on <= ev_raw else 'NOT MET'})",
    ))  # fmt: skip
    rows.append(("  raw exec_run (the floor)", f"{floor * 1000:.1f} ms", "-", "context"))
    return rows


def _merge(halves: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    merged: dict[str, list[float]] = {}
    for half in halves:
        for key, values in half.items():
            merged.setdefault(key, []).extend(values)
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=32)
    args = parser.parse_args()
    from harbor_openenv.config import Settings
    from harbor_openenv.images.resolver import ImageResolver
    from harbor_openenv.tasks.dataset import Dataset

    client = docker.from_env(timeout=300)
    resolver = ImageResolver(client, build_network=Settings.from_env().build_network)
    image = resolver.resolve(Dataset(TASKS)[TASK])
    print_rows(channel_rows(client, image, args.reps, args.sessions))


def print_rows(rows: list[Row]) -> None:
    header = ("measure", "figures", "ratio", "goal")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    for line in [header, tuple("-" * w for w in widths), *rows]:
        print(" | ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)))


if __name__ == "__main__":
    main()
