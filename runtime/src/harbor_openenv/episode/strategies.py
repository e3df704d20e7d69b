"""An episode's grading strategies, one per step (:mod:`.grading`), and the environments they
start on the episode's engine: a separate verifier's, on the image Harbor would choose, and a
pristine one of the episode's own image and container spec, readied while the agent works."""

from __future__ import annotations

import functools

from harbor_openenv.backends.base import On
from harbor_openenv.backends.request import EnvRequest
from harbor_openenv.episode.grading import Grading, Separate, Shared, grading_mode
from harbor_openenv.episode.pristine import Pristine, Spare, ready_pristine
from harbor_openenv.episode.runtime import Runtime
from harbor_openenv.sandbox import Sandbox
from harbor_openenv.tasks.config import StepConfig
from harbor_openenv.tasks.env_vars import Envs
from harbor_openenv.tasks.task import Task


class GradingEnvironments:
    """The environments one episode's steps grade in, started on its engine ``on``."""

    def __init__(
        self, runtime: Runtime, task: Task, envs: Envs, image: str, on: On, workdir: str
    ) -> None:
        self.runtime, self.task, self.envs, self.image = runtime, task, envs, image
        self.on, self.workdir = on, workdir

    def discard(self, sandbox: Sandbox) -> None:
        """Remove ``sandbox`` in the background."""
        self.runtime.discard(sandbox, lambda: None)

    def verifier(self, step: StepConfig | None, env: dict[str, str]) -> Sandbox:
        """A separate verifier's environment, on the image Harbor would choose."""
        image = self.runtime.backend.verifier_image(self.task, step, self.on)
        return self.runtime.launch(EnvRequest.verifier(self.task, step, image, env, on=self.on))

    def pristine(self, step: StepConfig | None) -> Sandbox:
        """A fresh environment of the episode's own image and container spec, readied for
        ``step``'s verifier."""
        request = EnvRequest.of_task(
            self.task, self.image, self.envs.environment, on=self.on, alone=True
        )
        sandbox = self.runtime.launch(request)
        try:
            return ready_pristine(sandbox, self.task, step, self.workdir)
        except BaseException:
            self.discard(sandbox)
            raise

    def gradings(self) -> tuple[list[Grading], Spare | None]:
        """Each step's strategy, in order, and the pristine environment on its way (None when
        no step grades in one)."""
        task, settings = self.task, self.runtime.settings
        pristine = settings.pristine(task.id)
        steps: list[StepConfig | None] = list(task.config.steps or []) or [None]
        modes = [grading_mode(task, step, pristine) for step in steps]
        spare = Spare(self.discard) if "pristine" in modes else None
        gradings: list[Grading] = []
        for index, (step, mode) in enumerate(zip(steps, modes, strict=True)):
            if mode == "separate":
                env = self.envs.verifier_container.get(step.name if step else None, {})
                start = functools.partial(self.verifier, step, env)
                last = index + 1 == len(steps)
                gradings.append(
                    Separate(start, last=last, max_artifact_bytes=settings.max_artifact_bytes)
                )
            elif mode == "pristine":
                assert spare is not None
                ready = functools.partial(self.pristine, step)
                gradings.append(Pristine(spare, ready, settings.max_artifact_bytes, self.discard))
            else:
                gradings.append(Shared())
        return gradings, spare
