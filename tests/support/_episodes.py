"""Episodes driven as a trainer would, for the task-format tests of two layers."""

from __future__ import annotations

from _server import TOKEN

from harbor_openenv.client import driver
from harbor_openenv.models import HarborObservation


def run(env, task_id: str, oracle_steps: int) -> list[HarborObservation]:
    """Reset, then per step: solve (for the first ``oracle_steps`` steps) and evaluate; the
    observations of the reset and of every evaluate."""
    policy = driver.oracle(TOKEN, steps=oracle_steps)
    episode = driver.run_episode(driver.ClientEnv(env), task_id, policy, TOKEN, keep=True)
    assert not episode.refused, episode.error
    for solved in (obs for obs in episode.observations if obs.action_type == "solve"):
        assert solved.error is None, solved.output
    assert episode.done, episode.error
    return [obs for obs in episode.observations if obs.action_type in ("reset", "evaluate")]
