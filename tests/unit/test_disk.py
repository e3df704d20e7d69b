"""The disk guard's schedule (disk.py), on a stand-in sandbox that counts its measurements: a
nudge is answered at once, nudges closer than the gap are coalesced, the periodic check covers
every watched sandbox. The limit itself, against a real engine: test_hostile_verifier.py."""

from __future__ import annotations

import threading
import time

from harbor_openenv.serving.disk import DiskGuard


class Counted:
    """disk_usage() records when it was called; a write over the limit shows in ``used``."""

    def __init__(self) -> None:
        self.exceeded: str | None = None
        self.used = 0
        self.calls: list[float] = []
        self.stopped = threading.Event()
        self.measured = threading.Event()

    def disk_usage(self) -> int:
        self.calls.append(time.monotonic())
        self.measured.set()
        return self.used

    def stop_processes(self) -> None:
        self.stopped.set()


def test_a_nudge_is_answered_at_once_and_a_burst_is_coalesced():
    guard, box = DiskGuard(interval_s=30, nudge_gap_s=0.5), Counted()
    try:
        guard.watch(box, limit_mb=1)  # type: ignore[arg-type]
        start = time.monotonic()
        guard.nudge(box)  # type: ignore[arg-type]
        assert box.measured.wait(2)
        assert box.calls[0] - start < 0.2  # not held back by the gap: never checked before
        for _ in range(200):  # an agent's fast exec steps, over about a second
            guard.nudge(box)  # type: ignore[arg-type]
            time.sleep(0.005)
        time.sleep(0.6)  # the last nudge's check, a gap after the one before
        gaps = [b - a for a, b in zip(box.calls, box.calls[1:], strict=False)]
        assert 2 <= len(box.calls) <= 5, box.calls
        assert min(gaps) >= 0.45, gaps
    finally:
        guard.close()


def test_the_check_a_burst_deferred_still_ends_an_episode_over_its_limit():
    guard, box = DiskGuard(interval_s=30, nudge_gap_s=0.5), Counted()
    try:
        guard.watch(box, limit_mb=1)  # type: ignore[arg-type]
        guard.nudge(box)  # type: ignore[arg-type]
        assert box.measured.wait(2)
        box.used = 2 << 20  # the agent's next step writes past the limit, right after a check
        guard.nudge(box)  # type: ignore[arg-type]
        assert box.stopped.wait(2), box.calls
        assert box.exceeded and "over its limit of 1 MB" in box.exceeded
    finally:
        guard.close()


def test_the_periodic_check_measures_every_watched_sandbox_unasked():
    guard, boxes = DiskGuard(interval_s=0.2), [Counted(), Counted()]
    try:
        for box in boxes:
            guard.watch(box, limit_mb=1)  # type: ignore[arg-type]
        for box in boxes:
            assert box.measured.wait(2)
    finally:
        guard.close()


def test_a_sandbox_over_its_limit_stays_measured_and_is_stopped_again():
    """Once marked, a sandbox is still measured: each check over the limit stops the agent's
    processes again (before, a marked sandbox was never measured again)."""
    guard, box = DiskGuard(interval_s=30), Counted()
    box.used = 2 << 20
    guard.check(box, limit_mb=1)  # type: ignore[arg-type]
    first = box.exceeded
    assert box.stopped.is_set() and first
    box.stopped.clear()
    box.used = 3 << 20  # something the agent asked for wrote on
    guard.check(box, limit_mb=1)  # type: ignore[arg-type]
    assert box.stopped.is_set() and box.exceeded == first
