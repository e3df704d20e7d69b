"""Forks: an episode's filesystem committed to an image that branch episodes start from.

The trainer's ``fork`` action commits the running episode's container (its files, not its
processes) and answers one ID per branch; a new session's ``reset(fork=ID)`` starts the branch,
an episode of the same task at the same step, from that image. The fork starts every branch's
container at once in the background (:data:`STARTERS` at a time, each counted against the
session limit from then on), so a reset with an ID takes a container that is running already;
one whose start failed (the server was full) starts at the reset instead.

Each ID holds the image: it is removed once every ID was used or dropped and the last branch's
container is gone. An ID not used within ``ttl_s`` (``HARBOR_OPENENV_FORK_TTL_S``) expires: its
container is removed and a reset with it is refused as expired. Shutdown drops every unused ID;
its sweep, like the one of dead servers', removes what is left by its labels.
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from harbor_openenv.backends.fleet import Engine
from harbor_openenv.models import MAX_FORKS
from harbor_openenv.sandbox import Sandbox
from harbor_openenv.tasks.task import Task

log = logging.getLogger("harbor_openenv")
STARTERS = MAX_FORKS  # all of a fork's branch containers start at once, as 16 resets do
_EXPIRED_KEPT = 4096  # expired IDs remembered, to say "expired" rather than "unknown"

# What starts a branch's container (counted against the session limit), and what removes one
# that no branch took, calling its argument once it is gone.
Start = Callable[[], Sandbox]
Discard = Callable[[Sandbox, Callable[[], None]], None]


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
    engine: Engine[Any] | None = None  # of several engines, the one holding the image
    unused: set[str] = field(default_factory=set)
    holds: int = 0  # IDs not dropped whose branch has not ended: each keeps the image


def merge_changes(
    before: list[tuple[str, int]], after: list[tuple[str, int]]
) -> list[tuple[str, int]]:
    """The engine's change lists of a container and of its fork's (``after``, against the
    committed image) as one list against the original image: a path added before stays added,
    and one added before and deleted after was never there."""
    merged = dict(before)
    for path, kind in after:
        if kind == 2 and merged.get(path) == 1:
            del merged[path]
        else:
            merged[path] = 1 if kind == 0 and merged.get(path) == 1 else kind
    return sorted(merged.items())


class ForkError(Exception):
    """A ``reset(fork=ID)`` that cannot start: the ID is unknown, was used or expired."""


class Forks:
    """The server's fork points by ID and their branches' containers started ahead."""

    def __init__(
        self, remove_image: Callable[[str], None], discard: Discard, *, ttl_s: float
    ) -> None:
        """``remove_image`` deletes a committed image; ``discard`` removes a started container
        no branch took; an ID expires ``ttl_s`` after its fork."""
        self._remove_image, self._discard, self._ttl_s = remove_image, discard, ttl_s
        self._lock = threading.Lock()
        self._points: dict[str, ForkPoint] = {}  # by unused ID
        self._ready: dict[str, Future[Sandbox] | None] = {}  # an unused ID's container
        self._expired: OrderedDict[str, None] = OrderedDict()
        self._timers: set[threading.Timer] = set()
        self._starts = ThreadPoolExecutor(STARTERS, thread_name_prefix="harbor-openenv-fork")
        self._deferred: list[str] = []  # images a removal could not take yet (a fork's child)
        self._closed = False

    def add(self, point: ForkPoint, n: int, start: Start) -> list[str]:
        """Register ``point`` with ``n`` new IDs (unguessable: each is a capability) and start
        their containers in the background with ``start``."""
        ids = [f"fork-{secrets.token_hex(16)}" for _ in range(n)]
        timer = threading.Timer(self._ttl_s, self._expire, (ids,))
        timer.daemon = True
        with self._lock:
            point.unused.update(ids)
            point.holds += n
            for ident in ids:
                self._points[ident] = point
                self._ready[ident] = self._starts.submit(start)
            self._timers = {t for t in self._timers if not t.finished.is_set()}
            self._timers.add(timer)
        timer.start()
        return ids

    def take(self, ident: str) -> tuple[ForkPoint, Future[Sandbox] | None]:
        """The fork point of an unused ID, used from now on (one ID, one branch), and its
        container's start (None: none was started for it)."""
        with self._lock:
            point = self._points.pop(ident, None)
            if point is None:
                if ident in self._expired:
                    raise ForkError(
                        f"the fork {ident!r} expired: it was not used within {self._ttl_s:g} s"
                        " of its fork (HARBOR_OPENENV_FORK_TTL_S), and its container is gone"
                    )
                raise ForkError(
                    f"no fork {ident!r} on this server: unknown, already used (each ID starts one"
                    " branch), or its server restarted"
                )
            point.unused.discard(ident)
            return point, self._ready.pop(ident)

    def give_back(self, ident: str, point: ForkPoint) -> None:
        """A branch that could not start (e.g. the server was full): its ID may start it later
        (its container at that reset), unless the server is closing."""
        with self._lock:
            if not self._closed:
                point.unused.add(ident)
                self._points[ident] = point
                self._ready[ident] = None
                return
        self.release(point)

    def release(self, point: ForkPoint) -> None:
        """A branch's container is gone, or an ID was dropped: remove the image if nothing
        holds it any more."""
        with self._lock:
            point.holds -= 1
            last = point.holds == 0
        if last:
            self._remove(point.image)

    def pending(self) -> int:
        """IDs not used yet."""
        with self._lock:
            return len(self._points)

    def close(self) -> None:
        """Drop every unused ID, remove the containers started for them and the images no
        branch runs on (shutdown); a start in flight is waited for."""
        with self._lock:
            self._closed = True
            timers, self._timers = self._timers, set()
            unused = list(self._points)
        for timer in timers:
            timer.cancel()
        self._drop(unused)
        self._starts.shutdown(wait=True, cancel_futures=True)

    def _expire(self, ids: list[str]) -> None:
        """The TTL of a fork's IDs passed: drop the unused ones, remembered as expired (before
        their removal starts, so a reset in between is told "expired", not "unknown")."""
        with self._lock:
            for ident in ids:
                if ident in self._points:
                    self._expired[ident] = None
                    if len(self._expired) > _EXPIRED_KEPT:
                        self._expired.popitem(last=False)
        dropped = self._drop(ids)
        if dropped:
            log.info("%d fork IDs expired unused (HARBOR_OPENENV_FORK_TTL_S)", len(dropped))

    def _drop(self, ids: list[str]) -> list[str]:
        """Forget the unused IDs among ``ids``: each one's container is removed once started,
        then its hold released. Returns the IDs dropped."""
        dropped: list[tuple[str, ForkPoint, Future[Sandbox] | None]] = []
        with self._lock:
            for ident in ids:
                point = self._points.pop(ident, None)
                if point is not None:
                    point.unused.discard(ident)
                    dropped.append((ident, point, self._ready.pop(ident)))
        for _, point, ready in dropped:
            if ready is None:
                self.release(point)
            else:
                ready.add_done_callback(functools.partial(self._unwanted, point))
        return [ident for ident, _, _ in dropped]

    def _unwanted(self, point: ForkPoint, done: Future[Sandbox]) -> None:
        """A started container no branch will take: remove it, then release its hold."""
        if done.cancelled() or done.exception() is not None:
            self.release(point)
            return
        self._discard(done.result(), lambda: self.release(point))

    def remove_image(self, image: str) -> None:
        """Remove a committed image no ID was made for (a fork that failed after its commit)."""
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
