"""Rollouts (issue 27): a rollout action's wall time against the same harness run directly, and
rollouts per minute at 8 concurrent sessions, in one run against one scripted vLLM-like model
(tests/support/_scripted_model.py) on the bundled ``hello-world``.

The baseline is mini-swe-agent on its own: its ``DefaultAgent`` and ``LitellmModel`` (the same
``mini.yaml`` config) calling the scripted model with no proxy, its own ``DockerEnvironment``
(``docker exec`` per command) in a container of the same Dockerfile. The rollout is
``HarborEnvClient.rollout`` from the client: the WebSocket, the capture session and proxy, the
harness through the sandbox, and the grading, which the baseline does not do; a step-level
evaluate of the same task is timed too, so the rollout's time without grading is printed beside.

    .venv/bin/python bench/rollout.py [--reps 5] [--concurrent 8]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import docker.errors

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from _scripted_model import SUBMIT, ScriptedModel  # noqa: E402

from harbor_openenv.client.launch import Server  # noqa: E402

TASKS = ROOT / "examples" / "dataset" / "tasks"
TASK = "hello-world"
SCRIPT = ["ls -la", "printf 'Hello, world!\\n' > hello.txt", "cat hello.txt", SUBMIT]
IMAGE = "harbor-openenv-bench-rollout:hello-world"
LABEL = {"harbor-openenv-bench": "rollout"}


def direct(model: ScriptedModel, name: str) -> float:
    """mini-swe-agent alone against the scripted model, in a fresh container; the run's seconds."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments.docker import DockerEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    config = get_config_from_spec("mini")
    labels = [arg for key, value in LABEL.items() for arg in ("--label", f"{key}={value}")]
    environment = DockerEnvironment(
        image=IMAGE,
        cwd="/app",
        env=config["environment"]["env"],
        run_args=["--rm", "--network", "none", *labels],
    )
    try:
        model_ = LitellmModel(
            model_name=f"openai/{name}",
            model_kwargs={"api_base": model.base_url, "api_key": "direct", "drop_params": True},
            cost_tracking="ignore_errors",
            observation_template=config["model"]["observation_template"],
            format_error_template=config["model"]["format_error_template"],
        )
        agent_config = {k: v for k, v in config["agent"].items() if k != "mode"}
        agent = DefaultAgent(model_, environment, **{**agent_config, "cost_limit": 0})
        start = time.perf_counter()
        ended = agent.run("Write 'Hello, world!' to /app/hello.txt.")
        seconds = time.perf_counter() - start
        assert ended.get("exit_status") == "Submitted", ended
        return seconds
    finally:
        environment.cleanup()


def rollout(server: Server, model: ScriptedModel, name: str) -> float:
    with server.client() as env:
        env.reset(task_id=TASK)
        start = time.perf_counter()
        answer = env.rollout("mini-swe-agent", base_url=model.base_url, model=name).observation
        seconds = time.perf_counter() - start
    assert answer.reward == 1.0, answer.error
    return seconds


def evaluate(server: Server) -> float:
    with server.client() as env:
        env.reset(task_id=TASK)
        env.exec("printf 'Hello, world!\\n' > hello.txt")
        start = time.perf_counter()
        assert env.evaluate().reward == 1.0
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=8)
    args = parser.parse_args()
    client = docker.from_env()
    client.images.build(
        path=str(TASKS / TASK / "environment"), tag=IMAGE, labels=LABEL, network_mode="none"
    )
    # one model name, as a trainer has: its endpoint is probed once (the scripted model answers
    # each conversation by its own turn count, so concurrent runs share the name safely)
    names = ["bench"] * (max(args.reps, 2 * args.concurrent) + 1)
    sessions = str(args.concurrent + 2)
    try:
        with (
            ScriptedModel({names[0]: SCRIPT}) as model,
            Server(TASKS, HARBOR_OPENENV_MAX_SESSIONS=sessions) as server,
        ):
            rollout(server, model, names[-1])  # warm: the harness's import, the image, the probe
            direct(model, names[-1])
            rows: dict[str, list[float]] = {"direct": [], "rollout": [], "evaluate": []}
            for name in names[: args.reps]:  # interleaved, so load drifts hit both alike
                rows["direct"].append(direct(model, name))
                rows["rollout"].append(rollout(server, model, name))
                rows["evaluate"].append(evaluate(server))
            med = {key: statistics.median(times) for key, times in rows.items()}
            batch = names[: 2 * args.concurrent]
            throughput = {}
            for key, one in (
                ("rollout", lambda n: rollout(server, model, n)),
                ("direct", lambda n: direct(model, n)),
            ):
                start = time.perf_counter()
                with ThreadPoolExecutor(args.concurrent) as pool:
                    list(pool.map(one, batch))
                throughput[key] = len(batch) / (time.perf_counter() - start) * 60
    finally:
        for container in client.containers.list(
            all=True, filters={"label": "harbor-openenv-bench"}
        ):
            with contextlib.suppress(docker.errors.NotFound):  # --rm may be removing it
                container.remove(force=True)
        client.images.remove(IMAGE, force=True)
    print(
        f"load average {os.getloadavg()[0]:.1f}; {args.reps} reps, {len(SCRIPT)} model calls each"
    )
    ratio, bare = med["rollout"] / med["direct"], med["rollout"] - med["evaluate"]
    print(f"direct mini-swe-agent run      {med['direct']:.2f} s (median)")
    print(f"rollout action (with grading)  {med['rollout']:.2f} s: {ratio:.2f}x")
    print(
        f"  without evaluate's {med['evaluate']:.2f} s     {bare:.2f} s:"
        f" {bare / med['direct']:.2f}x (goal <= 1.1x)"
    )
    print(
        f"{args.concurrent} concurrent: {throughput['rollout']:.1f} rollouts/min"
        f" (direct runs: {throughput['direct']:.1f}/min)"
    )


if __name__ == "__main__":
    main()
