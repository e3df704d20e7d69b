"""task.toml's env tables, resolved once per episode from the server's environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from harbor_openenv.tasks.config import StepConfig, resolve_env, verifier_environment, verifier_mode
from harbor_openenv.tasks.task import Task


@dataclass(frozen=True)
class Envs:
    """task.toml's env tables with ``${VAR}`` resolved; the verifier's are keyed by step name."""

    environment: dict[str, str] = field(default_factory=dict)
    solution: dict[str, str] = field(default_factory=dict)
    verifier: dict[str | None, dict[str, str]] = field(default_factory=dict)
    verifier_container: dict[str | None, dict[str, str]] = field(default_factory=dict)


def resolve_envs(task: Task) -> Envs:
    """Resolve every env table up front, so a missing variable refuses reset, never half-runs."""
    config, environ, where = task.config, dict(os.environ), f"{task.id}/task.toml: "
    envs = Envs(
        environment=resolve_env(config.environment.env, where + "[environment].env", environ),
        solution=resolve_env(config.solution.env, where + "[solution].env", environ),
    )
    steps: list[StepConfig | None] = list(config.steps or []) or [None]
    for index, step in enumerate(steps):
        key = step.name if step else None
        merged = {**config.verifier.env, **(step.verifier.env if step else {})}
        field_name = f"[[steps]][{index}].verifier.env" if step else "[verifier].env"
        envs.verifier[key] = resolve_env(merged, where + field_name, environ)
        if verifier_mode(config, step) == "separate":
            table = verifier_environment(config, step)
            envs.verifier_container[key] = resolve_env(
                table.env, where + "[verifier.environment].env", environ
            )
    return envs
