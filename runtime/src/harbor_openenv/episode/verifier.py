"""Grading, as Harbor's ``verifier/verifier.py`` does it, written against the sandbox's methods.

Stop every process the agent started, stage tests/ (then ``steps/<name>/tests/``) to /tests
unless the verifier's image brings them, run test.sh as the verifier's user with its output in
/logs/verifier, and read the reward files and the output's tail through the engine (one read of
/logs/verifier), never through the container's programs. Which environment that is, the
step's :mod:`.grading` strategy decides.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harbor_openenv.episode.verdict import Verdict
from harbor_openenv.helper import contract
from harbor_openenv.sandbox import EngineRead, Sandbox, TooLargeError
from harbor_openenv.tasks.config import StepConfig
from harbor_openenv.tasks.reward import (
    REWARD_DETAILS,
    REWARD_FILES,
    VERIFIER_DIR,
    parse_reward,
)
from harbor_openenv.tasks.task import Task

TAIL = 8192  # bytes of a log an observation carries
TESTS_DIR = "/tests"
_TEST_STDOUT = "test-stdout.txt"


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
        are staged and finished before test.sh starts. ``ready``:
        :func:`.pristine.ready_pristine` did the stop and the staging (nothing ran there
        since)."""
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
