"""One episode from reset to its end: the policy's actions, then evaluate, step after step.

A multi-step task (``[[steps]]``) answers evaluate with ``done=False`` and the next step's
instruction until its last step (or a missed ``min_reward``) ends the episode; the driver loops
until ``done``, asking the policy for each step's actions. ``check`` runs its no-op and oracle
episodes with it in-process; ``scripts/parity.py``, the benchmark and the tests drive a server
with it through :class:`ClientEnv`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from harbor_openenv.models import HarborAction, HarborObservation

if TYPE_CHECKING:
    from harbor_openenv.client.env_client import HarborEnvClient

# Given the observation that opened a step (reset's, or a multi-step evaluate's with done=False),
# the actions to run before that step's evaluate.
Policy = Callable[[HarborObservation], Sequence[HarborAction]]

# More evaluates than any task has steps: a server that never ends the episode is an error.
MAX_EVALUATES = 1000


class Env(Protocol):
    """What the driver drives: OpenEnv's in-process ``reset`` and ``step`` (a
    :class:`~harbor_openenv.server.environment.HarborEnvironment`), or a client through
    :class:`ClientEnv`."""

    def reset(self, *, task_id: str) -> HarborObservation: ...

    def step(self, action: HarborAction) -> HarborObservation: ...


class ClientEnv:
    """A connected :class:`~harbor_openenv.client.env_client.HarborEnvClient` as an
    :class:`Env`: each call's observation (which carries its reward and ``done``)."""

    def __init__(self, client: HarborEnvClient) -> None:
        self.client = client

    def reset(self, *, task_id: str) -> HarborObservation:
        observation: HarborObservation = self.client.reset(task_id=task_id).observation
        return observation

    def step(self, action: HarborAction) -> HarborObservation:
        observation: HarborObservation = self.client.step(action).observation
        return observation


@dataclass
class EpisodeResult:
    """What one episode gave: its reward (None: none), every error on the way, how far it got.

    ``refused``: reset answered an error (no episode ran); ``last``: the last observation (the
    one that ended the episode when ``done``); ``observations``: all of them, when kept.
    """

    task_id: str
    reward: float | None = None
    error: str | None = None
    evaluates: int = 0
    done: bool = False
    refused: bool = False
    last: HarborObservation | None = None
    observations: list[HarborObservation] = field(default_factory=list)


def nop(observation: HarborObservation) -> Sequence[HarborAction]:
    """The no-op agent: does nothing, so every step is evaluated as it was handed over."""
    return ()


def oracle(token: str, steps: int | None = None) -> Policy:
    """The oracle agent: runs the (step's) solution/solve.sh before each evaluate, or only before
    the first ``steps`` steps' (doing nothing in the later ones)."""

    def policy(observation: HarborObservation) -> Sequence[HarborAction]:
        if steps is not None and _step_index(observation) >= steps:
            return ()
        return (HarborAction(action_type="solve", token=token),)

    return policy


def run_episode(
    env: Env,
    task_id: str,
    policy: Policy,
    token: str,
    *,
    stop: threading.Event | None = None,
    keep: bool = False,
    stop_on_error: bool = False,
) -> EpisodeResult:
    """Reset ``env`` on ``task_id``, then per step the policy's actions and evaluate, until done.

    ``token`` goes with each evaluate. ``stop`` interrupts between actions; ``keep`` keeps every
    observation in the result; ``stop_on_error`` ends the run at the first action answering an
    error, with no evaluate and no reward (as a Harbor trial whose agent failed).
    """
    episode = EpisodeResult(task_id)
    notes: list[str] = []

    def seen(obs: HarborObservation) -> HarborObservation:
        episode.last = obs
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
        episode.error, episode.done, episode.refused = f"reset: {obs.error}", True, True
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
                if stop_on_error:
                    episode.error = "; ".join(notes)
                    return episode
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


def _step(obs: HarborObservation) -> dict[str, Any]:
    """The step a multi-step task's observation opens (``name``, ``index``, ``count``), or {}."""
    step = (obs.info or {}).get("step")
    return step if isinstance(step, dict) else {}


def _step_index(obs: HarborObservation) -> int:
    """Which step ``obs`` opens, counting from 0 (a single-step task's only step: 0)."""
    index = _step(obs).get("index", 0)
    return index if isinstance(index, int) else 0


def _where(obs: HarborObservation) -> str:
    """``step 'name': `` for a multi-step task's step, else nothing."""
    step = _step(obs)
    return f"step {step['name']!r}: " if "name" in step else ""
