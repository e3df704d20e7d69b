"""The one interface every harness implements: given a prepared episode sandbox, the task's
instruction and a model endpoint, act until done. A harness is the agent: it is untrusted, never
sees the orchestration token and grades nothing; the rollout action grades afterwards."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.sandbox.base import Sandbox


class HarnessError(HarborOpenEnvError):
    """A harness cannot be made ready: its package is missing, or has no build for the
    container's architecture."""


@dataclass(frozen=True)
class ModelEndpoint:
    """Where the harness's model calls go: the capture proxy, never the trainer's endpoint itself.

    ``base_url`` is OpenAI-compatible and reachable from the server's side (an inside harness has
    it relayed into the container); ``api_key`` is the rollout's capture session id, which reaches
    only this rollout's session."""

    base_url: str
    api_key: str
    model: str


@dataclass(frozen=True)
class Budget:
    """How far a harness may go: model turns and wall time."""

    max_turns: int
    timeout_s: float


@dataclass(frozen=True)
class HarnessRun:
    """One harness run: the episode's sandbox, as the agent's user in its working directory.
    ``channel``: the harness's commands may use the sandbox's exec channel (they are the agent's
    actions; the server's ``HARBOR_OPENENV_EXEC_CHANNEL`` decides)."""

    sandbox: Sandbox
    instruction: str
    user: str
    workdir: str | None
    model: ModelEndpoint
    budget: Budget
    channel: bool = False


@dataclass(frozen=True)
class HarnessResult:
    """How the run ended. ``log`` is the harness's own output (a tail), untrusted: the capture
    proxy's record, not this, is what a rollout returns."""

    status: Literal["completed", "turn_limit", "timeout", "crashed"]
    error: str | None = None
    log: str = ""


class Harness(Protocol):
    """A harness: ``beside`` runs in the server's process and acts through the sandbox; ``inside``
    is installed into the task container and runs there."""

    name: str
    where: Literal["beside", "inside"]

    def run(self, run: HarnessRun) -> HarnessResult:
        """Act on the task until the harness stops; raises nothing a harness's failure causes."""
        ...
