"""The images plan: which images ``images`` makes, how, in which order, what it pushes and pins."""

from __future__ import annotations

import shutil
from pathlib import Path

from _task_helpers import make_task, write

from harbor_openenv.images.lock import LockedImage, lock_source
from harbor_openenv.images.plan import How, plan_images
from harbor_openenv.images.resolver import verifier_source
from harbor_openenv.tasks.dataset import Dataset

FORMAT_TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "format"
DIGEST = "127.0.0.1:5000/envs/task@sha256:" + "a" * 64
OTHER = "127.0.0.1:5000/envs/task@sha256:" + "b" * 64
GIVEN = '[environment]\ndocker_image = "debian:bookworm-slim"\n'


def dataset(tmp_path: Path) -> Dataset:
    """Two tasks of one Dockerfile, one given image, one separate verifier, a text-only task and
    an invalid one."""
    root = tmp_path / "tasks"
    make_task(root, "a")
    make_task(root, "b")  # the same environment/: the same content-hash tag
    make_task(root, "given", GIVEN, dockerfile=False)
    shutil.copytree(FORMAT_TASKS / "separate-verifier", root / "sep")
    write(root / "text" / "instruction.md", "Say it.\n")
    write(root / "text" / "task.toml", "")
    write(root / "text" / "solution" / "patch.diff", "")
    make_task(root, "bad", "[verifier\n")
    return Dataset(root)


def test_each_image_is_made_once_in_the_datasets_order(tmp_path):
    tasks = dataset(tmp_path)
    plan = plan_images(tasks, {})
    shared, sep = lock_source(tasks["a"]), lock_source(tasks["sep"])
    verifier = verifier_source(tasks["sep"], None)
    assert shared == lock_source(tasks["b"]) and shared is not None and sep is not None
    assert verifier is not None and verifier != sep
    order = [task.id for task in tasks]
    first = {ref: order.index(image.tasks[0]) for ref, image in plan.images.items()}
    assert list(first.values()) == sorted(first.values())  # the dataset's order
    assert {ref: image.tasks for ref, image in plan.images.items()} == {
        shared: ["a", "b"],
        "debian:bookworm-slim": ["given"],
        sep: ["sep"],
        verifier: ["sep"],
    }
    hows = {ref: (image.how, image.pulls) for ref, image in plan.images.items()}
    assert hows[shared] == (How.TASK, False)  # built from environment/
    assert hows["debian:bookworm-slim"] == (How.TASK, True)  # a given image is pulled
    assert hows[verifier] == (How.BUILD, False)  # tests/Dockerfile
    assert plan.images[verifier].folder == tasks["sep"].tests_dir()
    assert plan.skipped == ["text (text-only: no image to build)"]
    (problem,) = plan.problems
    assert problem.startswith("bad: is invalid: ")


def test_push_pushes_each_tasks_image_then_its_verifiers_and_pins_them(tmp_path):
    tasks = dataset(tmp_path)
    plan = plan_images(tasks, {})
    shared, sep = lock_source(tasks["a"]), lock_source(tasks["sep"])
    verifier = verifier_source(tasks["sep"], None)
    assert plan.to_push() == [shared, "debian:bookworm-slim", sep, verifier]
    assert plan.to_push(failed={shared}) == ["debian:bookworm-slim", sep, verifier]
    pushed = {ref: f"{ref}-pushed" for ref in plan.to_push()}
    lock = plan.lock(pushed)
    assert list(lock) == ["a", "b", "given", "sep"]  # sorted, one entry per task
    assert lock["a"] == LockedImage(f"{shared}-pushed", str(shared), {})
    assert lock["b"].source == lock["a"].source
    assert lock["sep"].verifiers == {verifier: f"{verifier}-pushed"}


def test_a_pinned_task_pulls_its_locked_images_and_a_stale_pin_is_a_problem(tmp_path):
    tasks = dataset(tmp_path)
    sep, verifier = lock_source(tasks["sep"]), verifier_source(tasks["sep"], None)
    assert sep is not None and verifier is not None
    pins = {
        "sep": LockedImage(DIGEST, sep, {verifier: OTHER}),
        "given": LockedImage(DIGEST, "debian:trixie-slim"),  # pushed from another image
    }
    plan = plan_images(tasks, pins)
    assert plan.images[DIGEST].tasks == ["sep"] and plan.images[DIGEST].how is How.PULL
    assert plan.images[OTHER].pulls and plan.images[OTHER].how is How.PULL
    assert sep not in plan.images and verifier not in plan.images  # never built
    assert "debian:bookworm-slim" not in plan.images  # the stale task's own image: not made
    stale = next(line for line in plan.problems if line.startswith("given: "))
    assert "pushed from debian:trixie-slim" in stale and "images push" in stale
