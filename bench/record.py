"""What recording (HARBOR_OPENENV_RECORD_DIR) adds to a step, against no recording, in one run.

A step here is what the environment's exec does at its core: one docker-py ``exec_run`` in a
running container, its output made into an observation dict. The recorded step also calls the
recorder's hook (``ep.step``), and every 20 steps ends the episode (``ep.verified``, ``ep.finish``)
and starts another, so the writer thread writes trial folders while the steps run. Rounds of
unrecorded and recorded steps alternate; the medians give the ratio. Also printed: the hook
calls alone, without Docker, per call. A benchmark, not a test. Run from the repository root:

    .venv/bin/python bench/record.py [--steps 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import docker

from harbor_openenv.config import Settings
from harbor_openenv.episode.record import Recorder

IMAGE = "debian:bookworm-slim"
COMMAND = ["sh", "-c", "ls -la /usr/bin | head -c 4000"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200, help="steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    client = docker.from_env()
    container = client.containers.run(
        IMAGE, ["sleep", "infinity"], detach=True, labels={"bench-record": "1"}
    )
    folder = Path(tempfile.mkdtemp(prefix="bench-record-"))
    recorder = Recorder.from_settings(Settings(record_dir=folder))
    assert recorder is not None
    state = {"episode": recorder.start("bench", "benchmark the recorder", "e0"), "n": 0}

    def step(recorded: bool) -> float:
        start = time.perf_counter()
        code, output = container.exec_run(COMMAND)
        observation = {"output": output.decode(errors="replace"), "exit_code": code}
        if recorded:
            episode = state["episode"]
            episode.step({"action_type": "exec", "command": " ".join(COMMAND)}, observation)
            state["n"] += 1
            if state["n"] % 20 == 0:
                episode.verified(None, 1.0, {"reward": 1.0}, "1 passed", None)
                episode.finish()
                state["episode"] = recorder.start("bench", "again", f"e{state['n']}")
        return time.perf_counter() - start

    try:
        for _ in range(20):  # warm-up, unmeasured
            step(False)
            step(True)
        plain: list[float] = []
        recorded: list[float] = []
        for _ in range(args.rounds):
            plain += [step(False) for _ in range(args.steps)]
            recorded += [step(True) for _ in range(args.steps)]
        recorder.flush()
    finally:
        container.remove(force=True)

    # the hook calls alone, per call, on the same observation: 20 episodes of 500 stored steps
    observation = {"output": "x" * 4000, "exit_code": 0}
    hooks, finishes = [], []
    for i in range(20):
        episode = recorder.start("bench", None, f"alone-{i}")
        start = time.perf_counter()
        for _ in range(500):
            episode.step({"action_type": "exec", "command": "ls -la"}, observation)
        hooks.append((time.perf_counter() - start) / 500)
        start = time.perf_counter()
        episode.finish()
        finishes.append(time.perf_counter() - start)
    hook_us, finish_us = statistics.median(hooks) * 1e6, statistics.median(finishes) * 1e6
    recorder.close()
    trials = sum(1 for p in recorder.job_dir.iterdir() if p.is_dir())
    shutil.rmtree(folder)

    plain_ms = statistics.median(plain) * 1e3
    recorded_ms = statistics.median(recorded) * 1e3
    print(f"steps: {len(plain)} unrecorded, {len(recorded)} recorded ({trials} trial folders)")
    print(f"{'measure':44} {'value':>14} {'ratio':>7}")
    print(f"{'exec step, median: recorded / unrecorded':44}", end=" ")
    print(f"{recorded_ms:6.2f} / {plain_ms:5.2f} ms {recorded_ms / plain_ms:6.3f}x")
    print(f"{'ep.step() alone / unrecorded exec step':44}", end=" ")
    print(f"{hook_us:7.1f} us     {hook_us / 1e3 / plain_ms:6.4f}x")
    print(f"{'ep.finish() on the caller (writes queued)':44} {finish_us:7.1f} us")
    print("goal: recorded / unrecorded <= 1.05x (within noise); the hook alone well under 1%")


if __name__ == "__main__":
    main()
