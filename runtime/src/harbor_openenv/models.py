"""The wire models: one action type with an ``action_type`` tag, one observation, the state,
and the Task API's split and task spec."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from ._openenv import Action, Observation, State

ORCHESTRATION_ACTIONS = ("evaluate", "solve", "fork", "rollout")
MAX_FORKS = 16  # the most branches one fork action makes
Sampling = dict[str, float | int]


class HarborAction(Action):
    """exec/read/write/list are the agent's actions; evaluate/solve/fork/rollout are the
    trainer's."""

    action_type: Literal[
        "exec", "read", "write", "list", "evaluate", "solve", "fork", "rollout"
    ] = "exec"
    command: str | None = Field(default=None, description="exec: a bash command")
    path: str | None = Field(default=None, description="read/write/list: inside the workdir")
    content: str | None = Field(default=None, description="write: the file's new content")
    encoding: Literal["utf-8", "base64"] = Field(
        default="utf-8", description="write: how content is encoded"
    )
    timeout_s: float | None = Field(
        default=None, gt=0, description="exec, rollout: seconds, server-capped"
    )
    token: str | None = Field(
        default=None, description="evaluate/solve/fork/rollout: the orchestration token"
    )
    n: int | None = Field(
        default=None, ge=1, le=MAX_FORKS, description="fork: how many branches (default 1)"
    )
    harness: str | None = Field(default=None, description="rollout: the harness's name")
    base_url: str | None = Field(
        default=None, description="rollout: the trainer's OpenAI-compatible base URL"
    )
    model: str | None = Field(default=None, description="rollout: the served model's name")
    api_key: str | None = Field(
        default=None, description="rollout: the trainer endpoint's key, if it needs one"
    )
    sampling: Sampling | None = Field(
        default=None, description="rollout: sampling settings pinned on every model call"
    )
    max_turns: int | None = Field(
        default=None, ge=1, description="rollout: model calls allowed, server-capped"
    )


# The action as the server holds it: the token is read, never written back out. OpenEnv's web
# layer records each action with model_dump() and broadcasts the record to every /ws/ui visitor,
# so the server deserializes actions into this class, whose token (and a rollout's api_key) is
# left out of model_dump(), model_dump_json() and repr(). Clients keep sending HarborAction,
# which serializes it; the JSON schema (title and description included) is HarborAction's.
class ServedAction(HarborAction):
    __doc__ = HarborAction.__doc__
    model_config = ConfigDict(title="HarborAction")

    token: str | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="evaluate/solve/fork/rollout: the orchestration token",
    )
    api_key: str | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="rollout: the trainer endpoint's key, if it needs one",
    )


class HarborObservation(Observation):
    """What an action returned; ``error`` says why it did not do what was asked."""

    action_type: str = "reset"
    task_id: str | None = None
    instruction: str | None = None
    workdir: str | None = None
    output: str = ""
    encoding: Literal["utf-8", "base64"] = "utf-8"
    exit_code: int | None = None
    timed_out: bool = False
    truncated: bool = False
    error: str | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class HarborState(State):
    task_id: str | None = None
    workdir: str | None = None
    evaluated: bool = False
    reward: float | None = None
    task_count: int = 0
