"""The disk guard: keeps each running episode's files within its limit where the engine cannot.

Docker caps a container's writable layer only with overlay2 on xfs with project quotas
(``--storage-opt size``, which :meth:`DockerSandbox.start` asks for and drops when the engine
refuses). Everywhere else the guard measures each watched sandbox's :meth:`Sandbox.disk_usage`
(the engine's ``SizeRw``, apparent sizes, so a sparse file counts whole) in the background: soon
after each exec and every ``interval_s``. A container over its limit has the agent's processes
stopped at once, so it cannot keep writing, and is marked: the episode's next step ends it with an
error naming the usage. Between two checks an agent can write past the limit by what it writes in
that time; the check after an exec is asked for as the exec returns, at most once per
:data:`NUDGE_GAP_S` for each sandbox (the engine's size walk costs more than an exec step through
the channel: checking after every step took a third of a fast agent's step time and most of the
engine's CPU).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable

from harbor_openenv.sandbox import Sandbox, SandboxError

log = logging.getLogger("harbor_openenv")
NUDGE_GAP_S = 0.5  # least time between two checks of one sandbox that exec steps ask for


class DiskGuard:
    """Watches sandboxes' writable layers against their limits (MB) on one background thread."""

    def __init__(self, interval_s: float, nudge_gap_s: float = NUDGE_GAP_S) -> None:
        self.interval_s = interval_s
        self.nudge_gap_s = min(nudge_gap_s, interval_s)
        self._watched: dict[Sandbox, int] = {}
        self._checked: dict[Sandbox, float] = {}  # when each was last measured (monotonic)
        self._cond = threading.Condition()
        self._due: set[Sandbox] = set()
        self._closed = False
        self._thread: threading.Thread | None = None

    def watch(self, sandbox: Sandbox, limit_mb: int) -> None:
        with self._cond:
            self._watched[sandbox] = limit_mb
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._run, name="disk-guard", daemon=True)
                self._thread.start()

    def forget(self, sandbox: Sandbox) -> None:
        with self._cond:
            self._watched.pop(sandbox, None)
            self._checked.pop(sandbox, None)
            self._due.discard(sandbox)

    def nudge(self, sandbox: Sandbox) -> None:
        """Check ``sandbox`` soon (after an exec: now, or once :attr:`nudge_gap_s` has passed
        since its last check), without making the caller wait."""
        with self._cond:
            if sandbox in self._watched:
                self._due.add(sandbox)
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def check(self, sandbox: Sandbox, limit_mb: int) -> None:
        """Measure one sandbox now; over its limit, mark the sandbox and stop the agent. A
        sandbox stays watched once marked: every later check over the limit stops again, until
        the episode ends (nothing the agent asked for runs on unmeasured)."""
        try:
            used = sandbox.disk_usage()
        except SandboxError as exc:  # the container may be going away
            log.debug("disk guard: %s", exc)
            return
        if used <= limit_mb << 20:
            return
        if not sandbox.exceeded:
            sandbox.exceeded = (
                f"the agent's files took {used / 2**20:.0f} MB of the container's disk, over its"
                f" limit of {limit_mb} MB ([environment].storage_mb, else HARBOR_OPENENV_DISK_MB);"
                " the episode ended and its processes were stopped"
            )
            log.warning("disk guard: %s", sandbox.exceeded)
        try:
            sandbox.stop_processes()
        except SandboxError as exc:
            log.warning("disk guard: stopping the agent failed: %s", exc)

    def _run(self) -> None:
        full_at = time.monotonic() + self.interval_s
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    now = time.monotonic()
                    ready = {box for box in self._due if self._ready_at(box) <= now}
                    if ready or now >= full_at:
                        break
                    self._cond.wait(min([full_at, *map(self._ready_at, self._due)]) - now)
                if now >= full_at:  # every watched sandbox, nudged or not
                    ready, full_at = set(self._watched), now + self.interval_s
                self._due -= ready
                batch = [(box, self._watched[box]) for box in ready if box in self._watched]
                self._checked.update((box, now) for box, _ in batch)
            for sandbox, limit in batch:
                _guarded(functools.partial(self.check, sandbox, limit))

    def _ready_at(self, sandbox: Sandbox) -> float:
        """When a nudged ``sandbox`` may be measured again."""
        return self._checked.get(sandbox, -self.nudge_gap_s) + self.nudge_gap_s


def _guarded(check: Callable[[], None]) -> None:
    try:
        check()
    except Exception:  # the guard must go on for every other episode
        log.exception("disk guard: a check failed")
