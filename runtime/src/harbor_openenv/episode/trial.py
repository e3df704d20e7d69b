"""An ended episode's record as Harbor's trial folder: pure, the shapes of Harbor 0.25's JSON
(``TrialResult``, ``ExceptionInfo``, ATIF trajectories) beside the one function that fills them,
so that a change of Harbor's format is this module's change; :mod:`.record` keeps the record and
writes what :func:`trial_files` answers::

    RECORD_DIR/
      2026-12-01__02-53-53/           one job per server run (Harbor's job-name format, UTC)
        config.json                   JobConfig
        result.json                   JobResult: trials started and ended, errors, mean reward
        hello-world__1a2b3c4d/        one trial per episode: task name __ 8 hex digits
          config.json                 TrialConfig, written when the episode starts
          result.json                 TrialResult: reward and metrics, timings, error; at the end
          exception.txt               the episode's error, when it has one
          agent/trajectory.json       the instruction, then each action and what it answered
          verifier/test-stdout.txt    the verifier's output
          verifier/reward.json        the verifier's metrics
          steps/<step>/agent/trajectory.json, steps/<step>/verifier/...   (multi-step tasks,
                                      instead of agent/ and verifier/, as Harbor lays them out)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from harbor_openenv._version import __version__
from harbor_openenv.tasks.reward import Failure
from harbor_openenv.tasks.steps import final_metrics

MAX_TEXT_CHARS = 16 * 1024
MAX_EPISODE_CHARS = 4 * 1024 * 1024
ATIF_VERSION = "ATIF-v1.7"
AGENT_NAME = "openenv-client"  # whoever drives the environment: the server cannot know

# Harbor's exception of each kind (harbor/verifier/verifier.py, harbor/trial/errors.py)
HARBOR_EXCEPTIONS = {
    Failure.NO_REWARD: "RewardFileNotFoundError",
    Failure.EMPTY: "RewardFileEmptyError",
    Failure.INVALID: "VerifierOutputParseError",
    Failure.TIMEOUT: "VerifierTimeoutError",
    Failure.EPISODE: "EpisodeError",
}

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def bounded(text: str, cap: int) -> str:
    """``text`` if it fits in ``cap`` characters, else its head and tail around a note."""
    if len(text) <= cap:
        return text
    head = cap // 2
    cut = len(text) - cap
    note = f"\n[... {cut} characters cut: the record keeps {cap} of each output ...]\n"
    return text[:head] + note + text[len(text) - (cap - head) :]


def safe_name(name: str, default: str) -> str:
    """A folder name from ``name``: letters, digits, ``.``, ``_``, ``-``; never ``.`` or ``..``."""
    safe = _UNSAFE.sub("_", name).strip("._") or default
    return safe[:64]


def stamp(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def timing(start: float | None, end: float | None) -> dict[str, str | None]:
    return {"started_at": stamp(start), "finished_at": stamp(end)}


@dataclass(frozen=True)
class Action:
    at: float
    kind: str
    arguments: dict[str, Any]
    output: str
    extra: dict[str, Any]


@dataclass(frozen=True)
class Run:
    at: float
    step: str | None
    reward: float | None
    metrics: dict[str, float]
    output: str
    error: str | None
    failure: Failure | None = None


@dataclass(frozen=True)
class Rollout:
    harness: str
    model: str
    turns: list[dict[str, Any]]
    tokens_kept: bool


TOKEN_FIELDS = ("prompt_token_ids", "completion_token_ids", "logprobs")


@dataclass
class Segment:
    """The actions between two verifier runs (a multi-step task's step), with its instruction."""

    started: float
    instruction: str | None = None
    actions: list[Action] = field(default_factory=list)


def arguments(action: Mapping[str, Any]) -> dict[str, Any]:
    """An action's arguments as a tool call's (its token and metadata never), each bounded."""
    arguments: dict[str, Any] = {}
    for key, value in action.items():
        if key in ("action_type", "token", "metadata") or value is None:
            continue
        if key == "encoding" and value == "utf-8":
            continue
        if isinstance(value, str):
            arguments[key] = bounded(value, MAX_TEXT_CHARS)
        elif isinstance(value, bool | int | float):
            arguments[key] = value
        else:
            arguments[key] = bounded(json.dumps(value, default=str), MAX_TEXT_CHARS)
    return arguments


def observed(observation: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """An observation's output (bounded) and what else a tool result keeps of it."""
    output = observation.get("output")
    text = bounded(output if isinstance(output, str) else "", MAX_TEXT_CHARS)
    extra: dict[str, Any] = {}
    for key in ("exit_code", "reward"):
        if isinstance(observation.get(key), int | float):
            extra[key] = observation[key]
    for key in ("timed_out", "truncated", "done"):
        if observation.get(key) is True:
            extra[key] = True
    if observation.get("encoding") == "base64":
        extra["encoding"] = "base64"
    error = observation.get("error")
    if isinstance(error, str) and error:
        extra["error"] = bounded(error, MAX_TEXT_CHARS)
    return text, extra


@dataclass(frozen=True)
class Ended:
    """An ended episode's record, as the trial folder shows it."""

    task_id: str
    episode_id: str
    trial_name: str
    trial_id: str
    trial_uri: str
    started: float
    finished: float | None
    segments: list[Segment]
    runs: list[Run]
    dropped: int  # actions counted, not stored
    actions: int
    rollout: Rollout | None


@dataclass
class Trial:
    """A trial folder's files by their path in it (JSON, text), its rewards and whether it
    errored, as the job's result counts it."""

    json: dict[PurePosixPath, Any] = field(default_factory=dict)
    texts: dict[PurePosixPath, str] = field(default_factory=dict)
    rewards: dict[str, float] | None = None
    errored: bool = False

    def add_json(self, path: PurePosixPath, data: Any) -> None:
        self.json[path] = data

    def add_text(self, path: PurePosixPath, text: str) -> None:
        self.texts[path] = text

    def add_verifier(self, folder: PurePosixPath, run: Run) -> None:
        self.add_text(folder / "test-stdout.txt", run.output)
        if run.metrics:
            self.add_json(folder / "reward.json", run.metrics)


def _exception(verdict: Run) -> dict[str, Any] | None:
    """Harbor's ExceptionInfo of a verifier run's error (None: it has none)."""
    if not verdict.error:
        return None
    return {
        "exception_type": HARBOR_EXCEPTIONS[verdict.failure or Failure.EPISODE],
        "exception_message": verdict.error,
        "exception_traceback": "",
        "occurred_at": stamp(verdict.at),
    }


def _rewards(verdict: Run | None) -> dict[str, float] | None:
    if verdict is None:
        return None
    if verdict.metrics:
        return verdict.metrics
    return None if verdict.reward is None else {"reward": verdict.reward}


def _trajectory(
    episode: Ended, segment: Segment, notes: list[str], end: float | None
) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    if segment.instruction:
        steps.append(
            {
                "step_id": 1,
                "timestamp": stamp(segment.started),
                "source": "user",
                "message": segment.instruction,
            }
        )
    for action in segment.actions:
        call = f"call_{len(steps) + 1}"
        summary = str(action.arguments.get("command") or action.arguments.get("path") or "")
        summary = summary.splitlines()[0][:200] if summary else ""
        result: dict[str, Any] = {"source_call_id": call, "content": action.output}
        if action.extra:
            result["extra"] = action.extra
        steps.append(
            {
                "step_id": len(steps) + 1,
                "timestamp": stamp(action.at),
                "source": "agent",
                "message": f"{action.kind} {summary}".strip(),
                "tool_calls": [
                    {
                        "tool_call_id": call,
                        "function_name": action.kind,
                        "arguments": action.arguments,
                    }
                ],
                "observation": {"results": [result]},
            }
        )
    if not steps:
        steps.append(
            {
                "step_id": 1,
                "timestamp": stamp(end or segment.started),
                "source": "system",
                "message": "no action was recorded",
            }
        )
    trajectory: dict[str, Any] = {
        "schema_version": ATIF_VERSION,
        "session_id": episode.episode_id,
        "agent": {"name": AGENT_NAME, "version": "unknown"},
        "steps": steps,
        "final_metrics": {"total_steps": len(steps)},
        "extra": {"task_id": episode.task_id, "recorded_by": f"harbor-openenv {__version__}"},
    }
    if notes:
        trajectory["notes"] = " ".join(notes)
    return trajectory


def _tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """A captured chat message's tool calls as ATIF's (arguments decoded where they are JSON)."""
    calls = []
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        raw = function.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            arguments = None
        calls.append(
            {
                "tool_call_id": str(call.get("id") or f"call_{index + 1}"),
                "function_name": str(function.get("name") or "unknown"),
                "arguments": arguments if isinstance(arguments, dict) else {"raw": str(raw)},
            }
        )
    return calls or None


def _with_rollout(trajectory: dict[str, Any], rollout: Rollout) -> dict[str, Any]:
    """``trajectory`` with the rollout's captured turns as its agent steps, their token data in
    each step's metrics and the totals in ``final_metrics``."""
    steps = [step for step in trajectory["steps"] if step["source"] != "system"]
    for turn in rollout.turns:
        message = turn.get("message") or {}
        content = message.get("content")
        metrics: dict[str, Any] = {
            "prompt_tokens": turn.get("n_prompt"),
            "completion_tokens": turn.get("n_sampled"),
        }
        metrics.update({k: turn[k] for k in TOKEN_FIELDS if turn.get(k) is not None})
        metrics["extra"] = {"node_id": turn.get("node_id"), "parent_id": turn.get("parent_id")}
        step: dict[str, Any] = {
            "step_id": len(steps) + 1,
            "source": "agent",
            "model_name": rollout.model,
            "message": bounded(content if isinstance(content, str) else "", MAX_TEXT_CHARS),
            "metrics": metrics,
            "llm_call_count": 1,
        }
        calls = _tool_calls(message)
        if calls:
            step["tool_calls"] = calls
        steps.append(step)
    notes = [trajectory["notes"]] if trajectory.get("notes") else []
    if not rollout.tokens_kept:
        notes.append("The rollout's token ids are not stored: the episode's record is full.")
    return {
        **trajectory,
        "agent": {"name": rollout.harness, "version": "unknown", "model_name": rollout.model},
        "steps": steps,
        "final_metrics": {
            "total_steps": len(steps),
            "total_prompt_tokens": sum(t.get("n_prompt") or 0 for t in rollout.turns),
            "total_completion_tokens": sum(t.get("n_sampled") or 0 for t in rollout.turns),
        },
        **({"notes": " ".join(notes)} if notes else {}),
    }


def _rollout_result(rollout: Rollout) -> dict[str, Any]:
    """Harbor's AgentContext fields of a rollout: token counts and rollout_details."""
    turns = rollout.turns
    context: dict[str, Any] = {
        "n_input_tokens": sum(t.get("n_prompt") or 0 for t in turns),
        "n_output_tokens": sum(t.get("n_sampled") or 0 for t in turns),
    }
    if rollout.tokens_kept and turns:
        context["rollout_details"] = [{k: [t.get(k) or [] for t in turns] for k in TOKEN_FIELDS}]
    return context


def trial_files(episode: Ended, config: dict[str, Any]) -> Trial:
    """Every file of an ended episode's trial folder, by its path there; ``config`` is its
    TrialConfig."""
    out, trial = Trial(), PurePosixPath()
    end = episode.finished
    segments, verdicts = episode.segments, episode.runs
    notes = []
    if episode.dropped:
        notes.append(
            f"{episode.dropped} of the episode's {episode.actions} actions are not stored:"
            f" its record reached {MAX_EPISODE_CHARS} characters."
        )
    named = [verdict for verdict in verdicts if verdict.step is not None]
    final = next((v for v in reversed(verdicts) if v.step is None), None)
    result: dict[str, Any] = {
        "id": episode.trial_id,
        "task_name": episode.task_id,
        "trial_name": episode.trial_name,
        "trial_uri": episode.trial_uri,
        "task_id": {"path": episode.task_id},
        "source": None,
        "task_checksum": "",
        "config": config,
        "agent_info": {"name": AGENT_NAME, "version": "unknown"},
        "agent_result": {
            "metadata": {"episode_id": episode.episode_id, "actions": episode.actions}
        },
        "started_at": stamp(episode.started),
        "finished_at": stamp(end),
    }
    if not named:  # a single-step task: agent/ and verifier/ at the trial's root
        actions = [action for segment in segments for action in segment.actions]
        whole = Segment(episode.started, segments[0].instruction, actions)
        trajectory = _trajectory(episode, whole, notes, end)
        if episode.rollout is not None:
            trajectory = _with_rollout(trajectory, episode.rollout)
        out.add_json(trial / "agent" / "trajectory.json", trajectory)
        last = actions[-1].at if actions else episode.started
        result["agent_execution"] = timing(episode.started, last)
        if final is not None:
            result["verifier"] = timing(last, final.at)
            out.add_verifier(trial / "verifier", final)
    else:  # a multi-step task: steps/<name>/{agent,verifier}, as Harbor lays them out
        result["step_results"] = []
        # the actions after the last step's verifier run (an episode that ended without
        # evaluating its next step) go with that last step, after a note
        tail = [action for segment in segments[len(named) :] for action in segment.actions]
        for index, verdict in enumerate(named):
            segment = segments[index]
            step_notes = list(notes)
            if index == len(named) - 1 and tail:
                step_notes.append(
                    f"The last {len(tail)} actions came after this step's verifier ran, and"
                    " before the episode ended without another."
                )
                segment = Segment(segment.started, segment.instruction, segment.actions + tail)
            name = safe_name(verdict.step or "", f"step-{index + 1}")
            root = trial / "steps" / name
            out.add_json(
                root / "agent" / "trajectory.json",
                _trajectory(episode, segment, step_notes, end),
            )
            out.add_verifier(root / "verifier", verdict)
            last = segments[index].actions[-1].at if segments[index].actions else segment.started
            rewards = _rewards(verdict)
            result["step_results"].append(
                {
                    "step_name": verdict.step,
                    "verifier_result": None if rewards is None else {"rewards": rewards},
                    "exception_info": _exception(verdict),
                    "agent_execution": timing(segment.started, last),
                    "verifier": timing(last, verdict.at),
                }
            )
        result["agent_execution"] = timing(episode.started, named[-1].at)
        if final is None:  # Harbor's default strategy: the mean over the steps with a result
            metrics = final_metrics([_rewards(verdict) for verdict in named], None)
            final = Run(named[-1].at, None, None, metrics or {}, "", None)
    if episode.rollout is not None:
        rollout = episode.rollout
        result["agent_info"] = {
            "name": rollout.harness,
            "version": "unknown",
            "model_info": {"name": rollout.model},
        }
        result["agent_result"].update(_rollout_result(rollout))
        if named:  # a multi-step rollout: its one capture at the trial's root
            first = Segment(episode.started, segments[0].instruction)
            trajectory = _with_rollout(_trajectory(episode, first, notes, end), rollout)
            out.add_json(trial / "agent" / "trajectory.json", trajectory)
    rewards = _rewards(final)
    result["verifier_result"] = None if rewards is None else {"rewards": rewards}
    if final is not None and final.error:
        result["exception_info"] = _exception(final)
        out.add_text(trial / "exception.txt", final.error)
    out.add_json(trial / "config.json", config)
    out.add_json(trial / "result.json", result)
    out.rewards, out.errored = rewards, bool(final is not None and final.error)
    return out
