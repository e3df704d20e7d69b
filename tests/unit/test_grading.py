"""Which grading strategy each step gets, picked once from the task and the server's setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from harbor_openenv.config import Settings
from harbor_openenv.episode.grading import grading_mode
from harbor_openenv.tasks.dataset import Dataset

FORMAT = Dataset(Path(__file__).parents[1] / "fixtures" / "format")


@pytest.mark.parametrize(
    ("task_id", "patterns", "mode"),
    [
        ("multi-step", (), "shared"),
        ("multi-step", ("multi-*",), "pristine"),
        ("multi-step", ("other", "multi-step"), "pristine"),
        ("multi-step", ("multi",), "shared"),  # a pattern matches the whole ID
        ("separate-verifier", ("*",), "separate"),  # the task's own mode wins
        ("compose", ("*",), "shared"),  # a compose task's sidecars cannot be copied fresh
    ],
)
def test_the_grading_mode_of_a_task(task_id, patterns, mode):
    task = FORMAT[task_id]
    named = Settings(pristine_verifier=patterns).pristine(task_id)
    steps = task.config.steps or [None]
    assert {grading_mode(task, step, named) for step in steps} == {mode}
