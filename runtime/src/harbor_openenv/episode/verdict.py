"""What grading answers: one verifier run's :class:`Verdict`, and an episode's :class:`Outcome`.

Each carries why there is no reward as a typed :class:`~harbor_openenv.tasks.reward.Failure`
beside its message, so that the metrics and the recorder (which names it as Harbor's exception)
never read the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from harbor_openenv.tasks.reward import Failure, Reward, scalar
from harbor_openenv.tasks.steps import final_metrics


@dataclass(frozen=True)
class Verdict:
    """One verifier run: its reward, the tail of test-stdout.txt, whether it timed out."""

    reward: Reward
    stdout: str
    timed_out: bool
    timeout: float

    @property
    def error(self) -> str | None:
        if self.timed_out:
            return f"the verifier timed out after {self.timeout:g} s ([verifier].timeout_sec)"
        return self.reward.error

    @property
    def failure(self) -> Failure | None:
        """The kind of :attr:`error` (None: there is none)."""
        return Failure.TIMEOUT if self.timed_out else self.reward.failure

    @property
    def metrics(self) -> dict[str, float] | None:
        """The verifier's result as Harbor counts it (None: there is none)."""
        return None if self.timed_out or not self.reward.metrics else self.reward.metrics

    @property
    def value(self) -> float | None:
        """The scalar reward (None after a timeout, whatever the files say)."""
        return None if self.timed_out else self.reward.value


@dataclass(frozen=True)
class Outcome:
    """How an episode ended: what its last answer says and what its record keeps."""

    reward: float | None
    error: str | None = None
    output: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] | None = None  # recorded beside the reward (None: none usable)
    failure: Failure | None = None  # the kind of ``error`` (None with an error: the episode's)

    @property
    def kind(self) -> str:
        """As the metrics count episodes: ``reward``, ``error`` (no reward) or ``timeout``."""
        if self.failure is Failure.TIMEOUT:
            return "timeout"
        return "error" if self.reward is None else "reward"


def steps_outcome(
    step_metrics: list[dict[str, float] | None],
    strategy: Literal["mean", "final"] | None,
    reward_key: str | None,
    info: dict[str, Any],
    output: str,
    stop: str | None,
    stopped: Failure,
) -> Outcome:
    """How a multi-step episode ends: its steps' results combined by the task's ``strategy``
    (``stop``: why it ended before its last step, of kind ``stopped``)."""
    metrics = final_metrics(step_metrics, strategy)
    failure: Failure | None
    if metrics:
        final, error = scalar(metrics, reward_key)
        failure = None if error is None else Failure.INVALID
    else:
        final, error, failure = None, "no step has a verifier result", Failure.NO_REWARD
    info = {**info, "final_metrics": metrics, "reward_strategy": strategy or "mean"}
    error = "; ".join(part for part in (stop, error) if part) or None
    return Outcome(final, error, output, info, metrics, stopped if stop else failure)
