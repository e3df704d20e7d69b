"""The trainer's ``rollout`` action: a harness acts on the episode's task with the trainer's model,
through a capture session, then the episode is graded exactly as ``evaluate`` grades it.

The answer is evaluate's (reward, done=True, the verifier's info) with ``info["rollout"]``: the
capture proxy's record of every model call (token ids, logprobs, loss masks, each turn's parent by
token prefix), never the harness's own trace. A harness that crashed, ran out of time or never
called the model is not graded: reward None and an error, never 0.0. A multi-step task runs the
harness once per step, in the same session and budget, each step graded as evaluate does.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from harbor_openenv.episode.episode import ActionError, Episode
from harbor_openenv.episode.verdict import Outcome
from harbor_openenv.harness import (
    Budget,
    Harness,
    HarnessError,
    HarnessResult,
    HarnessRun,
    get_harness,
)
from harbor_openenv.harness.capture import CaptureError, CaptureSession, TrainerEndpoint
from harbor_openenv.harness.registry import UnknownHarness
from harbor_openenv.models import HarborAction, HarborObservation

GRACE_S = 30.0  # how long past its budget a harness may take to notice it before it is left


def rollout(episode: Episode, action: HarborAction) -> HarborObservation:
    """Run ``action.harness`` on the episode with the trainer's model, then grade it."""
    if not (action.harness and action.base_url and action.model):
        raise ActionError("rollout needs harness, base_url and model (the trainer's endpoint)")
    try:
        harness = get_harness(action.harness, episode.runtime.settings)
    except (UnknownHarness, HarnessError, ImportError) as exc:
        raise ActionError(f"rollout: {exc}") from None
    settings = episode.runtime.settings
    budget = Budget(
        max_turns=min(action.max_turns or settings.rollout_max_turns, settings.rollout_max_turns),
        timeout_s=min(action.timeout_s or settings.rollout_timeout_s, settings.rollout_timeout_s),
    )
    trainer = TrainerEndpoint(action.base_url, action.model, action.api_key)
    try:
        session = episode.runtime.capture().open(
            trainer,
            max_model_calls=budget.max_turns,
            sampling=dict(action.sampling or {}),
            task=episode.task.id,
            harness=harness.name,
        )
    except CaptureError as exc:
        raise ActionError(f"rollout: {exc}") from None
    deadline = time.monotonic() + budget.timeout_s
    try:
        observation, result, graded = _act_and_grade(
            episode, harness, session, action.model, budget, deadline
        )
        captured = session.export()
    finally:
        session.close()
    info: dict[str, Any] = {
        **observation.info,
        "rollout": {"harness": harness.name, "status": result.status, **captured},
    }
    if episode.record is not None:
        episode.record.rollout(harness.name, action.model, captured["turns"])
    if not graded:  # the harness failed: no verifier ran
        episode.outcome = Outcome(None, observation.error, "", info)
    answer: HarborObservation = observation.model_copy(
        update={"action_type": "rollout", "info": info}
    )
    return answer


def _act_and_grade(
    episode: Episode,
    harness: Harness,
    session: CaptureSession,
    model: str,
    budget: Budget,
    deadline: float,
) -> tuple[HarborObservation, HarnessResult, bool]:
    """The harness on each step's instruction, each followed by evaluate, until the episode is
    done (graded) or the harness fails (reward None, done, not graded)."""
    while True:
        left = deadline - time.monotonic()
        run = HarnessRun(
            sandbox=episode.sandbox,
            instruction=episode.instruction,
            user=episode.agent_user or "",
            workdir=episode.sandbox.workdir,
            model=session.endpoint(model),
            budget=Budget(max(budget.max_turns - session.model_calls, 1), max(left, 0.0)),
            channel=episode.runtime.settings.exec_channel,
        )
        calls = session.model_calls
        result = _run(harness, run, session) if left > 0 else HarnessResult("timeout")
        error = _failure(result, session.model_calls - calls)
        if error is not None:
            return episode.observe("rollout", done=True, error=error), result, False
        graded = episode.evaluate()
        if graded.done:
            return graded, result, True


def _run(harness: Harness, run: HarnessRun, session: CaptureSession) -> HarnessResult:
    """``harness.run(run)`` on a thread of its own; one that outlives its budget by ``GRACE_S``
    is left behind with its session closed (its next model call is refused)."""
    ended: list[HarnessResult] = []

    def target() -> None:
        try:
            ended.append(harness.run(run))
        except Exception as exc:  # a harness that raised despite its protocol crashed
            ended.append(HarnessResult("crashed", f"{type(exc).__name__}: {exc}"))

    thread = threading.Thread(target=target, name=f"harness-{harness.name}", daemon=True)
    thread.start()
    thread.join(run.budget.timeout_s + GRACE_S)
    if not ended:
        session.close()
        return HarnessResult("timeout", "the harness did not stop within its time budget")
    return ended[0]


def _failure(result: HarnessResult, calls: int) -> str | None:
    """Why this run is not graded, or None."""
    if result.status == "crashed":
        return f"rollout: the harness crashed: {result.error or 'no reason given'}"
    if result.status == "timeout":
        return f"rollout: the harness ran out of time ({result.error or 'time budget spent'})"
    if calls == 0:
        return "rollout: the harness never called the model (nothing to train on, nothing graded)"
    return None
