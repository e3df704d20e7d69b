"""The pristine verifier's spare: a fresh environment of the episode's own image, started and
readied (``verifier.ready_pristine``) on a thread of its own while the agent works, so that
evaluate in pristine mode pays only the copy of the agent's files
(``HARBOR_OPENENV_PRISTINE_VERIFIER``). A grading takes it; the episode readies the next one for a
later step; its end discards whatever is left, ready or still starting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from harbor_openenv.sandbox import Sandbox


class Spare:
    """At most one environment on its way; ``discard`` removes one (in the background)."""

    def __init__(self, discard: Callable[[Sandbox], None]) -> None:
        self._discard = discard
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="harbor-openenv-pristine")
        self._next: Future[Sandbox] | None = None
        self._closed = False

    def prepare(self, make: Callable[[], Sandbox]) -> None:
        """Start ``make`` (start and ready an environment), unless one is on its way."""
        with self._lock:
            if self._next is None and not self._closed:
                self._next = self._pool.submit(make)

    def take(self, make: Callable[[], Sandbox]) -> Sandbox:
        """The environment on its way (waited for; the error of a start that failed is raised),
        else one ``make`` makes now."""
        with self._lock:
            coming, self._next = self._next, None
        return coming.result() if coming is not None else make()

    def close(self) -> None:
        """Discard the environment on its way, once started; start no more."""
        with self._lock:
            self._closed, coming, self._next = True, self._next, None
        if coming is not None:
            coming.add_done_callback(
                lambda done: self._discard(done.result()) if done.exception() is None else None
            )
        self._pool.shutdown(wait=False)
