"""Recorded rollouts: every episode as a Harbor trial folder that ``harbor view`` shows.

Longer than the project's ~400 lines per module on purpose: a quarter is this docstring (the
layout Harbor's viewer reads), and the shapes of Harbor's JSON stay beside the one writer that
fills them, so a change of Harbor's format is one module's change.

Off by default. With ``HARBOR_OPENENV_RECORD_DIR`` set (``Settings.record_dir``), each server run
writes one job folder in that folder, and each episode one trial folder in the job's, in the layout
and JSON models of Harbor 0.25 (``harbor.models.job``, ``harbor.models.trial``, and the trajectory
format ATIF, ``harbor.models.trajectories``)::

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

``harbor view RECORD_DIR`` (in Harbor's own Python 3.12 venv) shows them. This module never
imports harbor: it writes plain dicts shaped as Harbor's models, and
tests/deploy/test_record_harbor.py loads the files with Harbor's models, in Harbor's venv.

The API the environment calls (the writing happens on one background thread, never in a step)::

    recorder = Recorder.from_settings(settings)     # None when the setting is unset
    ep = recorder.start(task_id, instruction, episode_id)   # after a reset that started a task
    ep.step(action, observation)    # each action (model_dump() dicts) and what it answered
    ep.verified(step, reward, metrics, output, error, failure)  # each verifier run
    ep.rollout(harness, model, turns)   # a rollout's captured model calls (its token data)
    ep.finish()                     # when the episode ends, however: queues the trial's files
    recorder.close()                # at server shutdown: writes what is queued, ends the job

- ``step``: an action's ``token`` and ``metadata`` are never stored. An ``evaluate`` action is
  not an agent step (its outcome comes through ``verified``); an ``instruction`` in its
  observation (a multi-step task's next step) opens that step's trajectory.
- ``verified(step=name, ...)``: one step of a multi-step task. ``verified(step=None, ...)``: the
  task's own verifier run; in a multi-step episode, the episode's final reward, metrics and error
  by the task's strategy (its output is not stored: each step's is). A multi-step episode without
  it gets the mean of its steps' metrics, Harbor's default strategy.
- ``reward`` is the scalar the trainer got; ``metrics`` (reward.json's keys) become Harbor's
  ``verifier_result.rewards``, or ``{"reward": reward}`` when there are none; ``error`` becomes
  the trial's (or the step's) ``exception_info``, its type Harbor's exception of the ``failure``
  kind (:data:`HARBOR_EXCEPTIONS`; an error of no verifier kind is an ``EpisodeError``).
- ``rollout``: the capture proxy's turns (as ``info["rollout"]["turns"]``) become the trajectory's
  agent steps, each with its token ids and logprobs in the step's ``metrics`` and the totals in
  ``final_metrics`` (what ``harbor view`` shows as tokens); ``result.json``'s ``agent_result`` gets
  Harbor's ``n_input_tokens``, ``n_output_tokens`` and ``rollout_details``, its ``agent_info`` the
  harness and model. A rollout action itself is not an agent step. Token lists count against the
  episode's budget (8 characters an id); past it the turns are kept without them, with a note.
- ``finish`` may be called more than once; calls after it are ignored. An episode never
  finished shows as running (config.json without result.json).

Bounds, in characters before JSON escaping: each action argument, output and error is cut to
``MAX_TEXT_CHARS`` (16 KiB), an instruction and a verifier output to ``MAX_LONG_TEXT_CHARS``
(64 KiB), keeping the head and the tail around a note of what was cut; an episode's record
together stops growing at ``MAX_EPISODE_CHARS`` (4 MiB: later actions are counted, not stored,
and the trajectory's notes say how many); at most ``MAX_METRICS`` metrics per verifier run.
The job folder itself grows by one trial folder per episode.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harbor_openenv._version import __version__
from harbor_openenv.config import Settings
from harbor_openenv.events import event
from harbor_openenv.tasks.reward import Failure
from harbor_openenv.tasks.steps import final_metrics

MAX_TEXT_CHARS = 16 * 1024
MAX_LONG_TEXT_CHARS = 64 * 1024
MAX_EPISODE_CHARS = 4 * 1024 * 1024
MAX_METRICS = 256
STEP_OVERHEAD_CHARS = 256  # what one action costs the episode's budget besides its texts
ATIF_VERSION = "ATIF-v1.7"
AGENT_NAME = "openenv-client"  # whoever drives the environment: the server cannot know
JOB_RESULT_EVERY_S = 1.0  # the job's result.json, at most this often while trials keep ending

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


def _safe_name(name: str, default: str) -> str:
    """A folder name from ``name``: letters, digits, ``.``, ``_``, ``-``; never ``.`` or ``..``."""
    safe = _UNSAFE.sub("_", name).strip("._") or default
    return safe[:64]


def _stamp(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def _timing(start: float | None, end: float | None) -> dict[str, str | None]:
    return {"started_at": _stamp(start), "finished_at": _stamp(end)}


# -- what an episode holds in memory -------------------------------------------------------------


@dataclass(frozen=True)
class _Action:
    at: float
    kind: str
    arguments: dict[str, Any]
    output: str
    extra: dict[str, Any]


@dataclass(frozen=True)
class _Verdict:
    at: float
    step: str | None
    reward: float | None
    metrics: dict[str, float]
    output: str
    error: str | None
    failure: Failure | None = None


@dataclass(frozen=True)
class _Rollout:
    harness: str
    model: str
    turns: list[dict[str, Any]]
    tokens_kept: bool


_TOKEN_FIELDS = ("prompt_token_ids", "completion_token_ids", "logprobs")
TOKEN_CHARS = 8  # what one token id or logprob costs the episode's budget


@dataclass
class _Segment:
    """The actions between two verifier runs (a multi-step task's step), with its instruction."""

    started: float
    instruction: str | None = None
    actions: list[_Action] = field(default_factory=list)


def _arguments(action: Mapping[str, Any]) -> dict[str, Any]:
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


def _observed(observation: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
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


def _metrics(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    kept: dict[str, float] = {}
    for key, value in (metrics or {}).items():
        if len(kept) >= MAX_METRICS:
            break
        if isinstance(value, bool | int | float) and value == value:
            kept[str(key)[:200]] = float(value)
    return kept


class EpisodeRecord:
    """One episode's record: cheap calls that keep what the trial folder will hold."""

    def __init__(
        self,
        recorder: Recorder,
        task_id: str,
        instruction: str | None,
        episode_id: str,
        trial_name: str,
    ) -> None:
        self._recorder = recorder
        self.task_id = task_id
        self.episode_id = episode_id
        self.trial_name = trial_name
        self.trial_id = str(uuid.uuid4())
        self.started = time.time()
        first = bounded(instruction, MAX_LONG_TEXT_CHARS) if instruction else None
        self._segments = [_Segment(self.started, first)]
        self._instructions: dict[int, str] = {}  # the k-th evaluate's next instruction, by k
        self._evaluates = 0
        self._verdicts: list[_Verdict] = []
        self._budget = MAX_EPISODE_CHARS - len(first or "")
        self._dropped = 0
        self._actions = 0
        self._finished: float | None = None
        self._rollout: _Rollout | None = None
        self._lock = threading.Lock()

    @property
    def trial_dir(self) -> Path:
        return self._recorder.job_dir / self.trial_name

    def step(self, action: Mapping[str, Any], observation: Mapping[str, Any]) -> None:
        """Record one action (its ``model_dump()``) and the observation that answered it."""
        at = time.time()
        kind = str(action.get("action_type") or "exec")
        with self._lock:
            if self._finished is not None:
                return
            if kind == "rollout":  # its turns come through rollout(), its grading verified()
                return
            if kind == "evaluate":
                self._evaluates += 1
                instruction = observation.get("instruction")
                if isinstance(instruction, str) and instruction and not observation.get("done"):
                    self._instructions[self._evaluates] = bounded(instruction, MAX_LONG_TEXT_CHARS)
                    self._place_instructions()
                return
            self._actions += 1
            arguments = _arguments(action)
            output, extra = _observed(observation)
            cost = STEP_OVERHEAD_CHARS + len(output) + len(extra.get("error", ""))
            cost += sum(len(value) for value in arguments.values() if isinstance(value, str))
            if cost > self._budget:
                self._dropped += 1
                self._budget = 0
                return
            self._budget -= cost
            self._segments[-1].actions.append(_Action(at, kind, arguments, output, extra))

    def verified(
        self,
        step: str | None,
        reward: float | None,
        metrics: Mapping[str, Any] | None,
        output: str,
        error: str | None,
        failure: Failure | None = None,
    ) -> None:
        """Record one verifier run: a step's (``step`` names it) or the episode's (None);
        ``failure`` is the kind of ``error``."""
        at = time.time()
        with self._lock:
            if self._finished is not None:
                return
            text = bounded(output or "", MAX_LONG_TEXT_CHARS)
            problem = bounded(error, MAX_TEXT_CHARS) if error else None
            cost = STEP_OVERHEAD_CHARS + len(text) + len(problem or "")
            if cost > self._budget:
                text = "[the verifier's output is not stored: the episode's record is full]"
                cost = STEP_OVERHEAD_CHARS
            self._budget = max(0, self._budget - cost)
            verdict = _Verdict(at, step, reward, _metrics(metrics), text, problem, failure)
            self._verdicts.append(verdict)
            if step is not None:
                self._segments.append(_Segment(at))
                self._place_instructions()

    def rollout(self, harness: str, model: str, turns: list[Mapping[str, Any]]) -> None:
        """Record a rollout's captured model calls (the proxy's turns, in arrival order)."""
        with self._lock:
            if self._finished is not None:
                return
            cost = sum(
                STEP_OVERHEAD_CHARS + TOKEN_CHARS * sum(len(t.get(k) or []) for k in _TOKEN_FIELDS)
                for t in turns
            )
            kept = cost <= self._budget
            self._budget = max(0, self._budget - (cost if kept else 0))
            copies = [
                {k: v for k, v in turn.items() if kept or k not in _TOKEN_FIELDS} for turn in turns
            ]
            self._rollout = _Rollout(harness, model, copies, kept)

    def _place_instructions(self) -> None:
        """The k-th evaluate's instruction opens segment k, whichever of the evaluate's
        observation and its verified() call came first."""
        for k, instruction in list(self._instructions.items()):
            if k < len(self._segments):
                self._segments[k].instruction = instruction
                del self._instructions[k]

    def finish(self) -> None:
        """End the record (later calls do nothing) and queue its files for the writer."""
        with self._lock:
            if self._finished is not None:
                return
            self._finished = time.time()
        self._recorder._submit(lambda: self._recorder._write_trial(self))


# -- the files -----------------------------------------------------------------------------------


def _exception(verdict: _Verdict) -> dict[str, Any] | None:
    """Harbor's ExceptionInfo of a verifier run's error (None: it has none)."""
    if not verdict.error:
        return None
    return {
        "exception_type": HARBOR_EXCEPTIONS[verdict.failure or Failure.EPISODE],
        "exception_message": verdict.error,
        "exception_traceback": "",
        "occurred_at": _stamp(verdict.at),
    }


def _rewards(verdict: _Verdict | None) -> dict[str, float] | None:
    if verdict is None:
        return None
    if verdict.metrics:
        return verdict.metrics
    return None if verdict.reward is None else {"reward": verdict.reward}


def _trajectory(
    episode: EpisodeRecord, segment: _Segment, notes: list[str], end: float | None
) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    if segment.instruction:
        steps.append(
            {
                "step_id": 1,
                "timestamp": _stamp(segment.started),
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
                "timestamp": _stamp(action.at),
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
                "timestamp": _stamp(end or segment.started),
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


def _with_rollout(trajectory: dict[str, Any], rollout: _Rollout) -> dict[str, Any]:
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
        metrics.update({k: turn[k] for k in _TOKEN_FIELDS if turn.get(k) is not None})
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


def _rollout_result(rollout: _Rollout) -> dict[str, Any]:
    """Harbor's AgentContext fields of a rollout: token counts and rollout_details."""
    turns = rollout.turns
    context: dict[str, Any] = {
        "n_input_tokens": sum(t.get("n_prompt") or 0 for t in turns),
        "n_output_tokens": sum(t.get("n_sampled") or 0 for t in turns),
    }
    if rollout.tokens_kept and turns:
        context["rollout_details"] = [{k: [t.get(k) or [] for t in turns] for k in _TOKEN_FIELDS}]
    return context


class Recorder:
    """One job folder for this server run, and the thread that writes into it."""

    def __init__(self, record_dir: Path) -> None:
        self.record_dir = record_dir
        self.job_id = str(uuid.uuid4())
        self.started = time.time()
        self.job_dir = self._make_job_dir()
        self._started_trials = 0
        self._ended_trials = 0
        self._rewarded_trials = 0
        self._errored_trials = 0
        self._reward_sums: dict[str, float] = {}  # Harbor's Mean: a missing key counts 0
        self._first_reward_sum = 0.0
        self._finished: float | None = None
        self._last_job_write = 0.0
        self._warned = False
        self._write_json(self.job_dir / "config.json", self._job_config())
        self._write_job_result()
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="harbor-openenv-record", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    @classmethod
    def from_settings(cls, settings: Settings) -> Recorder | None:
        """The recorder of ``settings.record_dir``, or None when recording is off."""
        if settings.record_dir is None:
            return None
        try:
            return cls(settings.record_dir)
        except OSError as exc:
            variable = Settings.variable("record_dir")
            raise ValueError(
                f"{variable}={settings.record_dir}: cannot write a job folder there: {exc}"
            ) from exc

    def _make_job_dir(self) -> Path:
        self.record_dir.mkdir(parents=True, exist_ok=True)
        name = time.strftime("%Y-%m-%d__%H-%M-%S", time.gmtime(self.started))
        for n in range(1, 1000):
            path = self.record_dir / (name if n == 1 else f"{name}-{n}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            return path
        raise FileExistsError(f"every job folder name {name}-N is taken in {self.record_dir}")

    # -- the API -----------------------------------------------------------------------------

    def start(self, task_id: str, instruction: str | None, episode_id: str) -> EpisodeRecord:
        """A new episode on ``task_id``; its trial folder and config.json are written off-thread."""
        base = _safe_name(task_id.rstrip("/").rsplit("/", 1)[-1], "task")[:32].rstrip("_-")
        name = f"{base or 'task'}__{uuid.uuid4().hex[:8]}"
        episode = EpisodeRecord(self, task_id, instruction, episode_id, name)
        self._submit(lambda: self._write_trial_config(episode))
        return episode

    def flush(self) -> None:
        """Wait until everything queued so far is written."""
        if not self._closed:
            self._queue.join()

    def close(self) -> None:
        """Write what is queued, mark the job finished and stop the writer (idempotent)."""
        if self._closed:
            return
        self._queue.join()
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        self._finished = time.time()
        self._guarded(self._write_job_result)
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)

    # -- the writer thread -------------------------------------------------------------------

    def _submit(self, job: Callable[[], None]) -> None:
        if self._closed:
            return
        self._queue.put(job)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._guarded(job)
                now = time.monotonic()
                if self._queue.empty() or now - self._last_job_write >= JOB_RESULT_EVERY_S:
                    self._guarded(self._write_job_result)
                    self._last_job_write = now
            finally:
                self._queue.task_done()

    def _guarded(self, job: Callable[[], None]) -> None:
        """Run one write; a failure is logged (once per run in full), never raised."""
        try:
            job()
        except Exception as exc:
            level = logging.DEBUG if self._warned else logging.WARNING
            self._warned = True
            event("record-error", level, job=str(self.job_dir), error=repr(exc))

    def _write_json(self, path: Path, data: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
        os.replace(temporary, path)

    def _write_text(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", errors="replace")

    def _job_config(self) -> dict[str, Any]:
        return {
            "job_name": self.job_dir.name,
            "jobs_dir": str(self.record_dir),
            "n_attempts": 1,
            "agents": [{"name": AGENT_NAME}],
        }

    def _write_job_result(self) -> None:
        evals: dict[str, Any] = {}
        if self._ended_trials:
            n = self._ended_trials
            if len(self._reward_sums) <= 1:
                mean = {"mean": self._first_reward_sum / n}
            else:
                mean = {key: total / n for key, total in sorted(self._reward_sums.items())}
            evals[f"{AGENT_NAME}__adhoc"] = {
                "n_trials": self._rewarded_trials,
                "n_errors": self._errored_trials,
                "metrics": [mean],
            }
        result = {
            "id": self.job_id,
            "started_at": _stamp(self.started),
            "updated_at": _stamp(time.time()),
            "finished_at": _stamp(self._finished),
            "n_total_trials": self._started_trials,
            "stats": {
                "n_completed_trials": self._ended_trials,
                "n_errored_trials": self._errored_trials,
                "n_running_trials": self._started_trials - self._ended_trials,
                "n_pending_trials": 0,
                "evals": evals,
            },
        }
        self._write_json(self.job_dir / "result.json", result)

    def _trial_config(self, episode: EpisodeRecord) -> dict[str, Any]:
        return {
            "task": {"path": episode.task_id},
            "trial_name": episode.trial_name,
            "trials_dir": str(self.job_dir),
            "agent": {"name": AGENT_NAME},
            "job_id": self.job_id,
        }

    def _write_trial_config(self, episode: EpisodeRecord) -> None:
        self._started_trials += 1
        self._write_json(episode.trial_dir / "config.json", self._trial_config(episode))

    def _write_trial(self, episode: EpisodeRecord) -> None:
        """Every file of an ended episode (on the writer thread: the episode no longer changes)."""
        trial = episode.trial_dir
        end = episode._finished
        segments, verdicts = episode._segments, episode._verdicts
        notes = []
        if episode._dropped:
            notes.append(
                f"{episode._dropped} of the episode's {episode._actions} actions are not stored:"
                f" its record reached {MAX_EPISODE_CHARS} characters."
            )
        named = [verdict for verdict in verdicts if verdict.step is not None]
        final = next((v for v in reversed(verdicts) if v.step is None), None)
        result: dict[str, Any] = {
            "id": episode.trial_id,
            "task_name": episode.task_id,
            "trial_name": episode.trial_name,
            "trial_uri": trial.resolve().as_uri(),
            "task_id": {"path": episode.task_id},
            "source": None,
            "task_checksum": "",
            "config": self._trial_config(episode),
            "agent_info": {"name": AGENT_NAME, "version": "unknown"},
            "agent_result": {
                "metadata": {"episode_id": episode.episode_id, "actions": episode._actions}
            },
            "started_at": _stamp(episode.started),
            "finished_at": _stamp(end),
        }
        if not named:  # a single-step task: agent/ and verifier/ at the trial's root
            actions = [action for segment in segments for action in segment.actions]
            whole = _Segment(episode.started, segments[0].instruction, actions)
            trajectory = _trajectory(episode, whole, notes, end)
            if episode._rollout is not None:
                trajectory = _with_rollout(trajectory, episode._rollout)
            self._write_json(trial / "agent" / "trajectory.json", trajectory)
            last = actions[-1].at if actions else episode.started
            result["agent_execution"] = _timing(episode.started, last)
            if final is not None:
                result["verifier"] = _timing(last, final.at)
                self._write_verifier(trial / "verifier", final)
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
                    segment = _Segment(segment.started, segment.instruction, segment.actions + tail)
                name = _safe_name(verdict.step or "", f"step-{index + 1}")
                root = trial / "steps" / name
                self._write_json(
                    root / "agent" / "trajectory.json",
                    _trajectory(episode, segment, step_notes, end),
                )
                self._write_verifier(root / "verifier", verdict)
                last = (
                    segments[index].actions[-1].at if segments[index].actions else segment.started
                )
                rewards = _rewards(verdict)
                result["step_results"].append(
                    {
                        "step_name": verdict.step,
                        "verifier_result": None if rewards is None else {"rewards": rewards},
                        "exception_info": _exception(verdict),
                        "agent_execution": _timing(segment.started, last),
                        "verifier": _timing(last, verdict.at),
                    }
                )
            result["agent_execution"] = _timing(episode.started, named[-1].at)
            if final is None:  # Harbor's default strategy: the mean over the steps with a result
                metrics = final_metrics([_rewards(verdict) for verdict in named], None)
                final = _Verdict(named[-1].at, None, None, metrics or {}, "", None)
        if episode._rollout is not None:
            rollout = episode._rollout
            result["agent_info"] = {
                "name": rollout.harness,
                "version": "unknown",
                "model_info": {"name": rollout.model},
            }
            result["agent_result"].update(_rollout_result(rollout))
            if named:  # a multi-step rollout: its one capture at the trial's root
                first = _Segment(episode.started, segments[0].instruction)
                trajectory = _with_rollout(_trajectory(episode, first, notes, end), rollout)
                self._write_json(trial / "agent" / "trajectory.json", trajectory)
        rewards = _rewards(final)
        result["verifier_result"] = None if rewards is None else {"rewards": rewards}
        if final is not None and final.error:
            result["exception_info"] = _exception(final)
            self._write_text(trial / "exception.txt", final.error)
        self._write_json(trial / "config.json", self._trial_config(episode))
        self._write_json(trial / "result.json", result)
        self._count(rewards, bool(final is not None and final.error))

    def _write_verifier(self, folder: Path, verdict: _Verdict) -> None:
        self._write_text(folder / "test-stdout.txt", verdict.output)
        if verdict.metrics:
            self._write_json(folder / "reward.json", verdict.metrics)

    def _count(self, rewards: dict[str, float] | None, errored: bool) -> None:
        self._ended_trials += 1
        self._errored_trials += errored
        if rewards:
            self._rewarded_trials += 1
            self._first_reward_sum += next(iter(rewards.values()))
            for key, value in rewards.items():
                self._reward_sums[key] = self._reward_sums.get(key, 0.0) + value
