"""Forks without an engine: the registry of fork points (one ID, one branch; the image goes
with the last branch, or at shutdown), the merged change lists, and the fork action and
``reset(fork=ID)`` on the in-memory backend. Against a real engine: tests/engine/test_fork.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from _fake_sandbox import FakeSandbox

from harbor_openenv.episode.fork import ForkError, ForkPoint, Forks, merge_changes
from harbor_openenv.sandbox import ExecResult, SandboxError
from harbor_openenv.sandbox.memory import MemorySandbox
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


class Registry:
    """A :class:`Forks` whose starts make in-memory sandboxes and whose image removals and
    container discards are recorded."""

    def __init__(self, remove=None, ttl_s: float = 600.0) -> None:
        self.removed: list[str] = []
        self.started: list[MemorySandbox] = []
        self.discarded: list[MemorySandbox] = []
        self.forks = Forks(remove or self.removed.append, self.discard, ttl_s=ttl_s)

    def start(self) -> MemorySandbox:
        sandbox = MemorySandbox(lambda *_: ExecResult(0, ""))
        self.started.append(sandbox)
        return sandbox

    def discard(self, sandbox: Any, then: Any) -> None:
        self.discarded.append(sandbox)
        then()

    def add(self, point: ForkPoint, n: int) -> list[str]:
        return self.forks.add(point, n, self.start)


def test_one_id_starts_one_branch_and_the_last_branch_removes_the_image():
    registry = Registry()
    forks, point = registry.forks, _point()
    first, second = registry.add(point, 2)
    assert first != second and first.startswith("fork-") and forks.pending() == 2
    taken, ready = forks.take(first)
    assert taken is point and ready is not None and ready.result() in registry.started
    with pytest.raises(ForkError, match="already used"):
        forks.take(first)
    forks.release(point)
    assert registry.removed == []  # an ID is left
    _, later = forks.take(second)
    assert later is not None and later.result() in registry.started and later is not ready
    assert len(registry.started) == 2  # one container per branch, both started at the fork
    forks.release(point)
    assert registry.removed == ["img"] and forks.pending() == 0 and not registry.discarded


def test_shutdown_removes_the_images_of_unused_ids_not_of_running_branches():
    registry = Registry()
    forks = registry.forks
    unused, running = _point("unused"), _point("running")
    registry.add(unused, 3)
    (ident,) = registry.add(running, 1)
    forks.take(ident)
    forks.close()
    assert registry.removed == ["unused"] and forks.pending() == 0
    assert len(registry.discarded) == 3  # the unused IDs' containers
    forks.release(running)  # its branch ended later
    assert registry.removed == ["unused", "running"]


def test_unused_ids_expire_with_their_containers_and_image():
    """Past HARBOR_OPENENV_FORK_TTL_S an unused ID is refused as expired, its container is
    removed, and the image goes once the branch that was taken ends too."""
    registry = Registry(ttl_s=0.2)
    forks, point = registry.forks, _point()
    used, late = registry.add(point, 2)
    forks.take(used)
    deadline = time.monotonic() + 10
    while forks.pending() and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(ForkError, match=r"expired.*HARBOR_OPENENV_FORK_TTL_S"):
        forks.take(late)
    assert len(registry.discarded) == 1 and registry.removed == []
    forks.release(point)  # the branch that was taken ends
    assert registry.removed == ["img"]
    with pytest.raises(ForkError, match="unknown"):
        forks.take("fork-never")
    forks.close()


def test_an_image_whose_removal_failed_goes_after_the_next_removal():
    """A fork of a branch is a child image: its parent's removal waits for it."""
    removed: list[str] = []

    def remove(image: str) -> None:
        if image == "parent" and "child" not in removed:
            raise RuntimeError("image has dependent child images")
        removed.append(image)

    registry = Registry(remove)
    forks = registry.forks
    parent, child = _point("parent"), _point("child")
    for point in (parent, child):
        (ident,) = registry.add(point, 1)
        forks.take(ident)
    forks.release(parent)
    assert removed == []
    forks.release(child)
    assert removed == ["child", "parent"]
    forks.close()


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
        self.removed_images = self.fake.removed_images


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


def _wait(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return bool(predicate())


def test_a_branch_is_an_episode_of_the_same_task_from_the_committed_image(forking):
    """The fork starts its branches' containers at once, from the committed image, each
    counted against the session limit; a branch's reset takes one and starts nothing."""
    parent = HarborEnvironment(forking)
    parent.reset(task_id="edit-file")
    answer = act(parent, "fork", n=2, token=TOKEN)
    assert answer.error is None and not answer.done
    ids = answer.info["forks"]
    assert len(ids) == 2
    assert _wait(lambda: len(forking.fake.specs) == 3)  # the parent's, then both branches'
    assert [spec.image for spec in forking.fake.specs[1:]] == ["sha256:fork0"] * 2
    assert forking.pool.active == 3  # each branch counts like any episode, from the fork on
    branch = HarborEnvironment(forking)
    started = branch.reset(fork=ids[0])
    assert started.error is None and started.task_id == "edit-file"
    assert started.info["fork"] == ids[0] and started.instruction
    assert len(forking.fake.specs) == 3 and forking.pool.active == 3  # nothing started
    assert branch.reset(fork=ids[0]).error.startswith("no fork")  # used
    graded = act(parent, "evaluate", token=TOKEN)
    assert graded.done and act(parent, "fork", n=1, token=TOKEN).error.startswith(
        "the episode has ended"
    )
    assert forking.removed_images == []
    branch.close()  # its container goes; ids[1] is left, and the image with it
    forking.shutdown()  # ids[1] was never used: its container and the image go at shutdown
    assert forking.removed_images == ["sha256:fork0"]
    assert all(sandbox.removed for sandbox in forking.sandboxes) and forking.pool.active == 0


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


def test_an_expired_id_is_refused_and_its_container_and_image_go(monkeypatch):
    """HARBOR_OPENENV_FORK_TTL_S: an ID unused that long is refused with a clear error; the
    container started for it and the image are removed, and its session slot is free."""
    monkeypatch.setattr(FakeSandbox, "commit", lambda self, labels: "sha256:old", raising=False)
    runtime = ForkingRuntime(fork_ttl_s=0.3)
    parent, branch = HarborEnvironment(runtime), HarborEnvironment(runtime)
    parent.reset(task_id="edit-file")
    (ident,) = act(parent, "fork", n=1, token=TOKEN).info["forks"]
    assert _wait(lambda: runtime.pool.active == 2)
    assert _wait(lambda: runtime.removed_images == ["sha256:old"])
    refused = branch.reset(fork=ident)
    assert refused.done and "expired" in refused.error and "FORK_TTL_S" in refused.error
    assert runtime.pool.active == 1 and runtime.sandboxes[1].removed
    parent.close()
    runtime.shutdown()


def test_a_fork_whose_change_list_fails_leaves_no_image(forking, monkeypatch):
    """The change list (the branches' tamper evidence) is read before the commit: if it fails,
    the fork fails, no image is committed and the episode goes on."""

    def changes(self: FakeSandbox) -> Any:
        raise SandboxError("cannot list the container's changes")

    monkeypatch.setattr(FakeSandbox, "changes", changes)
    parent = HarborEnvironment(forking)
    parent.reset(task_id="edit-file")
    failed = act(parent, "fork", n=2, token=TOKEN)
    assert "changes" in failed.error and not failed.done and "forks" not in failed.info
    assert forking.removed_images == [] and forking.forks.pending() == 0
    assert act(parent, "exec", command="echo on").output == "on\n"
