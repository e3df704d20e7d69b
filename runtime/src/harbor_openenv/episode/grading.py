"""Where a step's verifier runs: one :class:`Grading` strategy per step, picked once when the
episode starts (:func:`grading_mode`), each an algorithm of its own over :class:`.Verifier`.

- :class:`Shared` grades in the agent's own environment (Harbor's default).
- :class:`Separate` grades in the verifier's own environment (``[verifier].environment``), the
  agent's artifacts copied over, as Harbor's separate verifier does.
- :class:`.pristine.Pristine` grades in a fresh environment of the task's own image, readied
  while the agent works (``HARBOR_OPENENV_PRISTINE_VERIFIER``).

Every strategy stops the agent's processes first, and runs ``alongside`` (the tamper report) on
its stopped environment before test.sh starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from harbor_openenv.episode import artifacts
from harbor_openenv.episode.verdict import Verdict
from harbor_openenv.episode.verifier import Verifier
from harbor_openenv.sandbox import Sandbox
from harbor_openenv.tasks.config import StepConfig, artifact_entries, verifier_mode
from harbor_openenv.tasks.task import Task

Mode = Literal["shared", "separate", "pristine"]


class Grading(Protocol):
    """One step's grading: run ``verifier`` for the agent's environment ``agent``."""

    @property
    def mode(self) -> Mode:
        """As ``info["verifier_environment"]`` names it."""
        ...

    def grade(
        self, verifier: Verifier, agent: Sandbox, alongside: Callable[[], object]
    ) -> Verdict: ...


def grading_mode(task: Task, step: StepConfig | None, pristine: bool) -> Mode:
    """The step's grading: ``separate`` as the task says; ``pristine`` for a shared-mode step of a
    task the server names (``pristine``: ``Settings.pristine(task.id)``), never a compose
    task's; else ``shared``."""
    if verifier_mode(task.config, step) == "separate":
        return "separate"
    return "pristine" if pristine and task.compose_file is None else "shared"


@dataclass(frozen=True)
class Shared:
    """Grade in the agent's environment: its /tests and /logs/verifier then hold the verifier's."""

    mode: ClassVar[Mode] = "shared"

    def grade(self, verifier: Verifier, agent: Sandbox, alongside: Callable[[], object]) -> Verdict:
        return verifier.verify(agent, alongside=alongside)


@dataclass(frozen=True)
class Separate:
    """Grade in the verifier's own environment, which ``start`` starts and ``discard`` removes
    after; the agent's is removed first when this is the episode's ``last`` grading."""

    start: Callable[[], Sandbox]
    last: bool
    max_artifact_bytes: int
    discard: Callable[[Sandbox], None] = Sandbox.remove
    mode: ClassVar[Mode] = "separate"

    def grade(self, verifier: Verifier, agent: Sandbox, alongside: Callable[[], object]) -> Verdict:
        """Stop the agent; run ``alongside`` on its stopped environment while its artifacts are
        copied out; start the verifier's environment, put them there and verify."""
        agent.stop_processes()
        entries = artifact_entries(verifier.task.config, verifier.step)
        with contextlib.ExitStack() as cleanup:
            pool = cleanup.enter_context(ThreadPoolExecutor(1, thread_name_prefix="harbor-openenv"))
            beside = pool.submit(alongside)
            collected = artifacts.collect(agent, entries, limit=self.max_artifact_bytes)
            cleanup.callback(artifacts.close, collected)
            beside.result()
            if self.last:
                agent.remove()
            sandbox = self.start()
            cleanup.callback(self.discard, sandbox)
            artifacts.restore(sandbox, collected)
            return verifier.verify(sandbox, bundled=verifier.bundled)
