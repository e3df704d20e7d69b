"""What ``harbor-openenv images`` makes: a plan from the tasks and their ``images.lock`` pins.

The plan is data: which image each runnable task's episodes start (its own, and each separate
verifier's), made once however many tasks share it, in the dataset's order; how each is made (the
task's own resolution, a pull, or a verifier's build); which tasks cannot be served and why; and,
for ``push``, which images to push and the lock they make. It reads the tasks' files and touches
no engine; ``PlannedImage.make`` is the one step that does, through an ``ImageResolver``.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harbor_openenv.images.lock import LockedImage, lock_source, stale_pin
from harbor_openenv.images.resolver import (
    ImageError,
    ImageResolver,
    build_spec,
    verifier_source,
    verifier_steps,
)
from harbor_openenv.tasks.task import Task, TaskKind


class How(enum.Enum):
    """How an image is made: as the task resolves it, pulled by reference, or built from a
    separate verifier's ``tests/Dockerfile``."""

    TASK = "task"
    PULL = "pull"
    BUILD = "build"


@dataclass
class PlannedImage:
    """One image to make, by ``task`` (the first that needs it); ``tasks``: every task that does."""

    ref: str
    task: Task
    how: How
    folder: Path | None = None  # How.BUILD: the verifier's folder
    tasks: list[str] = field(default_factory=list)

    @property
    def pulls(self) -> bool:
        """Making it pulls (a registry image, a pinned digest) rather than builds."""
        source = self.task.image
        if self.how is How.TASK:
            return source is not None and source.kind != "dockerfile"
        return self.how is How.PULL

    def make(self, resolver: ImageResolver) -> str:
        """Pull or build the image with ``resolver`` unless the engine has it; its reference."""
        if self.how is How.TASK:
            return resolver.resolve(self.task)
        if self.how is How.PULL:
            return resolver.use(self.task, self.ref)
        assert self.folder is not None
        return resolver.build(self.task, self.folder)


@dataclass
class ImagesPlan:
    """The images to make in order, the tasks' problems, and what ``push`` pushes and pins."""

    images: dict[str, PlannedImage] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # the tasks that cannot be served
    skipped: list[str] = field(default_factory=list)  # "id (kind)": tasks with no image
    sources: dict[str, str] = field(default_factory=dict)  # task id: its own image
    verifiers: dict[str, list[str]] = field(default_factory=dict)  # its separate verifiers'

    def to_push(self, failed: Collection[str] = ()) -> list[str]:
        """The images ``push`` pushes, once each: every task's own, then its verifiers', but
        those that failed to be made."""
        every = [*self.sources.values(), *(ref for refs in self.verifiers.values() for ref in refs)]
        return [ref for ref in dict.fromkeys(every) if ref in self.images and ref not in failed]

    def lock(self, pushed: Mapping[str, str]) -> dict[str, LockedImage]:
        """The ``images.lock`` entries, by task id, once ``pushed`` maps each image to its digest
        reference."""
        return {
            task_id: LockedImage(
                pushed.get(ref, ""),
                ref,
                {v: pushed.get(v, "") for v in self.verifiers[task_id] if v in self.images},
            )
            for task_id, ref in sorted(self.sources.items())
        }


def task_images(task: Task) -> list[PlannedImage]:
    """The images a runnable task's episodes start: its environment's, and each separate
    verifier's own (``docker_image`` or ``tests/Dockerfile``). A compose task's other services
    are docker compose's to pull or build. ImageError when its build does not resolve."""
    images: dict[str, PlannedImage] = {}
    source = task.image
    if source is not None:
        if source.kind == "dockerfile":
            tag = build_spec(task).tag
            images[tag] = PlannedImage(tag, task, How.TASK)
        elif source.ref:
            images[source.ref] = PlannedImage(source.ref, task, How.TASK)
    for step in verifier_steps(task):
        ref, folder = task.verifier_image_ref(step), task.verifier_image_dir(step)
        if ref:
            images.setdefault(ref, PlannedImage(ref, task, How.PULL))
        elif folder:
            built = verifier_source(task, step) or ""
            images.setdefault(built, PlannedImage(built, task, How.BUILD, folder))
    return list(images.values())


def plan_images(tasks: Iterable[Task], pins: Mapping[str, LockedImage]) -> ImagesPlan:
    """The plan for ``tasks``; ``pins``: ``images.lock``'s entries when a server would use them
    (``images build``), so a pinned task's image is its locked digest, pulled, never built."""
    plan = ImagesPlan()
    for task in tasks:
        if task.kind is TaskKind.INVALID:
            plan.problems.append(f"{task.id}: is invalid: {'; '.join(task.problems)}")
            continue
        if task.kind is not TaskKind.RUNNABLE:
            plan.skipped.append(f"{task.id} ({task.kind}: no image to build)")
            continue
        try:
            images = task_images(task)
        except ImageError as exc:  # a compose file whose main build does not resolve
            plan.problems.append(str(exc))
            continue
        pin = pins.get(task.id)
        stale = stale_pin(task, pin) if pin is not None else None
        if stale:  # the server refuses the task: nothing to make for its own image
            plan.problems.append(stale)
            images = [image for image in images if image.ref != lock_source(task)]
        elif pin is not None:  # the task's image and its separate verifiers', pulled
            locked = {pin.source: pin.image, **pin.verifiers}
            images = [
                PlannedImage(locked[image.ref], task, How.PULL) if image.ref in locked else image
                for image in images
            ]
        for image in images:
            plan.images.setdefault(image.ref, image).tasks.append(task.id)
        own = lock_source(task)
        if own is not None and own in plan.images:
            plan.sources[task.id] = own
        plan.verifiers[task.id] = [
            ref for step in verifier_steps(task) if (ref := verifier_source(task, step))
        ]
    return plan
