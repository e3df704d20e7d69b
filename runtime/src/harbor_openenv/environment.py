"""The OpenEnv environment: one episode is one task in one container.

The agent acts with exec/read/write/list inside the task's working directory. The trainer's
orchestration actions, evaluate (run the task's verifier and end the episode) and solve (run the
oracle), need the server's orchestration token and never appear in the agent's tool schema.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import json
import logging
import os
import random
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors

from . import artifacts, engine
from ._openenv import Environment
from .about import environment_metadata
from .config import Settings
from .dataset import Dataset
from .disk import DiskGuard
from .events import Timer, event
from .helper import HelperError, HelperVolume
from .image import ImageError, ImageResolver
from .manifest import MANIFEST_NAME, verify_manifest
from .models import ORCHESTRATION_ACTIONS, HarborAction, HarborObservation, HarborState
from .pool import ContainerPool, ContainerSpec
from .reward import REWARD_DETAILS, REWARD_FILES, VERIFIER_DIR, Reward, parse_reward, scalar
from .sandbox import (
    LABEL,
    LABEL_OWNER,
    ComposeSandbox,
    PathEscapeError,
    Sandbox,
    SandboxError,
    TooLargeError,
    remove_containers,
    server_identity,
)
from .steps import final_metrics, min_reward_failure
from .task import Task
from .task_config import (
    DatasetError,
    EnvironmentConfig,
    HealthcheckConfig,
    StepConfig,
    artifact_entries,
    resolve_env,
    verifier_environment,
    verifier_mode,
)

log = logging.getLogger("harbor_openenv")
_TAIL = 8192
_REMOVERS = 4  # threads removing ended episodes' containers
_TEST_STDOUT = "test-stdout.txt"
_TESTS_DIR = "/tests"


class Runtime:
    """What every session of one server shares: the dataset, the engine, the image cache, the
    warm pool (whose idle containers and the running episodes stay within ``max_sessions``)."""

    def __init__(
        self,
        tasks_root: Path,
        settings: Settings | None = None,
        *,
        max_sessions: int | None = None,
    ) -> None:
        self.dataset = Dataset(tasks_root)
        self.settings = settings or Settings()
        max_sessions = max_sessions or self.settings.max_sessions
        self.owner = server_identity()
        self._docker: docker.DockerClient | None = None
        self._resolver: ImageResolver | None = None
        self._lock = threading.Lock()
        self._checked: set[str] = set()
        self.pool = ContainerPool(
            lambda: self.docker, owner=self.owner, size=self.settings.pool_size, limit=max_sessions
        )
        self._removals = ThreadPoolExecutor(_REMOVERS, thread_name_prefix="harbor-openenv-remove")
        self._helper = HelperVolume({LABEL: "1", LABEL_OWNER: self.owner})
        self.disk = DiskGuard(self.settings.disk_check_s)

    def helper_volume(self, image: str) -> str:
        """The server's volume holding the in-container helper (made on first use)."""
        try:
            return self._helper.ensure(self.docker, image)
        except HelperError as exc:
            raise SandboxError(str(exc)) from None

    def spec(
        self, image: str, table: EnvironmentConfig, env: dict[str, str], network_mode: str
    ) -> ContainerSpec:
        """How reset starts a task's container: everything but the task's label."""
        settings = self.settings
        return ContainerSpec(
            image,
            workdir=table.workdir,
            cpus=table.cpus or settings.default_cpus,
            memory_mb=table.memory_mb or settings.default_memory_mb,
            network="none" if network_mode == "no-network" else None,
            env=tuple(sorted(env.items())),
            pids_limit=settings.pids_limit,
            helper_volume=self.helper_volume(image),
            storage_mb=self.disk_limit(table),
        )

    def disk_limit(self, table: EnvironmentConfig) -> int | None:
        """An environment's disk limit in MB: its storage_mb, else the server's (None: none)."""
        return table.storage_mb or self.settings.disk_mb or None

    @property
    def docker(self) -> docker.DockerClient:
        """The engine client, connected on first use so /health never touches Docker."""
        with self._lock:
            if self._docker is None:
                try:
                    # Each session's thread, the warm pool and the disk guard share it.
                    client = engine.connect(concurrency=self.pool.limit + 8)
                except docker.errors.DockerException as exc:
                    raise SandboxError(f"cannot reach the Docker engine: {exc}") from None
                self._docker = client
                self._resolver = ImageResolver(client, build_network=self.settings.build_network)
            return self._docker

    @property
    def images(self) -> ImageResolver:
        self.docker  # noqa: B018 - connects and creates the resolver
        assert self._resolver is not None
        return self._resolver

    def check_files(self, task: Task) -> str | None:
        """Why the task's files differ from the tasks.sha256 beside the tasks folder, if they do.

        Each task is checked once per server, on its first reset; without a manifest, never.
        """
        manifest = self.dataset.root.parent / MANIFEST_NAME
        if task.id in self._checked or not manifest.is_file():
            return None
        problems = verify_manifest(manifest, under=f"{self.dataset.root.name}/{task.id}")
        if problems:
            shown = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
            return f"{task.id}: the task's files do not match {MANIFEST_NAME}: {shown}"
        self._checked.add(task.id)
        return None

    def remove_orphans(self) -> int:
        """Remove containers left behind by servers that are no longer running."""
        return remove_containers(self.docker)

    def prewarm(self) -> None:
        """Start filling the warm pool for the default task, if the pool is on and can serve it."""
        ids = self.dataset.ids
        if self.settings.pool_size <= 0 or not ids:
            return
        task = self.dataset[self.settings.default_task or ids[0]]
        if task.refusal or task.compose_file is not None or self.check_files(task):
            return
        table = task.config.environment
        env = _resolve_envs(task).environment
        image = self.images.resolve(task)
        self.pool.want(self.spec(image, table, env, table.network_mode))

    def discard(self, sandbox: Sandbox, then: Callable[[], None]) -> None:
        """Remove an ended episode's container in the background, so the step that ended the
        episode answers first; ``then`` runs once it is gone. Shutdown waits for every removal."""

        def remove() -> None:
            try:
                sandbox.remove()
            except Exception as exc:  # the owner sweep at shutdown or restart tries again
                log.warning("removing container %s failed: %s", sandbox.name, exc)
            finally:
                then()

        try:
            self._removals.submit(remove)
        except RuntimeError:  # shutting down: no new background work
            remove()

    def shutdown(self) -> int:
        """Finish pending removals, empty the warm pool and remove every container this server
        started."""
        self._removals.shutdown(wait=True)
        self.disk.close()
        self.pool.close()
        if self._docker is None:
            return 0
        return remove_containers(self._docker, owner=self.owner)


@dataclass
class _Verdict:
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
    def metrics(self) -> dict[str, float] | None:
        """The verifier's result as Harbor counts it (None: there is none)."""
        return None if self.timed_out or not self.reward.metrics else self.reward.metrics


@dataclass
class _Envs:
    """task.toml's env tables with ``${VAR}`` resolved from the server's environment."""

    environment: dict[str, str] = field(default_factory=dict)
    solution: dict[str, str] = field(default_factory=dict)
    verifier: dict[str | None, dict[str, str]] = field(default_factory=dict)  # by step name
    verifier_container: dict[str | None, dict[str, str]] = field(default_factory=dict)


def _resolve_envs(task: Task) -> _Envs:
    """Resolve every env table up front, so a missing variable refuses reset, never half-runs."""
    config, environ, where = task.config, dict(os.environ), f"{task.id}/task.toml: "
    envs = _Envs(
        environment=resolve_env(config.environment.env, where + "[environment].env", environ),
        solution=resolve_env(config.solution.env, where + "[solution].env", environ),
    )
    steps: list[StepConfig | None] = list(config.steps or []) or [None]
    for index, step in enumerate(steps):
        key = step.name if step else None
        merged = {**config.verifier.env, **(step.verifier.env if step else {})}
        field_name = f"[[steps]][{index}].verifier.env" if step else "[verifier].env"
        envs.verifier[key] = resolve_env(merged, where + field_name, environ)
        if verifier_mode(config, step) == "separate":
            table = verifier_environment(config, step)
            envs.verifier_container[key] = resolve_env(
                table.env, where + "[verifier.environment].env", environ
            )
    return envs


class HarborEnvironment(Environment[HarborAction, HarborObservation, HarborState]):
    """Serves one task per episode; construction is cheap (OpenEnv builds one per HTTP call)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self._runtime = runtime
        self._sandbox: Sandbox | None = None
        self._task: Task | None = None
        self._state = HarborState(task_count=0)
        self._envs = _Envs()
        self._step_index = 0
        self._step_metrics: list[dict[str, float] | None] = []
        self._step_info: list[dict] = []
        self._verifier_dirs_used = False
        self._counted = False  # the episode counts against the warm pool's limit
        self._closed = False  # close() is final: a closed (e.g. reaped) session never acts again
        self._evaluate_timer = Timer()

    def get_metadata(self):
        """The environment's name and version (its openenv.yaml), the runtime's in description."""
        settings = self._runtime.settings
        return environment_metadata(
            self._runtime.dataset.root, name=settings.env_name, version=settings.env_version
        )

    # -- episode -------------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        index: int | None = None,
        **_: object,
    ) -> HarborObservation:
        """Start an episode on ``task_id``, or the ``index``-th task, or one drawn with ``seed``."""
        if self._closed:
            return self._fail("reset", _CLOSED, done=True)
        self._end_episode()
        timer = Timer()
        dataset = self._runtime.dataset
        self._state = HarborState(
            episode_id=episode_id or str(uuid.uuid4()), task_count=len(dataset)
        )
        try:
            task = dataset[self._pick(task_id, index, seed)]
            self._state.task_id = task.id
            refusal = task.refusal or self._runtime.check_files(task)
            if refusal:
                return self._fail("reset", refusal, task_id=task.id, done=True)
            config = task.config
            self._envs = _resolve_envs(task)
            self._task, self._step_index = task, 0
            self._step_metrics, self._step_info, self._verifier_dirs_used = [], [], False
            image = self._runtime.images.resolve(task)
            self._sandbox = self._launch(
                task,
                image,
                config.environment,
                env=self._envs.environment,
                compose=task.compose_file is not None,
                network_mode=config.environment.network_mode,
                episode=True,
            )
            limit = self._runtime.disk_limit(config.environment)
            if limit:
                self._runtime.disk.watch(self._sandbox, limit)
            self._healthcheck(config.environment.healthcheck, None, "[environment.healthcheck]")
            if config.steps:
                self._prepare_step()
            if config.steps or config.environment.healthcheck:
                # The baseline, once: what runs now is the environment's; nothing started later
                # (by the agent, or by a verifier running the agent's code) is ever added to it.
                self._sandbox.mark_baseline()
            instruction = self._instruction()
        except (DatasetError, ImageError, SandboxError) as exc:
            self._end_episode()
            return self._fail("reset", str(exc), task_id=self._state.task_id, done=True)
        except Exception as exc:  # a bug: answer with it, never leave a half-started episode
            log.exception("reset failed in task %s", self._state.task_id)
            self._end_episode()
            problem = f"reset failed: {exc!r}"
            return self._fail("reset", problem, task_id=self._state.task_id, done=True)
        self._state.workdir = self._sandbox.workdir
        episode = self._state.episode_id
        event("reset", task=task.id, image=image, episode=episode, seconds=timer.seconds)
        return HarborObservation(
            action_type="reset",
            task_id=task.id,
            instruction=instruction,
            workdir=self._sandbox.workdir,
            info={
                **self._step_fields(),
                "exec_timeout_s": self._runtime.settings.exec_timeout_s,
                "metadata": config.metadata,
                "mcp_servers": config.environment.mcp_servers,
            },
        )

    def _launch(
        self,
        task: Task,
        image: str,
        table: EnvironmentConfig,
        *,
        env: dict[str, str],
        compose: bool,
        network_mode: str,
        episode: bool = False,
    ) -> Sandbox:
        """Start a task environment: one container, or the compose project around ``main``.

        ``episode``: the episode's own environment, counted against the warm pool's limit until
        the episode ends; a container (not a compose project) then comes from the pool if ready.
        """
        runtime = self._runtime
        spec = runtime.spec(image, table, env, network_mode)
        if compose:
            assert task.compose_file is not None
            start = functools.partial(
                ComposeSandbox.start_project,
                runtime.docker,
                image,
                compose_file=task.compose_file,
                no_network=network_mode == "no-network",
                compose_env=env,
                timeout_s=table.build_timeout_sec,
                task_id=task.id,
                owner=runtime.owner,
                workdir=spec.workdir,
                cpus=spec.cpus,
                memory_mb=spec.memory_mb,
                env=env,
                pids_limit=spec.pids_limit,
                helper_volume=spec.helper_volume,
                build_network=runtime.settings.build_network,
            )
            spec = None
        else:
            start = functools.partial(
                spec.start, self._runtime.docker, owner=self._runtime.owner, task_id=task.id
            )
        if not episode:
            return start()
        sandbox = self._runtime.pool.acquire(spec, start)
        self._counted = True
        return sandbox

    def _healthcheck(self, check: HealthcheckConfig | None, user, field_name: str) -> None:
        """Run ``check`` until it passes, with Docker HEALTHCHECK's retries, as Harbor does."""
        if check is not None:
            where = f"{self._task.id}/task.toml: {field_name}"
            self._sandbox.healthcheck(check, user=_user(user), where=where)

    # -- steps ---------------------------------------------------------------------------------

    def _step(self) -> StepConfig | None:
        steps = self._task.config.steps
        return steps[self._step_index] if steps else None

    def _instruction(self) -> str:
        step = self._step()
        return self._task.step_instruction(step) if step else self._task.instruction

    def _agent_user(self) -> str | int | None:
        step = self._step()
        if step is not None and step.agent.user is not None:
            return step.agent.user
        return self._task.config.agent.user

    def _agent_timeout(self) -> float | None:
        step = self._step()
        if step is not None and step.agent.timeout_sec is not None:
            return step.agent.timeout_sec
        return self._task.config.agent.timeout_sec

    def _step_fields(self) -> dict:
        config, step = self._task.config, self._step()
        fields = {
            "agent_timeout_sec": self._agent_timeout(),
            "verifier_timeout_sec": (step.verifier if step else config.verifier).timeout_sec,
        }
        if step is not None:
            fields["step"] = {
                "name": step.name,
                "index": self._step_index,
                "count": len(config.steps),
            }
        return fields

    def _prepare_step(self) -> None:
        """After a step: stop what its verifier left running and clear its /tests and
        /logs/verifier. Then reset /logs/agent, upload ``steps/<name>/workdir/`` into the workdir,
        run its setup.sh and the step's healthcheck. Processes setup.sh starts after the first
        step are not the environment's: the step's evaluate stops them like the agent's."""
        sandbox, step = self._sandbox, self._step()
        where = self._task.where(self._task.step_path(step.name))
        if self._step_index > 0 and self._verifier_dirs_used:
            sandbox.stop_processes(prepare=("", VERIFIER_DIR, _TESTS_DIR, "stage"))
        script = "rm -rf -- /logs/agent && mkdir -p /logs/agent && chmod 777 /logs/agent"
        cleared = sandbox.exec_root(script)
        if cleared.exit_code != 0:
            raise SandboxError(f"cannot clear the last step's outputs: {cleared.output.strip()}")
        self._verifier_dirs_used = False
        folder = self._task.step_workdir(step)
        if folder.is_dir():
            sandbox.put_dir(folder, sandbox.workdir, replace=False)
        if (folder / "setup.sh").is_file():
            run = sandbox.exec(
                f"bash {sandbox.workdir.rstrip('/')}/setup.sh",
                timeout_s=self._runtime.settings.solve_timeout_s,
                max_output=_TAIL,
                user=_user(self._agent_user()),
            )
            if run.exit_code != 0:
                raise SandboxError(
                    f"{where}/workdir/setup.sh exited with code {run.exit_code}:"
                    f" {run.output.strip()[-2000:]}"
                )
        self._healthcheck(
            step.healthcheck, self._agent_user(), f"[[steps]] {step.name} healthcheck"
        )

    def _pick(self, task_id: str | None, index: int | None, seed: int | None) -> str:
        ids = self._runtime.dataset.ids
        for name, value, kind in (
            ("task_id", task_id, str),
            ("index", index, int),
            ("seed", seed, int),
        ):
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise DatasetError(f"reset: {name} must be {kind.__name__}, got {value!r}"[:200])
        if task_id is not None:
            return task_id
        if index is not None:
            if not 0 <= index < len(ids):
                raise DatasetError(f"task index {index} is out of range (0..{len(ids) - 1})")
            return ids[index]
        if seed is not None:
            return random.Random(seed).choice(ids)
        return self._runtime.settings.default_task or ids[0]

    def step(
        self, action: HarborAction, timeout_s: float | None = None, **_: object
    ) -> HarborObservation:
        kind = action.action_type
        if kind in ORCHESTRATION_ACTIONS and not self._authorised(action):
            return self._fail(
                kind,
                f"{kind} is an orchestration action: this server refuses it without the"
                " orchestration token (HARBOR_OPENENV_ORCHESTRATION_TOKEN on the server)",
            )
        if self._closed:
            return self._fail(kind, _CLOSED, done=True)
        if self._sandbox is None or self._task is None:
            done = self._state.evaluated
            reason = "the episode has ended" if done else "no episode is running"
            return self._fail(kind, f"{reason}: call reset first", done=done)
        self._state.step_count += 1
        if self._sandbox.exceeded:
            return self._conclude(None, self._sandbox.exceeded, "", {}, kind)
        try:
            return getattr(self, f"_{kind}")(action)
        except PathEscapeError as exc:
            return self._fail(kind, f"refused: {exc}")
        except Exception as exc:
            if kind not in ORCHESTRATION_ACTIONS:
                if isinstance(exc, SandboxError):  # orchestration errors: _fail logs them
                    task = self._state.task_id
                    event("error", logging.WARNING, action=kind, task=task, error=str(exc))
                else:
                    log.exception("%s failed in task %s", kind, self._state.task_id)
                return self._fail(kind, str(exc) or repr(exc))
            # Whatever went wrong while /tests or /solution may be staged, the agent never acts
            # in this container again: the episode ends without a reward.
            if not isinstance(exc, SandboxError):
                log.exception("%s failed in task %s", kind, self._state.task_id)
            return self._conclude(None, f"{kind} failed: {exc or repr(exc)}", "", {}, kind)

    def _authorised(self, action: HarborAction) -> bool:
        expected = self._runtime.settings.orchestration_token
        return bool(expected and action.token) and hmac.compare_digest(
            expected.encode(), action.token.encode()
        )

    # -- agent actions -------------------------------------------------------------------------

    def _exec(self, action: HarborAction) -> HarborObservation:
        if not action.command:
            return self._fail("exec", "exec needs a command")
        settings = self._runtime.settings
        timeout = min(action.timeout_s or settings.exec_timeout_s, settings.exec_timeout_s)
        result = self._sandbox.exec(
            action.command,
            timeout_s=timeout,
            max_output=settings.max_output_bytes,
            user=_user(self._agent_user()),
        )
        self._runtime.disk.nudge(self._sandbox)
        return self._observe(
            "exec",
            output=result.output,
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            truncated=result.truncated,
            error=f"timed out after {timeout:g} s; its processes were killed"
            if result.timed_out
            else None,
        )

    def _read(self, action: HarborAction) -> HarborObservation:
        user = self._file_user()
        path = self._sandbox.confine(_need(action.path, "read"), user=user)
        data, cut = self._sandbox.read_file(
            path, max_bytes=self._runtime.settings.max_read_bytes, user=user
        )
        try:
            text, encoding = data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(data).decode(), "base64"
        return self._observe("read", output=text, encoding=encoding, truncated=cut)

    def _write(self, action: HarborAction) -> HarborObservation:
        content = action.content or ""
        if action.encoding == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except binascii.Error:
                return self._fail("write", "content is not valid base64")
        else:
            data = content.encode()
        limit = self._runtime.settings.max_write_bytes
        if len(data) > limit:
            return self._fail(
                "write",
                f"content is {len(data)} bytes, over this server's limit of {limit}"
                " (HARBOR_OPENENV_MAX_WRITE_BYTES); write large files with exec",
            )
        user = self._file_user()
        path = self._sandbox.confine(_need(action.path, "write"), user=user)
        self._sandbox.write_file(path, data, user=user)
        return self._observe("write", output=f"wrote {len(data)} bytes to {path}")

    def _list(self, action: HarborAction) -> HarborObservation:
        user = self._file_user()
        path = self._sandbox.confine(action.path or ".", user=user)
        return self._observe("list", output=self._sandbox.list_dir(path, user=user))

    def _file_user(self) -> str | None:
        """Who file actions run as: exactly the agent's user, as exec does."""
        return _user(self._agent_user())

    # -- orchestration -------------------------------------------------------------------------

    def _evaluate(self, action: HarborAction) -> HarborObservation:
        """Stop the agent and run the (current step's) verifier, in this container or, for a
        separate verifier, in its own; then end the episode or move on to the next step."""
        task, step = self._task, self._step()
        self._evaluate_timer = Timer()
        if verifier_mode(task.config, step) == "separate":
            self._sandbox.stop_processes()
            verdict = self._verify_separately(step)
        else:
            self._verifier_dirs_used = True
            verdict = self._verify(self._sandbox, step, bundled=False)
        info = {
            "metrics": verdict.reward.metrics,
            "reward_details": verdict.reward.details,
            "verifier_timed_out": verdict.timed_out,
        }
        reward = None if verdict.timed_out else verdict.reward.value
        if step is None:
            return self._conclude(reward, verdict.error, verdict.stdout, info)
        return self._finish_step(step, verdict, reward, info)

    def _finish_step(
        self, step: StepConfig, verdict: _Verdict, reward: float | None, info: dict
    ) -> HarborObservation:
        """Record the step's result; advance (done=False, the next instruction) or end."""
        config = self._task.config
        self._step_metrics.append(verdict.metrics)
        self._step_info.append(
            {"name": step.name, "reward": reward, **info, "error": verdict.error}
        )
        stop = None
        if verdict.metrics is None:
            stop = f"step {step.name!r} has no verifier result ({verdict.error})"
        elif step.min_reward is not None:
            failure = min_reward_failure(verdict.metrics, step.min_reward)
            if failure:
                stop = f"step {step.name!r}: {failure}; the remaining steps are skipped"
        if stop is None and self._step_index + 1 < len(config.steps):
            self._step_index += 1
            try:
                if self._sandbox is None:
                    raise SandboxError("the agent's environment is gone")
                self._prepare_step()
            except SandboxError as exc:
                stop = str(exc)
            else:
                # The episode's reward arrives once, when it ends (by the task's strategy); the
                # step's own reward is in info["steps"], so a trainer never counts it twice.
                return self._observe(
                    "evaluate",
                    reward=None,
                    done=False,
                    error=verdict.error,
                    output=verdict.stdout,
                    instruction=self._instruction(),
                    info={**info, **self._step_fields(), "steps": self._step_info},
                )
        metrics = final_metrics(self._step_metrics, config.multi_step_reward_strategy)
        final, error = scalar(metrics) if metrics else (None, "no step has a verifier result")
        return self._conclude(
            final,
            "; ".join(part for part in (stop, error) if part) or None,
            verdict.stdout,
            {
                **info,
                "steps": self._step_info,
                "final_metrics": metrics,
                "reward_strategy": config.multi_step_reward_strategy or "mean",
            },
        )

    def _conclude(
        self,
        reward: float | None,
        error: str | None,
        output: str,
        info: dict,
        action_type: str = "evaluate",
    ) -> HarborObservation:
        """Record the episode's reward, end the episode and answer the action that ended it."""
        self._state.evaluated, self._state.reward = True, reward
        event(
            "evaluate",
            task=self._state.task_id,
            episode=self._state.episode_id,
            reward=reward,
            seconds=self._evaluate_timer.seconds,
            error=error,
        )
        self._end_episode()
        return self._observe(
            action_type, reward=reward, done=True, error=error, output=output, info=info
        )

    def _verify(self, sandbox: Sandbox, step: StepConfig | None, *, bundled: bool) -> _Verdict:
        """Stop every process the agent (or an earlier verifier) started and hand a fresh
        /logs/verifier to the verifier's user, with the runtime's helper; stage tests/ (then
        steps/<name>/tests/) to /tests unless the image brings them; run test.sh as Harbor does;
        read the reward files through the engine, never through the container's programs."""
        config, settings = self._task.config, self._runtime.settings
        folders = [] if bundled else [self._task.tests_dir()]
        if step is not None and not bundled:
            folders.append(self._task.tests_dir(step))
        present = [folder for folder in folders if folder.is_dir()]
        table = step.verifier if step else config.verifier
        user = table.user if table.user is not None else config.verifier.user
        owner = sandbox.default_user if user is None else str(user)
        sandbox.stop_processes(
            prepare=(owner, VERIFIER_DIR, _TESTS_DIR, "stage" if present else "keep")
        )
        for folder in present:
            sandbox.put_dir(folder, _TESTS_DIR, prepared=True, executable="test.sh")
        run = sandbox.exec(
            f"(/tests/test.sh) > {VERIFIER_DIR}/{_TEST_STDOUT} 2>&1",
            timeout_s=table.timeout_sec,
            max_output=_TAIL,
            user=_user(user),
            env=self._envs.verifier.get(step.name if step else None, {}),
        )
        stdout = _tail_of(sandbox, f"{VERIFIER_DIR}/{_TEST_STDOUT}")
        if run.timed_out:
            return _Verdict(parse_reward({}), stdout, True, table.timeout_sec)
        files: dict[str, bytes] = {}
        for name in REWARD_FILES:
            try:
                data = sandbox.read_engine_file(
                    f"{VERIFIER_DIR}/{name}", limit=settings.max_reward_bytes
                )
            except TooLargeError as exc:
                if name != REWARD_DETAILS:
                    raise TooLargeError(f"{exc} (HARBOR_OPENENV_MAX_REWARD_BYTES)") from None
                data = json.dumps({"unread": str(exc)}).encode()
            if data is not None:
                files[name] = data
        return _Verdict(parse_reward(files), stdout, False, table.timeout_sec)

    def _verify_separately(self, step: StepConfig | None) -> _Verdict:
        """Copy the artifacts out, start the verifier's own environment (Harbor's image choice),
        restore them there and verify; the agent's environment stops first on the last step."""
        config = self._task.config
        collected = artifacts.collect(
            self._sandbox,
            artifact_entries(config, step),
            limit=self._runtime.settings.max_artifact_bytes,
        )
        try:
            return self._verify_elsewhere(step, collected)
        finally:
            artifacts.close(collected)

    def _verify_elsewhere(
        self, step: StepConfig | None, collected: list[artifacts.Artifact]
    ) -> _Verdict:
        task, config = self._task, self._task.config
        if step is None or self._step_index + 1 == len(config.steps):
            sandbox, self._sandbox = self._sandbox, None
            sandbox.remove()
        folder, ref = task.verifier_image_dir(step), task.verifier_image_ref(step)
        images = self._runtime.images
        try:
            if ref:
                image = images.use(task, ref)
            elif folder:
                image = images.build(task, folder)
            else:
                image = images.resolve(task)
        except ImageError as exc:
            raise SandboxError(f"the separate verifier's image: {exc}") from None
        table = verifier_environment(config, step)
        phase = (step.verifier.network_mode if step else None) or config.verifier.network_mode
        key = step.name if step else None
        verifier = self._launch(
            task,
            image,
            table,
            env=self._envs.verifier_container.get(key, {}),
            compose=not (ref or folder) and task.compose_file is not None,
            network_mode=phase or table.network_mode,
        )
        try:
            artifacts.restore(verifier, collected)
            return self._verify(verifier, step, bundled=bool(ref or folder))
        finally:
            verifier.remove()

    def _solve(self, action: HarborAction) -> HarborObservation:
        """Run the oracle: stage the (step's) solution/ to /solution, run solve.sh, remove it."""
        sandbox, step = self._sandbox, self._step()
        solution = self._task.oracle_dir(step)
        if not (solution / "solve.sh").is_file():
            return self._fail("solve", f"{self._task.where(solution)}/solve.sh: missing")
        # No agent process may watch /solution: stop them all first, as evaluate does.
        sandbox.stop_processes()
        sandbox.put_dir(solution, "/solution", executable="solve.sh")
        timeout = self._agent_timeout() or self._runtime.settings.solve_timeout_s
        run = sandbox.exec(
            "(/solution/solve.sh) > /logs/agent/oracle.txt 2>&1",
            timeout_s=timeout,
            max_output=_TAIL,
            user=_user(self._agent_user()),
            env={"DEBIAN_FRONTEND": "noninteractive", **self._envs.solution},
        )
        removed = sandbox.exec_root("rm -rf /solution")
        if removed.exit_code != 0:
            raise SandboxError(f"cannot remove /solution: {removed.output.strip()}")
        return self._observe(
            "solve",
            output=_tail_of(sandbox, "/logs/agent/oracle.txt"),
            exit_code=run.exit_code,
            timed_out=run.timed_out,
            error=f"solve.sh timed out after {timeout:g} s" if run.timed_out else None,
        )

    # -- plumbing ------------------------------------------------------------------------------

    def _observe(self, action_type: str, **fields) -> HarborObservation:
        return HarborObservation(
            action_type=action_type,
            task_id=self._state.task_id,
            workdir=self._state.workdir,
            **fields,
        )

    def _fail(self, action_type: str, error: str, **fields) -> HarborObservation:
        fields.setdefault("task_id", self._state.task_id)
        if action_type in ("reset", *ORCHESTRATION_ACTIONS):  # the agent's own errors are its own
            event("error", logging.WARNING, action=action_type, task=fields["task_id"], error=error)
        return HarborObservation(action_type=action_type, error=error, **fields)

    def _end_episode(self) -> None:
        sandbox, self._sandbox, self._task = self._sandbox, None, None
        counted, self._counted = self._counted, False
        release = self._runtime.pool.ending() if counted else _nothing
        if sandbox is not None:
            self._runtime.disk.forget(sandbox)
            self._runtime.discard(sandbox, release)
        else:
            release()

    @property
    def state(self) -> HarborState:
        return self._state

    def close(self) -> None:
        """End the episode for good: OpenEnv closes a session's environment when the session
        ends, also when its idle reaper ends it while the socket stays open."""
        self._closed = True
        self._end_episode()


_CLOSED = (
    "this session has been closed (idle longer than HARBOR_OPENENV_SESSION_TIMEOUT_S, or the"
    " server is stopping) and its container removed: open a new session"
)


def _nothing() -> None:
    pass


def _tail_of(sandbox: Sandbox, path: str) -> str:
    """The last :data:`_TAIL` bytes of a log file, read through the engine ("" when absent)."""
    try:
        data = sandbox.read_engine_file(path, limit=_TAIL, tail=True)
    except SandboxError as exc:
        return f"({exc})"
    return (data or b"").decode("utf-8", errors="replace")


def _need(value: str | None, action: str) -> str:
    if not value:
        raise SandboxError(f"{action} needs a path")
    return value


def _user(value: str | int | None) -> str | None:
    return None if value is None else str(value)
