"""One episode from reset to its end: the policy's actions, then evaluate, step after step.

A multi-step task (``[[steps]]``) answers evaluate with ``done=False`` and the next step's
instruction until its last step (or a missed ``min_reward``) ends the episode; the driver loops
until ``done``, asking the policy for each step's actions. ``check`` runs its no-op and oracle
episodes with it; scripts and tests can drive any policy the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .models import HarborAction, HarborObservation

# Given the observation that opened a step (reset's, or a multi-step evaluate's with done=False),
# the actions to run before that step's evaluate.
Policy = Callable[[HarborObservation], Sequence[HarborAction]]

# More evaluates than any task has steps: a server that never ends the episode is an error.
MAX_EVALUATES = 1000


@dataclass
class Episode:
    """What one episode gave: its reward (None: none), every error on the way, how far it got."""

    task_id: str
    reward: float | None = None
    error: str | None = None
    evaluates: int = 0
    done: bool = False
    observations: list[HarborObservation] = field(default_factory=list)


def nop(observation: HarborObservation) -> Sequence[HarborAction]:
    """The no-op agent: does nothing, so every step is evaluated as it was handed over."""
    return ()


def oracle(token: str) -> Policy:
    """The oracle agent: runs the (step's) solution/solve.sh before each evaluate."""

    def policy(observation: HarborObservation) -> Sequence[HarborAction]:
        return (HarborAction(action_type="solve", token=token),)

    return policy


def run_episode(
    env: Any,
    task_id: str,
    policy: Policy,
    token: str,
    *,
    stop: threading.Event | None = None,
    keep: bool = False,
) -> Episode:
    """Reset ``env`` on ``task_id``, then per step the policy's actions and evaluate, until done.

    ``env`` is anything with OpenEnv's in-process ``reset(task_id=...)`` and ``step(action)``
    (a :class:`~harbor_openenv.environment.HarborEnvironment`). ``stop`` interrupts between
    actions; ``keep`` keeps every observation in the result.
    """
    episode = Episode(task_id)
    notes: list[str] = []

    def seen(obs: HarborObservation) -> HarborObservation:
        if keep:
            episode.observations.append(obs)
        return obs

    def interrupted() -> bool:
        if stop is not None and stop.is_set():
            notes.append("interrupted")
            return True
        return False

    if interrupted():
        episode.error = "interrupted"
        return episode
    obs = seen(env.reset(task_id=task_id))
    if obs.error:
        episode.error, episode.done = f"reset: {obs.error}", True
        return episode
    while True:
        where = _where(obs)
        for action in policy(obs):
            if interrupted():
                episode.error = "; ".join(notes)
                return episode
            done = seen(env.step(action))
            if done.error:
                notes.append(f"{where}{action.action_type}: {done.error}")
            elif action.action_type == "solve" and done.exit_code:
                notes.append(f"{where}solve.sh exited with {done.exit_code}")
            if done.done:  # an action ended the episode (it should not, but say so)
                episode.reward, episode.done = done.reward, True
                episode.error = "; ".join(notes) or None
                return episode
        if interrupted():
            episode.error = "; ".join(notes)
            return episode
        obs = seen(env.step(HarborAction(action_type="evaluate", token=token)))
        episode.evaluates += 1
        if obs.error:
            notes.append(f"{where}evaluate: {obs.error}")
        if obs.done:
            episode.reward, episode.done = obs.reward, True
            break
        if episode.evaluates >= MAX_EVALUATES:
            notes.append(f"the episode did not end after {MAX_EVALUATES} evaluates")
            break
    episode.error = "; ".join(notes) or None
    return episode


def _where(obs: HarborObservation) -> str:
    """``step 'name': `` for a multi-step task's step, else nothing."""
    step = (obs.info or {}).get("step")
    return f"step {step['name']!r}: " if isinstance(step, dict) and "name" in step else ""
