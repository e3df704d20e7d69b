"""The in-memory backend: a whole backend in one file, implementing the one interface
(:class:`harbor_openenv.backends.base.Backend`) as a new backend would. Every environment is a
:class:`FakeSandbox`, started as a real backend's would be (the real warm pool counts them); a
task's image is named, never built. For unit tests of the logic above the interface only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from _fake_sandbox import FakeSandbox

from harbor_openenv.backends.base import Backend, On
from harbor_openenv.sandbox import Sandbox
from harbor_openenv.sandbox.spec import ComposeSpec, ContainerSpec
from harbor_openenv.tasks.config import StepConfig
from harbor_openenv.tasks.task import Task


class MemoryBackend(Backend):
    """Records each environment it started (``sandboxes``), with its spec (``specs``), and the
    fork images it was asked to remove (``removed_images``)."""

    def __init__(self, sandbox: type[FakeSandbox] = FakeSandbox) -> None:
        self.sandbox = sandbox
        self.sandboxes: list[FakeSandbox] = []
        self.specs: list[ContainerSpec] = []
        self.projects: list[ComposeSpec | None] = []
        self.removed_images: list[str] = []

    def start(
        self,
        spec: ContainerSpec,
        *,
        task_id: str | None,
        labels: Mapping[str, str] | None = None,
        compose: ComposeSpec | None = None,
        on: On = None,
    ) -> Sandbox:
        sandbox = self.sandbox(spec.workdir or "/work")
        self.sandboxes.append(sandbox)
        self.specs.append(spec)
        self.projects.append(compose)
        return cast(Sandbox, sandbox)

    def task_image(self, task: Task, on: On = None) -> str:
        return f"fake/{task.id}"

    def verifier_image(self, task: Task, step: StepConfig | None, on: On = None) -> str:
        return task.verifier_image_ref(step) or self.task_image(task, on)

    def running(self) -> int | None:
        return sum(not sandbox.removed for sandbox in self.sandboxes)

    def remove_image(self, image: str) -> None:
        self.removed_images.append(image)
