"""Dataset discovery: the tasks root, nested ids, lazy listing."""

from __future__ import annotations

import pytest
from _task_helpers import make_task

from harbor_openenv.tasks.config import DatasetError
from harbor_openenv.tasks.dataset import Dataset, find_tasks_root
from harbor_openenv.tasks.task import TaskKind


def test_find_tasks_root(tmp_path):
    make_task(tmp_path / "flat", "a")
    make_task(tmp_path / "nested" / "tasks", "a")
    (tmp_path / "empty").mkdir()
    assert find_tasks_root(tmp_path / "flat") == tmp_path / "flat"
    assert find_tasks_root(tmp_path / "nested") == tmp_path / "nested" / "tasks"
    with pytest.raises(DatasetError, match="no task directory"):
        find_tasks_root(tmp_path / "empty")
    with pytest.raises(DatasetError, match="not a folder"):
        find_tasks_root(tmp_path / "missing")


def test_nested_ids_skip_hidden_folders(tmp_path):
    make_task(tmp_path, "group/one")
    make_task(tmp_path, "group/two")
    make_task(tmp_path, ".git/hidden")
    make_task(tmp_path, "top")
    assert Dataset(tmp_path).ids == ["group/one", "group/two", "top"]


def test_listing_does_not_parse(tmp_path, monkeypatch):
    import harbor_openenv.tasks.config as config

    parsed = []
    monkeypatch.setattr(config.tomllib, "loads", lambda text: parsed.append(text) or {})
    for i in range(500):
        task = tmp_path / f"t{i:05d}"
        task.mkdir()
        (task / "task.toml").write_text("this is not toml [")
    dataset = Dataset(tmp_path)
    assert len(dataset) == 500 and "t00042" in dataset
    assert parsed == []  # nothing was read: a task is parsed when it is first used
    monkeypatch.undo()
    assert dataset["t00042"].kind is TaskKind.INVALID
