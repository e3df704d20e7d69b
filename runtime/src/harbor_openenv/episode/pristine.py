"""The pristine grading (``HARBOR_OPENENV_PRISTINE_VERIFIER``): a step graded in a fresh
environment of the episode's own image, its :class:`Spare`, started and readied
(:func:`ready_pristine`) on a thread of its own while the agent works, so that evaluate pays only
the copy of the agent's files. A grading takes it; the episode readies the next one for a later
step; its end discards whatever is left, ready or still starting.
"""

from __future__ import annotations

import posixpath
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar, Literal

from harbor_openenv.episode import artifacts
from harbor_openenv.episode.verdict import Verdict
from harbor_openenv.episode.verifier import TESTS_DIR, Verifier, test_folders, verifier_user
from harbor_openenv.helper import contract
from harbor_openenv.sandbox import LOGS_ARTIFACTS, Sandbox, SandboxError
from harbor_openenv.tasks.config import ArtifactConfig, StepConfig, artifact_entries
from harbor_openenv.tasks.reward import VERIFIER_DIR
from harbor_openenv.tasks.task import Task


class Spare:
    """At most one environment on its way; ``discard`` removes one (in the background)."""

    def __init__(self, discard: Callable[[Sandbox], None]) -> None:
        self._discard = discard
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="harbor-openenv-pristine")
        self._next: Future[Sandbox] | None = None
        self._closed = False

    def prepare(self, make: Callable[[], Sandbox]) -> None:
        """Start ``make`` (start and ready an environment), unless one is on its way."""
        with self._lock:
            if self._next is None and not self._closed:
                self._next = self._pool.submit(make)

    def take(self, make: Callable[[], Sandbox]) -> Sandbox:
        """The environment on its way (waited for; the error of a start that failed is raised),
        else one ``make`` makes now."""
        with self._lock:
            coming, self._next = self._next, None
        return coming.result() if coming is not None else make()

    def close(self) -> None:
        """Discard the environment on its way, once started; start no more."""
        with self._lock:
            self._closed, coming, self._next = True, self._next, None
        if coming is not None:
            coming.add_done_callback(
                lambda done: self._discard(done.result()) if done.exception() is None else None
            )
        self._pool.shutdown(wait=False)


@dataclass(frozen=True)
class Pristine:
    """Grade in the environment the ``spare`` has ready (``make`` starts and readies one when it
    has none); ``discard`` removes it after. The agent's environment goes on."""

    spare: Spare
    make: Callable[[], Sandbox]
    max_artifact_bytes: int
    discard: Callable[[Sandbox], None]
    mode: ClassVar[Literal["pristine"]] = "pristine"

    def prepare(self) -> None:
        """Have an environment for this grading on its way."""
        self.spare.prepare(self.make)

    def grade(self, verifier: Verifier, agent: Sandbox, alongside: Callable[[], object]) -> Verdict:
        """Stop the agent; while the engine starts the verifier's shell in the fresh environment:
        ``alongside`` on the agent's, its working directory streamed straight across, engine to
        engine, as it is (owners, modes, links; :meth:`Sandbox.copy_tree`), and the artifacts
        outside it copied (those inside travel with it; an empty ``/logs/artifacts`` the agent
        never wrote is not read: :meth:`Sandbox.artifacts_untouched`)."""
        agent.stop_processes()
        budget = self.max_artifact_bytes
        outside = _outside(artifact_entries(verifier.task.config, verifier.step), agent.workdir)
        sandbox = self.spare.take(self.make)

        def copy_in() -> None:
            with ThreadPoolExecutor(2, thread_name_prefix="harbor-openenv-copy") as pool:
                beside = pool.submit(alongside)
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
                beside.result()

        try:
            return verifier.verify(sandbox, alongside=copy_in, ready=True)
        finally:
            self.discard(sandbox)


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
