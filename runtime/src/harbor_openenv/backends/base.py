"""The one interface every backend implements: where a server's environments run, chosen once at
start-up (:func:`harbor_openenv.backends.chosen`), owning its engines from start to close.

A backend starts environments (it is the warm pool's :class:`.spec.Starter` too), names the image
a task's episodes start from, places episodes when it has several engines, counts and sweeps what
it started, and removes fork images. A new backend is one module with one subclass: the abstract
methods are what it must do; the rest have the answers of a backend with one place and nothing to
sweep.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from harbor_openenv.sandbox import Sandbox, SandboxError
from harbor_openenv.sandbox.spec import ComposeSpec, ContainerSpec
from harbor_openenv.tasks.config import StepConfig
from harbor_openenv.tasks.task import Task

from .fleet import Engine, EngineStatus, Lease

R = TypeVar("R")
On = Engine[Any] | None  # of several engines, which one (None: the backend's one place)


class Backend(ABC):
    """Where a server's environments run."""

    @abstractmethod
    def start(
        self,
        spec: ContainerSpec,
        *,
        task_id: str | None,
        labels: Mapping[str, str] | None = None,
        compose: ComposeSpec | None = None,
        on: On = None,
    ) -> Sandbox:
        """A running, prepared environment on ``on``; ``task_id`` None: a warm-pool container
        for whichever task asks first. Raises :class:`.SandboxError`."""

    @abstractmethod
    def task_image(self, task: Task, on: On = None) -> str:
        """The image ``task``'s episodes start from (pulled or built now if need be)."""

    def verifier_image(self, task: Task, step: StepConfig | None, on: On = None) -> str:
        """A separate verifier's image (by default: none can run here)."""
        raise SandboxError(f"task {task.id}: a separate verifier's environment is not supported")

    def place(self, work: Callable[[On], R]) -> tuple[Lease[Any] | None, R]:
        """``work`` on the place a new episode goes to, and that place's lease (None: one
        place)."""
        return None, work(None)

    def lease(self, on: On) -> Lease[Any] | None:
        """A new episode's place on ``on`` (a fork's branch goes where its fork is)."""
        return None

    def ping(self) -> None:
        """Reach the backend's engine now (raises when it does not answer; none: nothing)."""
        return None

    def running(self) -> int | None:
        """This server's running environments now (None: the backend cannot tell)."""
        return None

    def statuses(self) -> tuple[EngineStatus, ...]:
        """Of several engines, which are up."""
        return ()

    def sweep(self) -> int:
        """Remove what servers that are no longer running left behind; how many environments."""
        return 0

    def sweep_scratch(self) -> int:
        """Remove the compose project folders of servers that died; how many."""
        return 0

    def remove_image(self, image: str) -> None:
        """Remove a fork's committed image (gone already: nothing to do)."""
        return None

    def close(self) -> int:
        """Remove every environment this server started (the last call); how many."""
        return 0
