"""The OpenEnv environment: one episode is one task in one container.

The agent acts with exec/read/write/list inside the task's working directory. The trainer's
orchestration actions, evaluate (run the task's verifier and end the episode), solve (run the
oracle), fork (commit the episode's files for branches, which new sessions start with
``reset(fork=ID)``) and rollout (a harness acts with the trainer's model through the capture proxy,
then evaluate), need the server's orchestration token and never appear in the agent's tool
schema.
"""

from __future__ import annotations

import hmac
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from harbor_openenv._openenv import Environment, EnvironmentMetadata
from harbor_openenv.episode import actions, oracle
from harbor_openenv.episode.episode import ActionError, Episode
from harbor_openenv.episode.fork import ForkError
from harbor_openenv.episode.rollout import rollout
from harbor_openenv.episode.runtime import Runtime
from harbor_openenv.episode.verdict import Outcome
from harbor_openenv.events import Timer, event
from harbor_openenv.images.resolver import ImageError
from harbor_openenv.models import (
    ORCHESTRATION_ACTIONS,
    HarborAction,
    HarborObservation,
    HarborState,
)
from harbor_openenv.sandbox import PathEscapeError, SandboxError
from harbor_openenv.server.metadata import environment_metadata
from harbor_openenv.server.task_api import TaskApi
from harbor_openenv.tasks.config import DatasetError

log = logging.getLogger("harbor_openenv")

Handler = Callable[[Episode, HarborAction], HarborObservation]
_HANDLERS: dict[str, Handler] = {
    "exec": actions.exec_command,
    "read": actions.read_file,
    "write": actions.write_file,
    "list": actions.list_dir,
    "evaluate": lambda episode, _: episode.evaluate(),
    "solve": oracle.solve,
    "fork": lambda episode, action: episode.observe(
        "fork", info={"forks": episode.fork(action.n or 1)}
    ),
    "rollout": rollout,
}
# The orchestration actions during which /tests or /solution may be staged: one that fails ends
# the episode. (A fork that fails leaves its episode as it was.)
_STAGING = ("evaluate", "solve", "rollout")
_EXPECTED = (DatasetError, ImageError, SandboxError)  # the task's or the engine's, not a bug
_CLOSED = (
    "this session has been closed (idle longer than HARBOR_OPENENV_SESSION_TIMEOUT_S, or the"
    " server is stopping) and its container removed: open a new session"
)
# What a client that reconnected by itself (OpenEnv's does, once its socket closed: its replica
# was killed or stopped) meets: a new session, on whichever replica the balancer chose.
_NO_EPISODE = (
    "no episode is running in this session: call reset first (a client that reconnected after"
    " its connection closed, e.g. when its server stopped, is in a new session: that episode is"
    " lost)"
)

_DRAINING = (
    "this server is stopping (draining after SIGTERM) and starts no new episode: open a new"
    " session, which the balancer sends to another replica"
)


class HarborEnvironment(TaskApi, Environment[HarborAction, HarborObservation, HarborState]):
    """Serves one task per episode; construction is cheap (OpenEnv builds one per HTTP call).
    OpenEnv's Task API (``/{env}/splits``, ``/tasks``, ``/task`` …) comes from ``TaskApi``."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self._runtime = runtime
        self.task_catalog = runtime.catalog
        self._episode: Episode | None = None
        self._state = HarborState(task_count=0)
        self._closed = False  # close() is final: a closed (e.g. reaped) session never acts again
        self._thread: int | None = None  # the thread of its first action (see _destroyed)
        self._timer = Timer()  # since the current action began

    def get_metadata(self) -> EnvironmentMetadata:
        """The environment's name and version (its openenv.yaml), the runtime's in description."""
        settings = self._runtime.settings
        return environment_metadata(
            self._runtime.dataset.root, name=settings.env_name, version=settings.env_version
        )

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        index: int | None = None,
        split: str | None = None,
        fork: str | None = None,
        **_: object,
    ) -> HarborObservation:
        """Start an episode on ``task_id``, or the ``index``-th task (of ``split``, default all),
        or one drawn with ``seed``; or ``fork``: the branch of a fork action's ID (its task)."""
        self._timer = Timer()
        observation = self._reset(seed, episode_id, task_id, index, split, fork)
        metrics = self._runtime.metrics
        metrics.action_seconds.labels("reset").observe(self._timer.elapsed)
        if self._episode is not None:
            metrics.episodes_started.inc()
        else:
            metrics.reset_errors.inc()
        return observation

    def _reset(
        self,
        seed: int | None,
        episode_id: str | None,
        task_id: str | None,
        index: int | None,
        split: str | None,
        fork: str | None = None,
    ) -> HarborObservation:
        if self._destroyed():
            return self._fail("reset", _CLOSED, done=True)
        self._end_episode()
        if self._runtime.draining.is_set():
            return self._fail("reset", _DRAINING, done=True)
        dataset = self._runtime.dataset
        self._state = HarborState(
            episode_id=episode_id or str(uuid.uuid4()), task_count=len(dataset)
        )
        try:
            if fork is not None:
                try:
                    point, ready = self._runtime.forks.take(str(fork))
                except ForkError as exc:
                    return self._fail("reset", str(exc), done=True)
                task = point.task
                self._state.task_id = task.id
                episode = self._episode = Episode.branch(self._runtime, point, str(fork), ready)
            else:
                chosen = self._runtime.catalog.pick(
                    task_id=task_id,
                    split=split,
                    index=index,
                    seed=seed,
                    default=self._runtime.settings.default_task,
                )
                task = dataset[chosen]
                self._state.task_id = task.id
                problem = task.refusal or self._runtime.check_files(task)
                if problem:
                    return self._fail("reset", problem, done=True)
                episode = self._episode = Episode.start(self._runtime, task)
            instruction = episode.instruction
            if self._runtime.recorder is not None:
                record = self._runtime.recorder.start(task.id, instruction, self._state.episode_id)
                episode.record = record
        except Exception as exc:
            return self._failed("reset", exc)
        self._state.workdir = episode.sandbox.workdir
        event(
            "reset",
            task=task.id,
            image=episode.image,
            episode=self._state.episode_id,
            seconds=self._timer.seconds,
            fork=fork,
        )
        config = task.config
        return episode.observe(
            "reset",
            instruction=instruction,
            info={
                **({"fork": fork} if fork is not None else {}),
                **episode.step_fields(),
                "exec_timeout_s": self._runtime.settings.exec_timeout_s,
                "metadata": config.metadata,
                "mcp_servers": config.environment.mcp_servers,
            },
        )

    def step(
        self, action: HarborAction, timeout_s: float | None = None, **_: object
    ) -> HarborObservation:
        """Run one action: the token check, the closed-session rule, then its handler."""
        kind = action.action_type
        if kind in ORCHESTRATION_ACTIONS and not self._authorised(action):
            return self._fail(
                kind,
                f"{kind} is an orchestration action: this server refuses it without the"
                " orchestration token (HARBOR_OPENENV_ORCHESTRATION_TOKEN on the server)",
            )
        if self._destroyed():
            return self._fail(kind, _CLOSED, done=True)
        episode = self._episode
        if episode is None:
            done = self._state.evaluated
            if done:
                return self._fail(kind, "the episode has ended: call reset first", done=True)
            return self._fail(kind, _NO_EPISODE)
        self._state.step_count += 1
        self._timer = Timer()
        try:
            return self._act(kind, episode, action)
        finally:
            self._runtime.metrics.action_seconds.labels(kind).observe(self._timer.elapsed)

    def _act(self, kind: str, episode: Episode, action: HarborAction) -> HarborObservation:
        if episode.sandbox.exceeded:
            return self._conclude(episode.observe(kind, done=True, error=episode.sandbox.exceeded))
        lost = episode.lost()
        if lost:  # its engine, one of several, went down since the last step
            return self._lost(kind, episode, action, lost)
        try:
            observation = _HANDLERS[kind](episode, action)
        except Exception as exc:
            lost = episode.lost(check=True)
            if lost:
                return self._lost(kind, episode, action, lost)
            return _recorded(episode, action, self._failed(kind, exc))
        if episode.sandbox.exceeded and not observation.done:  # the guard tripped meanwhile
            observation = episode.observe(kind, done=True, error=episode.sandbox.exceeded)
        if observation.done or observation.error:  # its engine's failure, not the task's?
            lost = episode.lost(check=True)
            if lost:
                return self._lost(kind, episode, action, lost)
        _recorded(episode, action, observation)
        return self._conclude(observation) if observation.done else observation

    def _lost(
        self, kind: str, episode: Episode, action: HarborAction, error: str
    ) -> HarborObservation:
        """End an episode whose engine went down: done, no reward, the engine named."""
        episode.outcome = None  # whatever the verifier made of it proves nothing
        event("error", logging.WARNING, action=kind, task=episode.task.id, error=error)
        return self._conclude(
            _recorded(episode, action, episode.observe(kind, done=True, error=error))
        )

    @property
    def state(self) -> HarborState:
        return self._state

    def close(self) -> None:
        """End the episode for good: OpenEnv closes a session's environment when the session
        ends, also when its idle reaper ends it while the socket stays open."""
        self._closed = True
        self._end_episode()

    # -- plumbing ------------------------------------------------------------------------------

    def _destroyed(self) -> bool:
        """Whether this session is over: closed, or destroyed with its close still queued.

        OpenEnv runs every action of a session on that session's one worker thread, and queues
        ``close`` there too; once its reaper has destroyed the session (it may, during a long
        action), the socket's next action runs on OpenEnv's shared pool instead, beside that
        close. An action on any thread but the first action's is therefore refused: it never
        races the close (before, such a reset could start a container after close had ended
        the episode, and nothing removed it)."""
        here = threading.get_ident()
        if self._thread is None:
            self._thread = here
        return self._closed or here != self._thread

    def _authorised(self, action: HarborAction) -> bool:
        expected, token = self._runtime.settings.orchestration_token, action.token
        return bool(expected and token) and hmac.compare_digest(
            (expected or "").encode(), (token or "").encode()
        )

    def _failed(self, kind: str, exc: Exception) -> HarborObservation:
        """The one catch-all: answer an action (or reset) that raised ``exc``, logging a bug."""
        if isinstance(exc, ActionError):
            return self._fail(kind, str(exc))
        if isinstance(exc, PathEscapeError) and kind != "reset":
            return self._fail(kind, f"refused: {exc}")
        expected = isinstance(exc, _EXPECTED)
        if not expected:
            log.exception("%s failed in task %s", kind, self._state.task_id)
        if kind == "reset":  # never leave a half-started episode
            self._end_episode()
            return self._fail(kind, str(exc) if expected else f"reset failed: {exc!r}", done=True)
        if kind in _STAGING:
            # Whatever went wrong while /tests or /solution may be staged, the agent never acts
            # in this container again: the episode ends without a reward.
            episode = self._episode
            assert episode is not None
            return self._conclude(
                episode.observe(kind, done=True, error=f"{kind} failed: {exc or repr(exc)}")
            )
        if expected:
            task = self._state.task_id
            event("error", logging.WARNING, action=kind, task=task, error=str(exc))
        return self._fail(kind, str(exc) or repr(exc))

    def _conclude(self, observation: HarborObservation) -> HarborObservation:
        """Record the episode's reward, end the episode and answer the action that ended it."""
        self._state.evaluated, self._state.reward = True, observation.reward
        episode = self._episode
        outcome = Outcome(observation.reward, observation.error, observation.output or "")
        if episode is not None:
            outcome = episode.outcome or outcome  # evaluate's, else this failure's
            episode.conclude(outcome)
        event(
            "evaluate",
            task=self._state.task_id,
            episode=self._state.episode_id,
            reward=observation.reward,
            seconds=self._timer.seconds,
            error=observation.error,
        )
        self._end_episode(outcome.kind)
        return observation

    def _fail(self, action_type: str, error: str, **fields: Any) -> HarborObservation:
        fields.setdefault("task_id", self._state.task_id)
        if action_type in ("reset", *ORCHESTRATION_ACTIONS):  # the agent's own errors are its own
            event("error", logging.WARNING, action=action_type, task=fields["task_id"], error=error)
        return HarborObservation(action_type=action_type, error=error, **fields)

    def _end_episode(self, outcome: str = "reaped") -> None:
        """End the running episode, if any: ``outcome`` as the metrics count it (reaped: ended
        without evaluate)."""
        episode, self._episode = self._episode, None
        if episode is not None:
            self._runtime.metrics.ended(outcome)
            episode.end()


def _recorded(
    episode: Episode, action: HarborAction, observation: HarborObservation
) -> HarborObservation:
    """``observation``, after adding the action and its answer to the episode's record (if on;
    a record that has ended ignores it)."""
    if episode.record is not None:
        episode.record.step(action.model_dump(), observation.model_dump())
    return observation
