"""The dataset's catalog for OpenEnv's Task API: its splits, its task specs, reset's choice
(pydantic only; the routes' side is ``server/task_api.py``).

**Splits.** ``all`` holds every task in the dataset's order (task ids sorted), so ``reset(index=N)``
and ``reset(split="all", index=N)`` start the same task. When every task id has a folder above it
(``train/…``, ``test/…``), each first folder is a split too, its tasks in the same order. That is
the dataset's own grouping, and a partition of ``all``: every task is in exactly one group, so a
trainer can train on one and test on another with no task left over. A dataset with any task at
its top level has no grouping that covers it and offers ``all`` only; so does one whose tasks all
sit under a single folder (that split would be ``all`` again) or one with a folder named ``all``.
Only the first folder counts: deeper levels (``field/subfield/task``) would cut a dataset into many
small splits that no trainer asked for.

**Cost.** OpenEnv's routes build a throwaway environment per request, so the catalog lives on the
server's ``Runtime`` beside its ``Dataset``: the splits come from the listing once (no file read),
and a task's task.toml is parsed once per server (the ``Dataset``'s ``Task`` keeps it); a spec then
reads only that task's instruction. The environment's methods run the catalog's calls in a worker
thread, so a listing that parses thousands of task.toml files never stalls the sessions.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import cached_property
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field

from harbor_openenv.tasks.config import DatasetError, TaskConfig
from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.task import Task

SplitType = Literal["train", "validation", "test"]


class TaskSplit(BaseModel):
    """One split of OpenEnv's Task API (``GET /{env}/splits``)."""

    name: str
    type: SplitType
    num_tasks: int


class TaskSpec(BaseModel):
    """One task as OpenEnv's Task API describes it (``POST /{env}/task`` and friends)."""

    id: str = Field(description="the task's path under tasks/; reset(task_id=...) takes it")
    index: int = Field(description="its position in the split; reset(split=..., index=...)")
    split: str
    kind: Literal["runnable", "text-only", "invalid", "unsupported"]
    refusal: str | None = Field(default=None, description="why reset refuses it (None: it runs)")
    instruction: str | None = Field(default=None, description="what reset gives the agent first")
    metadata: dict[str, Any] = Field(default_factory=dict, description="task.toml's [metadata]")
    agent_timeout_sec: float | None = None
    verifier_timeout_sec: float | None = None
    steps: int | None = Field(default=None, description="evaluate calls an episode takes")


ALL = "all"
_SHOWN_SPLITS = 20  # an unknown split's error lists at most this many
_T = TypeVar("_T")


class UnknownSplitError(DatasetError, LookupError):
    """A split this dataset does not have; the message lists the ones it has."""


class TaskIndexError(DatasetError, IndexError):
    """An index outside its split; the message names the split and the valid range."""


def group_splits(ids: Sequence[str]) -> dict[str, list[str]]:
    """Split name → task ids: ``all``, then each first folder when they partition the dataset."""
    splits = {ALL: list(ids)}
    groups: dict[str, list[str]] = {}
    for task_id in ids:
        head, sep, _ = task_id.partition("/")
        if not sep:
            return splits
        groups.setdefault(head, []).append(task_id)
    if len(groups) > 1 and ALL not in groups:
        splits.update(sorted(groups.items()))
    return splits


def _split_type(name: str) -> SplitType:
    """OpenEnv's own rule for a split given by name: its name if it is a type, else validation."""
    return "train" if name == "train" else "test" if name == "test" else "validation"


class TaskCatalog:
    """The dataset's splits and task specs, and the task a reset asks for; one per server."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    @cached_property
    def _splits(self) -> dict[str, list[str]]:
        return group_splits(self.dataset.ids)

    def ids(self, split: str) -> list[str]:
        """The task ids of ``split``, in order."""
        try:
            return self._splits[split]
        except KeyError:
            names = list(self._splits)
            shown = ", ".join(map(repr, names[:_SHOWN_SPLITS]))
            more = f" and {len(names) - _SHOWN_SPLITS} more" if len(names) > _SHOWN_SPLITS else ""
            raise UnknownSplitError(
                f"unknown split {split!r}: this dataset's splits are {shown}{more}"
            ) from None

    def splits(self) -> list[TaskSplit]:
        return [
            TaskSplit(name=name, type=_split_type(name), num_tasks=len(ids))
            for name, ids in self._splits.items()
        ]

    def num_tasks(self, split: str) -> int:
        return len(self.ids(split))

    def task(self, split: str, index: int) -> TaskSpec:
        """The spec of the ``index``-th task of ``split``."""
        return self._spec(split, index, self.task_id(split, index))

    def tasks(
        self, split: str, start: int | None = None, stop: int | None = None
    ) -> list[TaskSpec]:
        """The specs of ``split[start:stop]`` (Python's slice bounds), each with its own index."""
        ids = self.ids(split)
        positions = range(len(ids))[start:stop]
        return [self._spec(split, index, ids[index]) for index in positions]

    def task_id(self, split: str, index: int) -> str:
        ids = self.ids(split)
        if not ids:
            raise TaskIndexError(f"split {split!r} has no tasks")
        if not 0 <= index < len(ids):
            raise TaskIndexError(
                f"task index {index} is out of range for split {split!r}"
                f" (0..{len(ids) - 1}, {len(ids)} tasks)"
            )
        return ids[index]

    def pick(
        self,
        *,
        task_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        seed: int | None = None,
        default: str | None = None,
    ) -> str:
        """The task a reset asks for: ``task_id``; else ``split``'s (default ``all``) ``index``-th
        task, one drawn with ``seed``, or its first; without a split, ``default`` before the first.
        """
        for name, value, kind in (
            ("task_id", task_id, str),
            ("split", split, str),
            ("index", index, int),
            ("seed", seed, int),
        ):
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                raise DatasetError(f"reset: {name} must be {kind.__name__}, got {value!r}"[:200])
        if task_id is not None:
            return task_id
        chosen = split if split is not None else ALL
        if index is not None:
            return self.task_id(chosen, index)
        ids = self.ids(chosen)
        if not ids:
            raise TaskIndexError(f"split {chosen!r} has no tasks")
        if seed is not None:
            return random.Random(seed).choice(ids)
        return (default if split is None else None) or ids[0]

    def _spec(self, split: str, index: int, task_id: str) -> TaskSpec:
        task = self.dataset[task_id]
        try:
            config: TaskConfig | None = task.config
        except DatasetError:
            config = None
        return TaskSpec(
            id=task.id,
            index=index,
            split=split,
            kind=task.kind.value,
            refusal=task.refusal,
            instruction=_first_instruction(task, config),
            metadata=config.metadata if config else {},
            agent_timeout_sec=config.agent.timeout_sec if config else None,
            verifier_timeout_sec=config.verifier.timeout_sec if config else None,
            steps=(len(config.steps or []) or 1) if config else None,
        )


def _first_instruction(task: Task, config: TaskConfig | None) -> str | None:
    """What reset gives the agent: instruction.md, or the first step's (None: unreadable)."""
    try:
        if config is not None and config.steps:
            return task.step_instruction(config.steps[0])
        return task.instruction
    except DatasetError:
        return None
