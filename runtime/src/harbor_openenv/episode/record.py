"""Recorded rollouts: every episode as a Harbor trial folder that ``harbor view`` shows.

Off by default. With ``HARBOR_OPENENV_RECORD_DIR`` set (``Settings.record_dir``), each server run
writes one job folder in that folder, and each episode one trial folder in the job's, in the layout
and JSON models of Harbor 0.25 (``harbor.models.job``, ``harbor.models.trial``, and the trajectory
format ATIF, ``harbor.models.trajectories``), as :mod:`.trial` lays them out.

``harbor view RECORD_DIR`` (in Harbor's own Python 3.12 venv) shows them. Neither module
imports harbor: they write plain dicts shaped as Harbor's models, and
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
  kind (:data:`.trial.HARBOR_EXCEPTIONS`; an error of no verifier kind is an ``EpisodeError``).
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
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harbor_openenv.config import Settings
from harbor_openenv.episode.trial import (
    AGENT_NAME,
    MAX_EPISODE_CHARS,
    MAX_TEXT_CHARS,
    TOKEN_FIELDS,
    Action,
    Ended,
    Rollout,
    Run,
    Segment,
    arguments,
    bounded,
    observed,
    safe_name,
    stamp,
    trial_files,
)
from harbor_openenv.events import event
from harbor_openenv.tasks.reward import Failure

MAX_LONG_TEXT_CHARS = 64 * 1024
MAX_METRICS = 256
STEP_OVERHEAD_CHARS = 256  # what one action costs the episode's budget besides its texts
TOKEN_CHARS = 8  # what one token id or logprob costs the episode's budget
JOB_RESULT_EVERY_S = 1.0  # the job's result.json, at most this often while trials keep ending


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
        self._segments = [Segment(self.started, first)]
        self._instructions: dict[int, str] = {}  # the k-th evaluate's next instruction, by k
        self._evaluates = 0
        self._verdicts: list[Run] = []
        self._budget = MAX_EPISODE_CHARS - len(first or "")
        self._dropped = 0
        self._actions = 0
        self._finished: float | None = None
        self._rollout: Rollout | None = None
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
            called = arguments(action)
            output, extra = observed(observation)
            cost = STEP_OVERHEAD_CHARS + len(output) + len(extra.get("error", ""))
            cost += sum(len(value) for value in called.values() if isinstance(value, str))
            if cost > self._budget:
                self._dropped += 1
                self._budget = 0
                return
            self._budget -= cost
            self._segments[-1].actions.append(Action(at, kind, called, output, extra))

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
            verdict = Run(at, step, reward, _metrics(metrics), text, problem, failure)
            self._verdicts.append(verdict)
            if step is not None:
                self._segments.append(Segment(at))
                self._place_instructions()

    def rollout(self, harness: str, model: str, turns: list[Mapping[str, Any]]) -> None:
        """Record a rollout's captured model calls (the proxy's turns, in arrival order)."""
        with self._lock:
            if self._finished is not None:
                return
            cost = sum(
                STEP_OVERHEAD_CHARS + TOKEN_CHARS * sum(len(t.get(k) or []) for k in TOKEN_FIELDS)
                for t in turns
            )
            kept = cost <= self._budget
            self._budget = max(0, self._budget - (cost if kept else 0))
            copies = [
                {k: v for k, v in turn.items() if kept or k not in TOKEN_FIELDS} for turn in turns
            ]
            self._rollout = Rollout(harness, model, copies, kept)

    def _place_instructions(self) -> None:
        """The k-th evaluate's instruction opens segment k, whichever of the evaluate's
        observation and its verified() call came first."""
        for k, instruction in list(self._instructions.items()):
            if k < len(self._segments):
                self._segments[k].instruction = instruction
                del self._instructions[k]

    def ended(self) -> Ended:
        """What the record holds (the trial writer's, once it is finished: it changes no more)."""
        return Ended(
            self.task_id,
            self.episode_id,
            self.trial_name,
            self.trial_id,
            self.trial_dir.resolve().as_uri(),
            self.started,
            self._finished,
            self._segments,
            self._verdicts,
            self._dropped,
            self._actions,
            self._rollout,
        )

    def finish(self) -> None:
        """End the record (later calls do nothing) and queue its files for the writer."""
        with self._lock:
            if self._finished is not None:
                return
            self._finished = time.time()
        self._recorder._submit(lambda: self._recorder._write_trial(self))


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
        base = safe_name(task_id.rstrip("/").rsplit("/", 1)[-1], "task")[:32].rstrip("_-")
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
            "started_at": stamp(self.started),
            "updated_at": stamp(time.time()),
            "finished_at": stamp(self._finished),
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
        trial = trial_files(episode.ended(), self._trial_config(episode))
        for path, text in trial.texts.items():
            self._write_text(episode.trial_dir / path, text)
        for path, data in trial.json.items():  # result.json, the trial's end, the last
            self._write_json(episode.trial_dir / path, data)
        self._count(trial.rewards, trial.errored)

    def _count(self, rewards: dict[str, float] | None, errored: bool) -> None:
        self._ended_trials += 1
        self._errored_trials += errored
        if rewards:
            self._rewarded_trials += 1
            self._first_reward_sum += next(iter(rewards.values()))
            for key, value in rewards.items():
                self._reward_sums[key] = self._reward_sums.get(key, 0.0) + value
