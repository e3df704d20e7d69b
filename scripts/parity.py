"""Run a Harbor dataset under `harbor run` and under this runtime, with the nop and oracle policies.

    python scripts/parity.py [DATASET] [--build-network none] [--json FILE]

DATASET is a folder of Harbor tasks (or one holding tasks/); default: the bundled example.
Prints one row per task: task | harbor nop | harbor oracle | runtime nop | runtime oracle | same?
and exits 1 when a task that both sides run gets different rewards (or metrics) on either.

Harbor side: `harbor run` (Harbor >= 0.25 with its docker backend, which needs `docker compose`)
with one job holding both agents. Harbor is looked up in $HARBOR_OPENENV_HARBOR_VENV (default
~/.cache/harbor-openenv/harbor-venv, installed by .ci/interop-tools.sh), else on PATH.
Runtime side: a harbor-openenv server on 127.0.0.1 (harbor_openenv.client.launch) driven over its
WebSocket API by the episode driver (harbor_openenv.client.driver); nop is reset + evaluate,
oracle is reset + solve + evaluate, for each step of a multi-step task.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harbor_openenv.client import driver
from harbor_openenv.client.launch import Server
from harbor_openenv.tasks.dataset import Dataset

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HARBOR_VENV = Path.home() / ".cache" / "harbor-openenv" / "harbor-venv"
POLICIES = ("nop", "oracle")

Outcome = dict[str, Any]  # {"reward": float | None, "metrics": dict, "error": str | None}


def harbor_executable() -> Path:
    """`harbor` from $HARBOR_OPENENV_HARBOR_VENV (or its default), else from PATH."""
    venv = Path(os.environ.get("HARBOR_OPENENV_HARBOR_VENV") or DEFAULT_HARBOR_VENV)
    candidate = venv / "bin" / "harbor"
    if candidate.is_file():
        return candidate
    found = shutil.which("harbor")
    if found:
        return Path(found)
    raise SystemExit(f"harbor is not installed: run .ci/interop-tools.sh (looked in {venv})")


def tasks_root(dataset: Path) -> Path:
    return dataset / "tasks" if (dataset / "tasks").is_dir() else dataset


# -- Harbor ------------------------------------------------------------------------------------


def start_harbor(
    root: Path, work: Path, build_network: str | None, concurrency: int
) -> tuple[subprocess.Popen, Path]:
    """Start one `harbor run` job with both agents over every task folder of ``root``."""
    job_name = time.strftime("parity-%Y%m%d-%H%M%S")
    environment: dict[str, Any] = {"type": "docker"}
    if build_network:
        # Harbor builds through compose (BuildKit); a daemon without its default bridge needs
        # the build network named, as the runtime gets HARBOR_OPENENV_BUILD_NETWORK.
        overlay = work / "build-network.json"
        build = {"network": build_network}
        overlay.write_text(json.dumps({"services": {"main": {"build": build}}}))
        environment["extra_docker_compose"] = [str(overlay)]
    config = {
        "job_name": job_name,
        "jobs_dir": str(work / "jobs"),
        "agents": [{"name": name} for name in POLICIES],
        "environment": environment,
        "datasets": [{"path": str(root)}],
    }
    (work / "job.json").write_text(json.dumps(config))
    # LiteLLM (imported by Harbor) would otherwise fetch its model price list from the internet.
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [str(harbor_executable()), "run", "-c", str(work / "job.json")]
    command += ["-n", str(concurrency), "-y", "-q"]
    log = (work / "harbor.log").open("w")
    process = subprocess.Popen(command, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT)
    return process, work / "jobs" / job_name


def harbor_results(root: Path, job_dir: Path) -> dict[str, dict[str, Outcome]]:
    """Per task id (relative to root) and agent: Harbor's reward, metrics and exception."""
    results: dict[str, dict[str, Outcome]] = {}
    for path in sorted(job_dir.glob("*/result.json")):
        trial = json.loads(path.read_text())
        task_id = Path(trial["task_id"]["path"]).resolve().relative_to(root.resolve()).as_posix()
        rewards = (trial.get("verifier_result") or {}).get("rewards")
        exception = trial.get("exception_info") or {}
        outcome: Outcome = {
            "reward": scalar(rewards) if rewards else None,
            "metrics": rewards or {},
            "error": exception.get("exception_type"),
        }
        results.setdefault(task_id, {})[trial["agent_info"]["name"]] = outcome
    return results


def scalar(rewards: dict[str, float]) -> float | None:
    """The reward Harbor reports for a trial: the `reward` key, or the only key."""
    if "reward" in rewards:
        return rewards["reward"]
    return next(iter(rewards.values())) if len(rewards) == 1 else None


# -- this runtime ------------------------------------------------------------------------------


def runtime_server(root: Path, build_network: str | None, log: Path) -> Server:
    """A harbor-openenv server on 127.0.0.1 with a fresh orchestration token."""
    env = {"HARBOR_OPENENV_BUILD_NETWORK": build_network} if build_network else {}
    try:
        return Server(root, log=log, timeout=60, **env)
    except RuntimeError:
        raise SystemExit(f"the runtime server did not start; see {log}") from None


def episode(server: Server, task_id: str, policy: str) -> Outcome:
    """nop: reset, evaluate; oracle: reset, solve, evaluate; each step of a multi-step task.

    A solve that answers an error ends the episode there without a reward, as Harbor's trial
    ends when its oracle agent fails.
    """
    actor = driver.oracle(server.token) if policy == "oracle" else driver.nop
    with server.client() as client:
        run = driver.run_episode(
            driver.ClientEnv(client), task_id, actor, server.token, stop_on_error=True
        )
    assert run.last is not None  # reset answered, at least
    if run.refused or not run.done:  # reset refused the task, or a solve failed
        outcome: Outcome = {"reward": None, "metrics": {}, "error": run.last.error}
        return {**outcome, "refused": True} if run.refused else outcome
    info = run.last.info
    return {
        "reward": run.reward,
        # a multi-step task's reward is its strategy's metrics, as Harbor's trial reward
        "metrics": info.get("final_metrics") or info.get("metrics", {}),
        "error": run.last.error,
    }


# -- the table ---------------------------------------------------------------------------------


def compare(harbor: dict[str, Outcome], runtime: dict[str, Outcome]) -> tuple[bool | None, str]:
    """Whether both sides agree on one task: None when Harbor skipped it and we refused it."""
    if not harbor and all(runtime[p].get("refused") for p in POLICIES):
        return None, "n/a (text-only)"
    problems = []
    for policy in POLICIES:
        ours, theirs = runtime[policy], harbor.get(policy)
        if theirs is None:
            problems.append(f"{policy}: Harbor ran no trial")
        elif ours["reward"] != theirs["reward"]:
            problems.append(f"{policy}: reward {theirs['reward']} vs {ours['reward']}")
        elif ours["metrics"] != theirs["metrics"]:
            problems.append(f"{policy}: metrics {theirs['metrics']} vs {ours['metrics']}")
    return not problems, "; ".join(problems) or "yes"


def cell(outcome: Outcome | None) -> str:
    if outcome is None:
        return "skipped"
    if outcome.get("refused"):
        return "refused"
    if outcome["reward"] is None:
        return f"None ({(outcome['error'] or '?').split(':')[0][:40]})"
    return f"{outcome['reward']:g}"


def table(rows: dict[str, dict[str, Any]]) -> str:
    header = ["task", "harbor nop", "harbor oracle", "runtime nop", "runtime oracle", "same?"]
    lines = [header]
    for task_id, row in rows.items():
        lines.append(
            [
                task_id,
                *(cell(row["harbor"].get(p)) for p in POLICIES),
                *(cell(row["runtime"][p]) for p in POLICIES),
                row["verdict"],
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = [" | ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in lines]
    text.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(text)


def run(dataset: Path, build_network: str | None, concurrency: int, work: Path) -> dict[str, Any]:
    root = tasks_root(dataset)
    ids = Dataset(root).ids
    harbor, job_dir = start_harbor(root, work, build_network, concurrency)
    try:
        jobs = [(task_id, policy) for task_id in ids for policy in POLICIES]
        with (
            runtime_server(root, build_network, work / "runtime-server.log") as server,
            ThreadPoolExecutor(max_workers=concurrency) as pool,
        ):
            outcomes = list(pool.map(lambda job: episode(server, *job), jobs))
    finally:
        if harbor.wait() != 0:
            log = (work / "harbor.log").read_text(errors="replace")[-4000:]
            raise SystemExit(f"harbor run exited with {harbor.returncode}:\n{log}")
    ours: dict[str, dict[str, Outcome]] = {}
    for (task_id, policy), outcome in zip(jobs, outcomes, strict=True):
        ours.setdefault(task_id, {})[policy] = outcome
    theirs = harbor_results(root, job_dir)
    rows: dict[str, dict[str, Any]] = {}
    for task_id in sorted(set(ids) | set(theirs)):
        row = {"harbor": theirs.get(task_id, {}), "runtime": ours[task_id]}
        row["same"], row["verdict"] = compare(row["harbor"], row["runtime"])
        rows[task_id] = row
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", nargs="?", type=Path, default=ROOT / "examples" / "dataset")
    parser.add_argument(
        "--build-network",
        help="network for task image builds on both sides (e.g. none or host; default: the"
        " engine's)",
    )
    parser.add_argument("-n", "--concurrency", type=int, default=4, help="episodes at once")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", type=Path, help="keep Harbor's jobs and the logs in this folder")
    args = parser.parse_args(argv)
    if not args.dataset.is_dir():
        parser.error(f"{args.dataset}: not a folder")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        rows = run(args.dataset, args.build_network, args.concurrency, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="parity-") as work:
            rows = run(args.dataset, args.build_network, args.concurrency, Path(work))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str))
    differing = [task_id for task_id, row in rows.items() if row["same"] is False]
    if differing:
        print(f"rewards differ on {len(differing)} task(s): {', '.join(differing)}")
        return 1
    compared = sum(row["same"] is True for row in rows.values())
    print(f"identical rewards and metrics on all {compared} tasks both sides run")
    if any(row["same"] is None for row in rows.values()):
        print("n/a: text-only tasks: Harbor skips them, this runtime refuses them at reset")
    return 0


if __name__ == "__main__":
    sys.exit(main())
