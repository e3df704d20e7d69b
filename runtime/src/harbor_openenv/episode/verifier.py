"""Grading, as Harbor's ``verifier/verifier.py`` does it, written against the sandbox's methods.

Stop every process the agent started, stage tests/ (then ``steps/<name>/tests/``) to /tests
unless the verifier's image brings them, run test.sh as the verifier's user with its output in
/logs/verifier, and read the reward files and the output's tail through the engine (one read of
/logs/verifier), never through the container's programs. A separate verifier
(``[verifier].environment``) grades in its own environment, with the agent's artifacts copied
over.
"""

from __future__ import annotations

import contextlib
import functools
import json
import posixpath
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harbor_openenv.episode import artifacts
from harbor_openenv.helper import contract
from harbor_openenv.sandbox import (
    LOGS_ARTIFACTS,
    EngineRead,
    Sandbox,
    SandboxError,
    TooLargeError,
)
from harbor_openenv.tasks.config import ArtifactConfig, StepConfig, artifact_entries
from harbor_openenv.tasks.reward import (
    REWARD_DETAILS,
    REWARD_FILES,
    VERIFIER_DIR,
    Reward,
    parse_reward,
)
from harbor_openenv.tasks.task import Task

TAIL = 8192  # bytes of a log an observation carries
TESTS_DIR = "/tests"
_TEST_STDOUT = "test-stdout.txt"


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
    def metrics(self) -> dict[str, float] | None:
        """The verifier's result as Harbor counts it (None: there is none)."""
        return None if self.timed_out or not self.reward.metrics else self.reward.metrics

    @property
    def value(self) -> float | None:
        """The scalar reward (None after a timeout, whatever the files say)."""
        return None if self.timed_out else self.reward.value


@dataclass(frozen=True)
class Verifier:
    """The verifier of a task, or of one of its ``[[steps]]``."""

    task: Task
    step: StepConfig | None
    env: dict[str, str]  # its resolved [verifier].env
    max_reward_bytes: int
    reward_key: str | None = None  # the server's reward rule (Settings.reward_key)

    @property
    def bundled(self) -> bool:
        """Whether the separate verifier's own image brings /tests."""
        task, step = self.task, self.step
        return bool(task.verifier_image_ref(step) or task.verifier_image_dir(step))

    def verify(
        self,
        sandbox: Sandbox,
        *,
        bundled: bool = False,
        alongside: Callable[[], object] | None = None,
        ready: bool = False,
    ) -> Verdict:
        """Stop every process the agent (or an earlier verifier) started and hand a fresh
        /logs/verifier to the verifier's user, with the runtime's helper; stage the tests unless
        ``bundled`` (while the engine starts the shell that then runs test.sh); run test.sh; read
        the reward files and the output's tail through the engine, in one read of the folder.
        ``alongside``: work on the stopped environment (the tamper report, a pristine
        environment's copy of the agent's files), done on a thread of its own while the tests
        are staged and finished before test.sh starts. ``ready``: :func:`ready_pristine` did the
        stop and the staging (nothing ran there since)."""
        task, step = self.task, self.step
        present = [] if bundled or ready else test_folders(task, step)
        table = step.verifier if step else task.config.verifier
        user = verifier_user(task, step)
        if not ready:
            sandbox.stop_processes(
                prepare=(
                    sandbox.default_user if user is None else user,
                    VERIFIER_DIR,
                    TESTS_DIR,
                    contract.PREPARE_STAGE if present else contract.PREPARE_KEEP,
                )
            )

        with ThreadPoolExecutor(1, thread_name_prefix="harbor-openenv-alongside") as pool:
            beside = pool.submit(alongside) if alongside is not None else None

            def stage() -> None:
                for folder in present:
                    sandbox.put_dir(folder, TESTS_DIR, prepared=True, executable="test.sh")
                if beside is not None:
                    beside.result()

            run = sandbox.exec(
                f"(/tests/test.sh) > {VERIFIER_DIR}/{_TEST_STDOUT} 2>&1",
                timeout_s=table.timeout_sec,
                max_output=TAIL,
                user=user,
                env=self.env,
                # staged while the engine starts the shell
                after=stage if present or beside is not None else None,
            )
        found = sandbox.read_engine_files(
            VERIFIER_DIR,
            {**dict.fromkeys(REWARD_FILES, self.max_reward_bytes), _TEST_STDOUT: TAIL},
            tails=(_TEST_STDOUT,),
        )
        stdout = log_text(found[_TEST_STDOUT])
        if run.timed_out:
            return Verdict(parse_reward({}), stdout, True, table.timeout_sec)
        reward = parse_reward(_reward_files(found), self.reward_key)
        return Verdict(reward, stdout, False, table.timeout_sec)

    def verify_separately(
        self,
        agent: Sandbox,
        start: Callable[[], Sandbox],
        *,
        last: bool,
        max_artifact_bytes: int,
        alongside: Callable[[], object] | None = None,
        workdir: bool = False,
        discard: Callable[[Sandbox], None] = Sandbox.remove,
    ) -> Verdict:
        """Stop the agent; run ``alongside`` on its stopped environment while its artifacts are
        copied out; remove it when this is the ``last`` grading of the episode; start the
        verifier's own environment with ``start``, put them there and verify; ``discard`` removes
        that environment after. With ``workdir`` the grading is the pristine verifier's
        (:meth:`_verify_pristine`)."""
        agent.stop_processes()
        entries = artifact_entries(self.task.config, self.step)
        if workdir:
            return self._verify_pristine(
                agent, start, entries, max_artifact_bytes, alongside, discard
            )
        with contextlib.ExitStack() as cleanup:
            pool = cleanup.enter_context(ThreadPoolExecutor(1, thread_name_prefix="harbor-openenv"))
            beside = pool.submit(alongside) if alongside is not None else None
            collected = artifacts.collect(agent, entries, limit=max_artifact_bytes)
            cleanup.callback(artifacts.close, collected)
            if beside is not None:
                beside.result()
            if last:
                agent.remove()
            sandbox = start()
            cleanup.callback(discard, sandbox)
            artifacts.restore(sandbox, collected)
            return self.verify(sandbox, bundled=self.bundled)

    def _verify_pristine(
        self,
        agent: Sandbox,
        start: Callable[[], Sandbox],
        entries: list[ArtifactConfig],
        budget: int,
        alongside: Callable[[], object] | None,
        discard: Callable[[Sandbox], None],
    ) -> Verdict:
        """Grade in the environment ``start`` gives (one :func:`ready_pristine` readied; the
        agent's goes on). While the engine starts the verifier's shell there: ``alongside`` on the
        agent's, its working directory streamed straight across, engine to engine, as it is
        (owners, modes, links; :meth:`Sandbox.copy_tree`), and the artifacts outside it copied
        (those inside travel with it; an empty ``/logs/artifacts`` the agent never wrote is not
        read: :meth:`Sandbox.artifacts_untouched`)."""
        outside = _outside(entries, agent.workdir)
        sandbox = start()

        def copy_in() -> None:
            with ThreadPoolExecutor(2, thread_name_prefix="harbor-openenv-copy") as pool:
                beside = pool.submit(alongside) if alongside is not None else None
                tree = pool.submit(agent.copy_tree, agent.workdir, sandbox, budget=budget)
                unread = agent.artifacts_untouched()  # the fresh environment's empty one stands
                wanted = [e for e in outside if not (unread and _is_logs(e, agent.workdir))]
                collected = artifacts.collect(agent, wanted, limit=budget)
                try:
                    artifacts.restore(sandbox, collected, made=True)
                finally:
                    artifacts.close(collected)
                if not tree.result():
                    raise SandboxError(f"the working directory {agent.workdir} is gone")
                if beside is not None:
                    beside.result()

        try:
            return self.verify(sandbox, alongside=copy_in, ready=True)
        finally:
            discard(sandbox)


def test_folders(task: Task, step: StepConfig | None) -> list[Path]:
    """The task's tests/ and the step's, those that exist, staged to /tests in this order."""
    folders = [task.tests_dir()] + ([task.tests_dir(step)] if step is not None else [])
    return [folder for folder in folders if folder.is_dir()]


def verifier_user(task: Task, step: StepConfig | None) -> str | None:
    """The user test.sh runs as (the step's ``[verifier].user``, else the task's; None: the
    environment's own)."""
    table = step.verifier if step else task.config.verifier
    user = table.user if table.user is not None else task.config.verifier.user
    return None if user is None else str(user)


def ready_pristine(sandbox: Sandbox, task: Task, step: StepConfig | None, workdir: str) -> Sandbox:
    """Ready a fresh environment of the task's image to grade ``step`` ahead of the grading: the
    working directory emptied (the agent's takes its place), the parent folders of the artifacts
    outside it made, the stop before grading done (nothing of the agent's runs there: the
    verifier's folders are prepared) and the tests staged, so the grading only copies the
    agent's files in and runs test.sh (``Verifier.verify(ready=True)``)."""
    entries = _outside(artifact_entries(task.config, step), workdir)
    paths = [posixpath.normpath(posixpath.join(workdir, entry.source)) for entry in entries]
    made = sandbox.exec_root(
        'w=$1; shift; rm -rf -- "$w" && mkdir -p -- "$w" "$@"',
        workdir,
        *[posixpath.dirname(path) or "/" for path in paths],
    )
    if made.exit_code != 0:
        raise SandboxError(f"cannot ready the pristine environment: {made.output.strip()}")
    user = verifier_user(task, step)
    owner = sandbox.default_user if user is None else user
    sandbox.stop_processes(prepare=(owner, VERIFIER_DIR, TESTS_DIR, contract.PREPARE_STAGE))
    for folder in test_folders(task, step):
        sandbox.put_dir(folder, TESTS_DIR, prepared=True, executable="test.sh")
    return sandbox


def _outside(entries: list[ArtifactConfig], workdir: str) -> list[ArtifactConfig]:
    """The artifact entries whose path is outside ``workdir`` (relative sources are inside)."""
    root = workdir.rstrip("/") + "/"
    return [
        entry
        for entry in entries
        if not (posixpath.normpath(posixpath.join(workdir, entry.source)) + "/").startswith(root)
    ]


def _is_logs(entry: ArtifactConfig, workdir: str) -> bool:
    return posixpath.normpath(posixpath.join(workdir, entry.source)) == LOGS_ARTIFACTS


def _reward_files(found: dict[str, EngineRead]) -> dict[str, bytes]:
    """The reward files that exist, by name; an oversized reward raises, oversized details are
    passed on as a note."""
    files: dict[str, bytes] = {}
    for name in REWARD_FILES:
        try:
            data = found[name].get()
        except TooLargeError as exc:
            if name != REWARD_DETAILS:
                raise TooLargeError(f"{exc} (HARBOR_OPENENV_MAX_REWARD_BYTES)") from None
            data = json.dumps({"unread": str(exc)}).encode()
        if data is not None:
            files[name] = data
    return files


def tail_of(sandbox: Sandbox, path: str) -> str:
    """The last :data:`TAIL` bytes of a log file, read through the engine ("" when absent)."""
    return log_text(
        EngineRead.attempt(functools.partial(sandbox.read_engine_file, path, limit=TAIL, tail=True))
    )


def log_text(read: EngineRead) -> str:
    """A log's tail as text: "" when absent, why it could not be read in parentheses."""
    if read.error is not None:
        return f"({read.error})"
    return (read.data or b"").decode("utf-8", errors="replace")
