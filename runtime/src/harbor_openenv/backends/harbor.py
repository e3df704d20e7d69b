"""Harbor's environments (``HARBOR_OPENENV_BACKEND=harbor:TYPE``, the harbor extra): each builds
or pulls its task's image itself, and keeps no warm pool (:mod:`harbor_openenv.sandbox.harbor`)."""

from __future__ import annotations

from collections.abc import Mapping

from harbor_openenv.config import Settings
from harbor_openenv.sandbox import Sandbox, SandboxError
from harbor_openenv.sandbox.spec import ComposeSpec, ContainerSpec, Starter
from harbor_openenv.tasks.config import StepConfig
from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.task import Task

from .base import Backend, On


class HarborEnvironments(Backend):
    """Every environment started by ``starter``, Harbor's environment of the settings' type."""

    def __init__(self, starter: Starter, settings: Settings) -> None:
        self.starter, self.settings = starter, settings

    @classmethod
    def of(cls, dataset: Dataset, settings: Settings) -> HarborEnvironments:
        """Harbor's environment the settings name; ValueError naming the variable when Harbor
        is not installed or has no such type."""
        variable = f"{Settings.variable('backend')}={settings.backend}"
        try:
            from harbor_openenv.sandbox.harbor import HarborStarter
        except ImportError as exc:
            raise ValueError(
                f"{variable} needs Harbor ({exc}): pip install 'harbor-openenv[harbor]'"
                " (Python >= 3.12)"
            ) from None
        assert settings.harbor_type is not None
        try:
            starter = HarborStarter(
                dataset.root, settings.harbor_type, kwargs=settings.harbor_env_kwargs or {}
            )
        except ValueError as exc:
            raise ValueError(f"{variable}: {exc}") from None
        return cls(starter, settings)

    def start(
        self,
        spec: ContainerSpec,
        *,
        task_id: str | None,
        labels: Mapping[str, str] | None = None,
        compose: ComposeSpec | None = None,
        on: On = None,
    ) -> Sandbox:
        return self.starter.start(spec, task_id=task_id, labels=labels, compose=compose)

    def task_image(self, task: Task, on: On = None) -> str:
        return task.id  # a name only: Harbor's environment builds or pulls the image

    def verifier_image(self, task: Task, step: StepConfig | None, on: On = None) -> str:
        raise SandboxError(
            f"task {task.id}: a separate verifier's environment is not supported on Harbor's"
            f" backends ({Settings.variable('backend')}={self.settings.backend})"
        )
