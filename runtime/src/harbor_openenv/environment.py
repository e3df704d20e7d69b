"""The OpenEnv environment: one episode is one task in one container.

The agent acts with exec/read/write/list inside the task's working directory. The trainer's
orchestration actions, evaluate (run the task's verifier and end the episode) and solve (run the
oracle), need the server's orchestration token and never appear in the agent's tool schema.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import random
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from openenv.core.env_server.interfaces import Environment

from .dataset import Dataset, DatasetError, Task, TaskKind
from .image import ImageError, ImageResolver
from .manifest import MANIFEST_NAME, verify_manifest
from .models import ORCHESTRATION_ACTIONS, HarborAction, HarborObservation, HarborState
from .reward import VERIFIER_DIR, parse_reward
from .sandbox import PathEscapeError, Sandbox, SandboxError, remove_containers, server_identity

_TAIL = 8192


@dataclass(frozen=True)
class Settings:
    """Server-wide limits and switches (see ``app.settings_from_env`` for their variables)."""

    exec_timeout_s: float = 300.0
    max_output_bytes: int = 1 << 20
    max_read_bytes: int = 8 << 20
    solve_timeout_s: float = 1800.0
    pids_limit: int = 4096
    orchestration_token: str | None = None
    default_task: str | None = None


class Runtime:
    """What every session of one server shares: the dataset, the engine, the image cache."""

    def __init__(self, tasks_root: Path, settings: Settings | None = None) -> None:
        self.dataset = Dataset(tasks_root)
        self.settings = settings or Settings()
        self.owner = server_identity()
        self._docker: docker.DockerClient | None = None
        self._resolver: ImageResolver | None = None
        self._lock = threading.Lock()
        self._checked: set[str] = set()

    @property
    def docker(self) -> docker.DockerClient:
        """The engine client, connected on first use so /health never touches Docker."""
        with self._lock:
            if self._docker is None:
                try:
                    client = docker.from_env(timeout=300)
                    client.ping()
                except docker.errors.DockerException as exc:
                    raise SandboxError(f"cannot reach the Docker engine: {exc}") from None
                self._docker, self._resolver = client, ImageResolver(client)
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

    def shutdown(self) -> int:
        """Remove every container this server started."""
        if self._docker is None:
            return 0
        return remove_containers(self._docker, owner=self.owner)


class HarborEnvironment(Environment[HarborAction, HarborObservation, HarborState]):
    """Serves one task per episode; construction is cheap (OpenEnv builds one per HTTP call)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self._runtime = runtime
        self._sandbox: Sandbox | None = None
        self._task: Task | None = None
        self._state = HarborState(task_count=0)

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
        self.close()
        dataset = self._runtime.dataset
        self._state = HarborState(
            episode_id=episode_id or str(uuid.uuid4()), task_count=len(dataset)
        )
        try:
            task = dataset[self._pick(task_id, index, seed)]
            self._state.task_id = task.id
            refusal = _refusal(task) or self._runtime.check_files(task)
            if refusal:
                return self._fail("reset", refusal, task_id=task.id, done=True)
            config = task.config
            image = self._runtime.images.resolve(task)
            self._sandbox = Sandbox.start(
                self._runtime.docker,
                image,
                task_id=task.id,
                owner=self._runtime.owner,
                workdir=config.environment.workdir,
                cpus=config.environment.cpus,
                memory_mb=config.environment.memory_mb,
                network="none" if config.environment.network_mode == "no-network" else None,
                pids_limit=self._runtime.settings.pids_limit,
            )
            instruction = task.instruction
        except (DatasetError, ImageError, SandboxError) as exc:
            self.close()
            return self._fail("reset", str(exc), task_id=self._state.task_id, done=True)
        self._task = task
        self._state.workdir = self._sandbox.workdir
        return HarborObservation(
            action_type="reset",
            task_id=task.id,
            instruction=instruction,
            workdir=self._sandbox.workdir,
            info={
                "agent_timeout_sec": config.agent.timeout_sec,
                "verifier_timeout_sec": config.verifier.timeout_sec,
                "exec_timeout_s": self._runtime.settings.exec_timeout_s,
                "metadata": config.metadata,
            },
        )

    def _pick(self, task_id: str | None, index: int | None, seed: int | None) -> str:
        ids = self._runtime.dataset.ids
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
        if self._sandbox is None or self._task is None:
            done = self._state.evaluated
            reason = "the episode has ended" if done else "no episode is running"
            return self._fail(kind, f"{reason}: call reset first", done=done)
        self._state.step_count += 1
        try:
            return getattr(self, f"_{kind}")(action)
        except PathEscapeError as exc:
            return self._fail(kind, f"refused: {exc}")
        except SandboxError as exc:
            return self._fail(kind, str(exc))

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
            user=_user(self._task.config.agent.user),
        )
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
        path = self._sandbox.confine(_need(action.path, "read"))
        data, cut = self._sandbox.read_file(path, max_bytes=self._runtime.settings.max_read_bytes)
        try:
            text, encoding = data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(data).decode(), "base64"
        return self._observe("read", output=text, encoding=encoding, truncated=cut)

    def _write(self, action: HarborAction) -> HarborObservation:
        path = self._sandbox.confine(_need(action.path, "write"))
        content = action.content or ""
        if action.encoding == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except binascii.Error:
                return self._fail("write", "content is not valid base64")
        else:
            data = content.encode()
        self._sandbox.write_file(path, data)
        return self._observe("write", output=f"wrote {len(data)} bytes to {path}")

    def _list(self, action: HarborAction) -> HarborObservation:
        path = self._sandbox.confine(action.path or ".")
        return self._observe("list", output=self._sandbox.list_dir(path))

    # -- orchestration -------------------------------------------------------------------------

    def _evaluate(self, action: HarborAction) -> HarborObservation:
        """Stop the agent, clear the verifier's output, stage tests/, run test.sh, read reward."""
        sandbox, config = self._sandbox, self._task.config
        sandbox.stop_processes()
        cleared = sandbox.exec_root(
            'rm -rf -- "$1" && mkdir -p -- "$1" && chmod 777 -- "$1"', VERIFIER_DIR
        )
        if cleared.exit_code != 0:
            raise SandboxError(f"cannot clear {VERIFIER_DIR}: {cleared.output.strip()}")
        sandbox.put_dir(self._task.path / "tests", "/tests")
        sandbox.exec_root("chmod +x /tests/test.sh")
        timeout = config.verifier.timeout_sec
        run = sandbox.exec(
            f"(/tests/test.sh) > {VERIFIER_DIR}/test-stdout.txt 2>&1",
            timeout_s=timeout,
            max_output=_TAIL,
            user=_user(config.verifier.user),
            env=config.verifier.env,
        )
        files = sandbox.get_files(VERIFIER_DIR)
        stdout = files.pop("test-stdout.txt", b"")[-_TAIL:].decode("utf-8", errors="replace")
        if run.timed_out:
            reward = parse_reward({})
            error = f"the verifier timed out after {timeout:g} s ([verifier].timeout_sec)"
        else:
            reward = parse_reward(files)
            error = reward.error
        self._state.evaluated, self._state.reward = True, reward.value
        self._end_episode()
        return self._observe(
            "evaluate",
            reward=None if run.timed_out else reward.value,
            done=True,
            error=error,
            output=stdout,
            info={
                "metrics": reward.metrics,
                "reward_details": reward.details,
                "verifier_timed_out": run.timed_out,
            },
        )

    def _solve(self, action: HarborAction) -> HarborObservation:
        """Run the oracle: stage solution/ to /solution and run solve.sh, then remove it."""
        sandbox, config = self._sandbox, self._task.config
        solution = self._task.path / "solution"
        if not (solution / "solve.sh").is_file():
            return self._fail("solve", f"{self._task.id}/solution/solve.sh: missing")
        sandbox.put_dir(solution, "/solution")
        sandbox.exec_root("chmod +x /solution/solve.sh")
        timeout = config.agent.timeout_sec or self._runtime.settings.solve_timeout_s
        run = sandbox.exec(
            "(/solution/solve.sh) > /logs/agent/oracle.txt 2>&1",
            timeout_s=timeout,
            max_output=_TAIL,
            user=_user(config.agent.user),
            env={"DEBIAN_FRONTEND": "noninteractive", **config.solution.env},
        )
        log = sandbox.get_files("/logs/agent").get("oracle.txt", b"")[-_TAIL:]
        sandbox.exec_root("rm -rf /solution")
        return self._observe(
            "solve",
            output=log.decode("utf-8", errors="replace"),
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
        return HarborObservation(action_type=action_type, error=error, **fields)

    def _end_episode(self) -> None:
        sandbox, self._sandbox, self._task = self._sandbox, None, None
        if sandbox is not None:
            sandbox.remove()

    @property
    def state(self) -> HarborState:
        return self._state

    def close(self) -> None:
        self._end_episode()


def _refusal(task: Task) -> str | None:
    if task.kind is TaskKind.RUNNABLE:
        return None
    if task.kind is TaskKind.TEXT_ONLY:
        return (
            f"{task.id} is a text-only task (no environment/ and no tests/): there is no"
            " container to run; score it client-side against solution/patch.diff"
        )
    return f"{task.id} cannot run ({task.kind}): " + "; ".join(task.problems)


def _need(value: str | None, action: str) -> str:
    if not value:
        raise SandboxError(f"{action} needs a path")
    return value


def _user(value: str | int | None) -> str | None:
    return None if value is None else str(value)
