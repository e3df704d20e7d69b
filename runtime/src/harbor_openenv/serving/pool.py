"""The warm pool: task containers started ahead of the resets that will use them.

Off unless ``HARBOR_OPENENV_POOL_SIZE`` > 0. Containers are pooled by :class:`ContainerSpec`,
everything that decides how one starts (image, working directory, limits, network, environment
variables), so only tasks whose containers would start identically share one. A spec's pool
starts filling when a reset first asks for it (and the server asks for its default task's at
startup). A pooled container serves one episode and never returns to the pool. One background
thread keeps every spec asked for at ``size`` idle containers, the most recently asked-for first,
while running episodes plus idle containers stay within ``limit`` (the server's session limit): a
reset that finds no ready container evicts idle ones of other specs to make room for its own.
With the pool on or off, the running episodes alone never exceed ``limit``: a reset beyond it
raises :class:`CapacityError` before any container starts, whichever route sent it. Pooled
containers carry the server's owner label (and ``harbor-openenv.pool`` instead of a task's name),
so shutdown and the startup sweep of dead servers' containers remove them like any other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from harbor_openenv.sandbox import Sandbox, SandboxError
from harbor_openenv.sandbox.spec import ContainerSpec, Starter

LABEL_POOL = "harbor-openenv.pool"
_START_WAIT_S = 60.0  # longest a reset waits for the worker's start in flight to make room

log = logging.getLogger("harbor_openenv")


class CapacityError(SandboxError):
    """A reset beyond the server's session limit: no container is started."""


class ContainerPool:
    """Idle pre-started containers by spec, and the count of running episodes they share a limit
    with. Thread-safe; with ``size`` 0 it only counts."""

    def __init__(self, starter: Starter, *, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        self._starter = starter
        self._cond = threading.Condition()
        self._idle: OrderedDict[ContainerSpec, deque[Sandbox]] = OrderedDict()  # least recent first
        self._failed: set[ContainerSpec] = set()  # not refilled until a reset asks again
        self._active = 0  # episodes holding a container, those whose container is being removed too
        self._ending = 0  # of those, episodes whose container is being removed
        self._starting = 0
        self._closed = False
        self._worker: threading.Thread | None = None

    # -- episodes ------------------------------------------------------------------------------

    def acquire(self, spec: ContainerSpec | None, start: Callable[[], Sandbox]) -> Sandbox:
        """An episode's container: a running pooled one for ``spec`` if there is one, else
        ``start()``'s (``spec`` None: the task cannot be pooled). The episode counts against the
        limit from now until :meth:`release`, also when this raises.

        Every episode counts, whichever route started it (a ``/ws`` session, a plain HTTP
        ``/reset``, the web page): at the limit, a reset waits only for episodes whose container
        is being removed (a session's next reset, right after its last episode ended), and
        otherwise raises :class:`CapacityError` without starting anything."""
        with self._cond:
            deadline = time.monotonic() + _START_WAIT_S
            while self._active >= self.limit:
                remaining = deadline - time.monotonic()
                if not self._ending or remaining <= 0:
                    raise CapacityError(
                        f"the server is at its limit of {self.limit} sessions"
                        f" (HARBOR_OPENENV_MAX_SESSIONS): {self._active} episodes hold a"
                        " container; retry when one ends (each reset counts, whichever route"
                        " sent it: /ws, plain HTTP /reset or the web page)"
                    )
                self._cond.wait(remaining)
            self._active += 1
        try:
            while (pooled := self._take(spec)) is not None:
                if pooled.is_running():
                    return pooled
                log.warning("warm pool: container %s had stopped", pooled.name)
                _remove(pooled)
            self._make_room()
            return start()
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """An episode ended (its container is gone): its place may go to a pooled container."""
        with self._cond:
            self._active -= 1
            self._cond.notify_all()

    def ending(self) -> Callable[[], None]:
        """An episode ended and its container is being removed: until the returned callable runs
        (the container is gone), the episode still counts, and a reset at the limit waits for it
        rather than being refused."""
        with self._cond:
            self._ending += 1

        def released() -> None:
            with self._cond:
                self._ending -= 1
                self._active -= 1
                self._cond.notify_all()

        return released

    @property
    def active(self) -> int:
        """Episodes holding a container (those whose container is being removed included)."""
        with self._cond:
            return self._active

    @property
    def idle(self) -> int:
        """Pooled containers ready for a reset."""
        with self._cond:
            return self._idle_count()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no episode holds a container, at most ``timeout_s``; whether none does."""
        with self._cond:
            return self._cond.wait_for(lambda: self._active == 0, timeout_s)

    def want(self, spec: ContainerSpec) -> None:
        """Keep ``spec``'s pool filled from now on (no-op with the pool off or closed)."""
        with self._cond:
            dropped = self._register(spec)
        for sandbox in dropped:
            _remove(sandbox)

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop refilling, wait for a start in flight, and remove every idle container."""
        with self._cond:
            self._closed = True
            idle = [sandbox for queue in self._idle.values() for sandbox in queue]
            self._idle.clear()
            self._cond.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join(timeout_s)  # the worker removes what it was starting
        for sandbox in idle:
            _remove(sandbox)

    # -- internals (the lock held where noted) -------------------------------------------------

    def _take(self, spec: ContainerSpec | None) -> Sandbox | None:
        """Pop the oldest idle container of ``spec``, registering it as wanted."""
        if spec is None:
            return None
        with self._cond:
            dropped = self._register(spec)
            queue = self._idle.get(spec)
            pooled = queue.popleft() if queue else None
            self._cond.notify_all()  # the worker refills what was taken
        for sandbox in dropped:
            _remove(sandbox)
        return pooled

    def _register(self, spec: ContainerSpec) -> list[Sandbox]:
        """(Lock held.) Mark ``spec`` most recently wanted; drop the least recent specs beyond
        ``limit`` (no more of them could hold a container) and return their idle containers."""
        if self.size <= 0 or self._closed:
            return []
        self._failed.discard(spec)
        self._idle.setdefault(spec, deque())
        self._idle.move_to_end(spec)
        dropped: list[Sandbox] = []
        while len(self._idle) > max(self.limit, 1):
            _, queue = self._idle.popitem(last=False)
            dropped.extend(queue)
        if self._worker is None:
            self._worker = threading.Thread(target=self._refill, name="warm-pool", daemon=True)
            self._worker.start()
        self._cond.notify_all()
        return dropped

    def _make_room(self) -> None:
        """Evict idle containers (least recently wanted specs first) until the running episodes,
        this one included, plus the pooled containers fit the limit. A start in flight is waited
        for: the worker then drops it."""
        evicted = []
        with self._cond:
            deadline = time.monotonic() + _START_WAIT_S
            while self._total() > self.limit:
                queue = next((q for q in self._idle.values() if q), None)
                if queue is not None:
                    evicted.append(queue.popleft())
                elif not self._starting or not self._cond.wait(
                    max(0.0, deadline - time.monotonic())
                ):
                    break  # a start in flight did not end in time
        for sandbox in evicted:
            _remove(sandbox)

    def _total(self) -> int:
        """(Lock held.) Running episodes, idle containers and the start in flight."""
        return self._active + self._idle_count() + self._starting

    def _idle_count(self) -> int:
        return sum(len(queue) for queue in self._idle.values())

    def _next(self) -> ContainerSpec | None:
        """(Lock held.) The most recently wanted spec short of ``size``, if there is room."""
        if self._closed or self._total() >= self.limit:
            return None
        for spec in reversed(self._idle):
            if len(self._idle[spec]) < self.size and spec not in self._failed:
                return spec
        return None

    def _refill(self) -> None:
        """The worker: start one container at a time for the spec :meth:`_next` names."""
        while True:
            with self._cond:
                spec = self._next()
                while not self._closed and spec is None:
                    self._cond.wait()
                    spec = self._next()
                if self._closed or spec is None:
                    return
                self._starting += 1
            sandbox: Sandbox | None = None
            try:
                sandbox = self._starter.start(spec, task_id=None, labels={LABEL_POOL: "1"})
            except Exception as exc:  # the worker must go on; the next reset asks again
                log.warning("warm pool: starting a container of %s failed: %s", spec.image, exc)
            with self._cond:
                self._starting -= 1
                queue = self._idle.get(spec)
                keep = (
                    sandbox is not None
                    and queue is not None
                    and not self._closed
                    and len(queue) < self.size
                    and self._total() < self.limit
                )
                if keep and queue is not None and sandbox is not None:
                    queue.append(sandbox)
                elif sandbox is None:
                    self._failed.add(spec)
                self._cond.notify_all()
            if sandbox is not None and not keep:
                _remove(sandbox)


def _remove(sandbox: Sandbox) -> None:
    try:
        sandbox.remove()
    except SandboxError as exc:  # the shutdown sweep tries again
        log.warning("warm pool: removing %s failed: %s", sandbox.name, exc)
