"""Multi-step episodes (``[[steps]]``): the gate between steps and the final reward, as Harbor
0.25's ``MultiStepTrial`` computes them, over each step's metrics (None: no verifier result).
"""

from __future__ import annotations

import math
from typing import Literal

from harbor_openenv.tasks.config import StepConfig


def min_reward_failure(
    metrics: dict[str, float] | None, min_reward: float | dict[str, float]
) -> str | None:
    """Why a step's metrics miss its ``min_reward`` (None when they pass).

    A number gates the ``reward`` key, a table gates each of its keys; a missing key or a missing
    verifier result counts as -inf.
    """
    thresholds = min_reward if isinstance(min_reward, dict) else {"reward": min_reward}
    for key, threshold in thresholds.items():
        actual = (metrics or {}).get(key, -math.inf)
        if actual < threshold:
            return f"{key} = {actual:g} is below min_reward {threshold:g}"
    return None


def gate(step: StepConfig, metrics: dict[str, float] | None, error: str | None) -> str | None:
    """Why the episode stops after ``step`` (None: the next step may start)."""
    if metrics is None:
        return f"step {step.name!r} has no verifier result ({error})"
    if step.min_reward is not None:
        failure = min_reward_failure(metrics, step.min_reward)
        if failure:
            return f"step {step.name!r}: {failure}; the remaining steps are skipped"
    return None


def final_metrics(
    results: list[dict[str, float] | None], strategy: Literal["mean", "final"] | None
) -> dict[str, float] | None:
    """The task's metrics from every step's: ``final`` takes the last step's verbatim; ``mean``
    (the default) averages each key over the steps that have a result, a missing key counting 0."""
    if strategy == "final":
        return results[-1] if results else None
    valid = [metrics for metrics in results if metrics is not None]
    keys = {key for metrics in valid for key in metrics}
    if not keys:
        return None
    return {key: sum(metrics.get(key, 0.0) for metrics in valid) / len(valid) for key in keys}
