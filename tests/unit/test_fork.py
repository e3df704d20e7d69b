"""Forks without an engine: the registry of fork points (one ID, one branch; the image goes
with the last branch, or at shutdown), the merged change lists, and the fork action and
``reset(fork=ID)`` on the in-memory backend. Against a real engine: tests/engine/test_fork.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _fake_sandbox import FakeSandbox

from harbor_openenv.episode.fork import ForkError, ForkPoint, Forks, merge_changes
from harbor_openenv.server.environment import HarborEnvironment

from .test_episode import FIXTURES, TOKEN, FakeRuntime, act


def _point(image: str = "img") -> ForkPoint:
    return ForkPoint(
        image,
        task=None,
        source_image="src",
        step_index=0,
        step_metrics=[],
        step_info=[],
        changes=None,
    )  # type: ignore[arg-type]


def test_one_id_starts_one_branch_and_the_last_branch_removes_the_image():
    removed: list[str] = []
    forks = Forks(removed.append)
    point = _point()
    first, second = forks.add(point, 2)
    assert first != second and first.startswith("fork-") and forks.pending() == 2
    assert forks.take(first) is point
    with pytest.raises(ForkError, match="already used"):
        forks.take(first)
    forks.release(point)
    assert removed == []  # an ID is left
    forks.take(second)
    forks.release(point)
    assert removed == ["img"] and forks.pending() == 0


def test_shutdown_removes_the_images_of_unused_ids_not_of_running_branches():
    removed: list[str] = []
    forks = Forks(removed.append)
    unused, running = _point("unused"), _point("running")
    forks.add(unused, 3)
    (ident,) = forks.add(running, 1)
    forks.take(ident)
    forks.close()
    assert removed == ["unused"] and forks.pending() == 0
    forks.release(running)  # its branch ended later
    assert removed == ["unused", "running"]


def test_an_image_whose_removal_failed_goes_after_the_next_removal():
    """A fork of a branch is a child image: its parent's removal waits for it."""
    removed: list[str] = []

    def remove(image: str) -> None:
        if image == "parent" and "child" not in removed:
            raise RuntimeError("image has dependent child images")
        removed.append(image)

    forks = Forks(remove)
    parent, child = _point("parent"), _point("child")
    for point in (parent, child):
        (ident,) = forks.add(point, 1)
        forks.take(ident)
    forks.release(parent)
    assert removed == []
    forks.release(child)
    assert removed == ["child", "parent"]


def test_merged_changes_are_against_the_original_image():
    before = [("/app", 0), ("/app/a", 1), ("/etc/x", 0)]
    after = [("/app", 0), ("/app/a", 0), ("/app/b", 1), ("/etc/x", 2)]
    assert merge_changes(before, after) == [
        ("/app", 0),
        ("/app/a", 1),  # added before the fork, changed after: added
        ("/app/b", 1),
        ("/etc/x", 2),
    ]


class ForkingRuntime(FakeRuntime):
    """The in-memory runtime whose sandboxes commit to a named image."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(FIXTURES / "tasks", **settings)
        self.removed_images: list[str] = []

    def _remove_image(self, image: str) -> None:
        self.removed_images.append(image)


@pytest.fixture
def forking(monkeypatch) -> Iterator[ForkingRuntime]:
    made: list[str] = []

    def commit(self: FakeSandbox, labels: Any) -> str:
        made.append(f"sha256:fork{len(made)}")
        return made[-1]

    monkeypatch.setattr(FakeSandbox, "commit", commit, raising=False)
    runtime = ForkingRuntime()
    yield runtime
    runtime.shutdown()


def test_fork_needs_the_token_and_a_failed_fork_leaves_the_episode():
    runtime = FakeRuntime(FIXTURES / "tasks")
    env = HarborEnvironment(runtime)
    env.reset(task_id="edit-file")
    refused = act(env, "fork", n=2)
    assert "orchestration token" in refused.error and not refused.done
    failed = act(env, "fork", n=1, token=TOKEN)  # the memory backend cannot commit
    assert "cannot fork" in failed.error and not failed.done
    assert act(env, "exec", command="echo on").output == "on\n"
    runtime.shutdown()


def test_a_branch_is_an_episode_of_the_same_task_from_the_committed_image(forking):
    parent = HarborEnvironment(forking)
    parent.reset(task_id="edit-file")
    answer = act(parent, "fork", n=2, token=TOKEN)
    assert answer.error is None and not answer.done
    ids = answer.info["forks"]
    assert len(ids) == 2
    branch = HarborEnvironment(forking)
    started = branch.reset(fork=ids[0])
    assert started.error is None and started.task_id == "edit-file"
    assert started.info["fork"] == ids[0] and started.instruction
    assert forking.fake.specs[-1].image == "sha256:fork0"
    assert forking.pool.active == 2  # the branch counts like any episode
    assert branch.reset(fork=ids[0]).error.startswith("no fork")  # used
    graded = act(parent, "evaluate", token=TOKEN)
    assert graded.done and act(parent, "fork", n=1, token=TOKEN).error.startswith(
        "the episode has ended"
    )
    assert forking.removed_images == []
    branch.close()  # its container goes; ids[1] is left, and the image with it
    forking.shutdown()  # ids[1] was never used: its image goes at shutdown
    assert forking.removed_images == ["sha256:fork0"]


def test_a_branch_that_cannot_start_keeps_its_id(monkeypatch):
    """At the session limit the branch's reset fails; its ID starts it once a slot is free."""

    def commit(self: FakeSandbox, labels: Any) -> str:
        return "sha256:fork"

    monkeypatch.setattr(FakeSandbox, "commit", commit, raising=False)
    runtime = ForkingRuntime(max_sessions=1)
    parent, branch = HarborEnvironment(runtime), HarborEnvironment(runtime)
    parent.reset(task_id="edit-file")
    (ident,) = act(parent, "fork", n=1, token=TOKEN).info["forks"]
    full = branch.reset(fork=ident)
    assert full.done and "limit of 1 sessions" in full.error
    parent.close()
    assert branch.reset(fork=ident).error is None
    branch.close()
    runtime.shutdown()
    assert runtime.removed_images == ["sha256:fork"]
