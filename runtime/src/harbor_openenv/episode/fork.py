"""Forks: an episode's filesystem committed to an image that branch episodes start from.

The trainer's ``fork`` action commits the running episode's container (its files, not its
processes) and answers one ID per branch; a new session's ``reset(fork=ID)`` starts the branch,
an episode of the same task at the same step, from that image. The image is removed once every
ID was used and its last branch's container is gone; IDs never used keep it until the server
shuts down (whose sweep, like the one of dead servers', removes it by its labels).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harbor_openenv.tasks.task import Task

log = logging.getLogger("harbor_openenv")


@dataclass
class ForkPoint:
    """What one fork committed and what its branches start with."""

    image: str  # the committed image's id
    task: Task
    source_image: str  # the parent episode's own image (a pristine verifier's)
    step_index: int
    step_metrics: list[dict[str, float] | None]
    step_info: list[dict[str, Any]]
    changes: list[tuple[str, int]] | None  # the parent's changes at the fork (tamper report)
    unused: set[str] = field(default_factory=set)
    running: int = 0  # branches whose container is not gone yet


def merge_changes(
    before: list[tuple[str, int]], after: list[tuple[str, int]]
) -> list[tuple[str, int]]:
    """The engine's change lists of a container and of its fork's (``after``, against the
    committed image) as one list against the original image: a path added before stays added."""
    merged = dict(before)
    for path, kind in after:
        merged[path] = 1 if kind == 0 and merged.get(path) == 1 else kind
    return sorted(merged.items())


class ForkError(Exception):
    """A ``reset(fork=ID)`` that cannot start: the ID is unknown or was used."""


class Forks:
    """The server's fork points by ID; ``remove_image`` deletes a committed image."""

    def __init__(self, remove_image: Callable[[str], None]) -> None:
        self._remove_image = remove_image
        self._lock = threading.Lock()
        self._points: dict[str, ForkPoint] = {}  # by unused ID
        self._deferred: list[str] = []  # images a removal could not take yet (a fork's child)
        self._closed = False

    def add(self, point: ForkPoint, n: int) -> list[str]:
        """Register ``point`` with ``n`` new IDs (unguessable: each is a capability)."""
        ids = [f"fork-{secrets.token_hex(16)}" for _ in range(n)]
        with self._lock:
            point.unused.update(ids)
            for ident in ids:
                self._points[ident] = point
        return ids

    def take(self, ident: str) -> ForkPoint:
        """The fork point of an unused ID, which is used from now on: one ID, one branch."""
        with self._lock:
            point = self._points.pop(ident, None)
            if point is None:
                raise ForkError(
                    f"no fork {ident!r} on this server: unknown, already used (each ID starts one"
                    " branch), or its server restarted"
                )
            point.unused.discard(ident)
            point.running += 1
            return point

    def give_back(self, ident: str, point: ForkPoint) -> None:
        """A branch that could not start (e.g. the server was full): its ID may start it later."""
        with self._lock:
            if not self._closed:
                point.unused.add(ident)
                self._points[ident] = point
        self.release(point)

    def release(self, point: ForkPoint) -> None:
        """A branch's container is gone (or never started): remove the image if it was the last
        of its branches and no ID is left."""
        with self._lock:
            point.running -= 1
            last = point.running == 0 and not point.unused
        if last:
            self._remove(point.image)

    def pending(self) -> int:
        """IDs not used yet."""
        with self._lock:
            return len(self._points)

    def close(self) -> None:
        """Forget every unused ID and remove the images no branch runs on (shutdown)."""
        with self._lock:
            points = {id(p): p for p in self._points.values()}.values()
            self._points.clear()
            idle = []
            for point in points:
                point.unused.clear()
                if point.running == 0:
                    idle.append(point.image)
            self._closed = True
        for image in idle:
            self._remove(image)

    def _remove(self, image: str) -> None:
        """Remove ``image``, then retry those whose removal failed before: a fork of a branch
        is a child image of its parent fork's, which cannot go before it."""
        try:
            self._remove_image(image)
        except Exception as exc:  # retried after the next removal; the sweep tries again too
            log.info("the fork image %s stays for now: %s", image[:19], exc)
            with self._lock:
                self._deferred.append(image)
            return
        with self._lock:
            retry, self._deferred = self._deferred, []
        for waiting in retry:
            self._remove(waiting)
