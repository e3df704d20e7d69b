"""Which image an environment of a task starts from on a Docker engine: the one images.lock pins
(pulled by digest, never built), else the task's own (pulled or built)."""

from __future__ import annotations

from harbor_openenv.tasks.config import StepConfig
from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.task import Task

from .lock import LOCK_NAME, LockedImage, read_lock, stale_pin
from .resolver import ImageError, ImageResolver, verifier_source


class Pins:
    """The images.lock beside ``dataset``'s tasks folder (where tasks.sha256 is), read once: a
    malformed lock stops start-up; each pinned task is checked against its pin once."""

    def __init__(self, dataset: Dataset) -> None:
        lock = dataset.root.parent / LOCK_NAME
        self.locked: dict[str, LockedImage] = read_lock(lock) if lock.is_file() else {}
        self._stale: dict[str, str | None] = {}

    def task_image(self, images: ImageResolver, task: Task) -> str:
        """The local image ``task``'s episodes start from on ``images``' engine."""
        locked = self.locked.get(task.id)
        if locked is None:
            return images.resolve(task)
        if task.id not in self._stale:
            self._stale[task.id] = stale_pin(task, locked)
        stale = self._stale[task.id]
        if stale:
            raise ImageError(stale)
        try:
            return images.use(task, locked.image)
        except ImageError as exc:
            raise ImageError(
                f"{exc} (the image {LOCK_NAME} pins for task {task.id}: push it again with"
                " `harbor-openenv images push`, or log the engine in to its registry)"
            ) from None

    def verifier_image(self, images: ImageResolver, task: Task, step: StepConfig | None) -> str:
        """A separate verifier's image, as Harbor would choose it (the one images.lock pins for
        it, pulled by digest, when there is one)."""
        folder, ref = task.verifier_image_dir(step), task.verifier_image_ref(step)
        source = verifier_source(task, step)
        locked = self.locked.get(task.id)
        pinned = locked.verifiers.get(source) if locked is not None and source else None
        if pinned:
            return images.use(task, pinned)
        if ref:
            return images.use(task, ref)
        if folder:
            return images.build(task, folder)
        return self.task_image(images, task)
