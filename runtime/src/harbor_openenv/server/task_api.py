"""OpenEnv's Task API routes (``TaskProvider``) over the dataset's catalog
(:mod:`harbor_openenv.tasks.catalog`): each call runs in a worker thread, an unknown split answers
404 and an index out of range 400."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from fastapi import HTTPException, status

from harbor_openenv.tasks.catalog import (
    TaskCatalog,
    TaskIndexError,
    TaskSpec,
    TaskSplit,
    UnknownSplitError,
)

_T = TypeVar("_T")


class TaskApi:
    """OpenEnv's ``TaskProvider`` methods for an environment that sets ``task_catalog``.

    Each runs the catalog's call in a worker thread. An unknown split answers 404 and an index
    out of range 400, each with the catalog's message (OpenEnv's route would answer a bare
    IndexError with "Invalid task index" and anything else with 500).
    """

    task_catalog: TaskCatalog

    async def list_splits(self) -> list[TaskSplit]:
        return await _answer(self.task_catalog.splits)

    async def num_tasks(self, split: str) -> int:
        return await _answer(self.task_catalog.num_tasks, split)

    async def list_tasks(self, split: str) -> list[TaskSpec]:
        return await _answer(self.task_catalog.tasks, split)

    async def get_task(self, split: str, index: int) -> TaskSpec:
        return await _answer(self.task_catalog.task, split, index)

    async def get_task_range(
        self, split: str, start: int | None = None, stop: int | None = None
    ) -> list[TaskSpec]:
        return await _answer(self.task_catalog.tasks, split, start, stop)


async def _answer(call: Callable[..., _T], *args: object) -> _T:
    try:
        return await asyncio.to_thread(call, *args)
    except UnknownSplitError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=str(exc)) from None
    except TaskIndexError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=str(exc)) from None
