"""The pristine verifier's spare (episode/pristine.py): one environment made ahead, taken by a
grading (or made then when none is on its way), and discarded at the end whether it is ready or
still starting; and what readies it (pristine.ready_pristine): the working directory emptied,
the artifacts' folders made and the tests staged. No engine: the real pristine verifier is
tests/hostile/test_pristine.py."""

from __future__ import annotations

import threading

from _fake_sandbox import FakeSandbox

from harbor_openenv.episode.pristine import Spare


class Starts:
    """A make function: each call one new FakeSandbox, once ``gate`` is open."""

    def __init__(self) -> None:
        self.made: list[FakeSandbox] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self) -> FakeSandbox:
        self.gate.wait(10)
        box = FakeSandbox("/app")
        self.made.append(box)
        return box


def test_the_spare_is_made_ahead_once():
    starts, discarded = Starts(), []
    spare = Spare(discarded.append)
    spare.prepare(starts)
    spare.prepare(starts)  # one on its way: no second start
    box = spare.take(starts)
    spare.close()
    assert starts.made == [box] and discarded == []


def test_none_on_its_way_is_made_now_and_the_end_discards_a_starting_one():
    starts, discarded = Starts(), []
    spare = Spare(discarded.append)
    first = spare.take(starts)
    starts.gate.clear()
    spare.prepare(starts)  # the next step's, still starting when the episode ends
    spare.close()
    starts.gate.set()
    for _ in range(100):
        if discarded:
            break
        threading.Event().wait(0.05)
    assert starts.made[0] is first and discarded == [starts.made[1]]
