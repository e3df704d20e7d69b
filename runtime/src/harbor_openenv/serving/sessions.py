"""The server's open WebSocket sessions, counted for readiness and the metrics."""

from __future__ import annotations

import threading


class SessionCount:
    """Open sessions, and of those the ones that have not sent a reset yet. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._unreset = 0

    def opened(self) -> None:
        with self._lock:
            self._open += 1

    def closed(self) -> None:
        with self._lock:
            self._open -= 1

    def unreset(self, change: int) -> None:
        """A session opened without a reset yet (+1), or sent its first or closed without (-1)."""
        with self._lock:
            self._unreset += change

    def now(self) -> tuple[int, int]:
        """Open sessions, and of those the ones never reset."""
        with self._lock:
            return self._open, self._unreset
