"""OpenEnv's Task API's catalog (no engine): splits, counts, specs and ranges of a dataset."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _server import ROOT

from harbor_openenv.tasks.catalog import (
    ALL,
    TaskCatalog,
    TaskIndexError,
    UnknownSplitError,
    group_splits,
)
from harbor_openenv.tasks.config import DatasetError
from harbor_openenv.tasks.dataset import Dataset

MULTI_STEP = ROOT / "tests" / "fixtures" / "format" / "multi-step"

# -- the split logic ------------------------------------------------------------------------------


def _task(root: Path, task_id: str, toml: str = 'schema_version = "1.4"\n') -> Path:
    folder = root / task_id
    folder.mkdir(parents=True)
    (folder / "task.toml").write_text(toml)
    (folder / "instruction.md").write_text(f"<!-- canary GUID x -->\n\nDo {task_id}.\n")
    return folder


@pytest.fixture
def catalog(tmp_path) -> TaskCatalog:
    _task(tmp_path, "train/a", "[metadata]\nlevel = 1\n[agent]\ntimeout_sec = 30\n")
    for name in ("train/b", "train/c", "test/a"):
        _task(tmp_path, name)
    shutil.copytree(MULTI_STEP, tmp_path / "test" / "multi")
    _task(tmp_path, "test/broken", "[environment]\ncpus = 'many'\n")
    return TaskCatalog(Dataset(tmp_path))


# -- OpenEnv's routes and clients against a real server -----------------------------------------


def test_a_flat_dataset_has_one_split():
    assert group_splits(["a", "b"]) == {ALL: ["a", "b"]}


def test_first_folders_are_splits_when_every_task_has_one():
    ids = ["test/x", "test/y/deep", "train/a", "train/b"]
    assert group_splits(ids) == {
        ALL: ids,
        "test": ["test/x", "test/y/deep"],
        "train": ["train/a", "train/b"],
    }


@pytest.mark.parametrize(
    "ids",
    [
        ["loose", "test/x", "train/a"],  # a task at the top level belongs to no group
        ["only/a", "only/b"],  # one group would be "all" again
        ["all/a", "train/b"],  # a folder named "all" would hide the whole-dataset split
    ],
)
def test_no_grouping_unless_it_partitions_the_dataset(ids):
    assert list(group_splits(ids)) == [ALL]


def test_splits_and_counts(catalog):
    assert [(s.name, s.type, s.num_tasks) for s in catalog.splits()] == [
        ("all", "validation", 6),
        ("test", "test", 3),
        ("train", "train", 3),
    ]
    assert catalog.num_tasks("train") == 3
    assert catalog.ids("test") == ["test/a", "test/broken", "test/multi"]


def test_a_spec_carries_what_reset_would_use(catalog):
    spec = catalog.task("train", 0)
    assert (spec.id, spec.index, spec.split) == ("train/a", 0, "train")
    assert spec.instruction == "Do train/a.\n"  # canary stripped, as reset gives it
    assert spec.metadata == {"level": 1}
    assert (spec.agent_timeout_sec, spec.verifier_timeout_sec, spec.steps) == (30, 600, 1)
    # no tests/ and no environment: text-only, refused with reset's own reason
    assert spec.kind == "text-only" and "text-only task" in spec.refusal

    multi = catalog.task("test", 2)
    assert multi.kind == "runnable" and multi.refusal is None and multi.steps == 2
    assert multi.instruction == (MULTI_STEP / "steps" / "one" / "instruction.md").read_text()

    broken = catalog.task("test", 1)
    assert broken.kind == "invalid" and "[environment].cpus" in broken.refusal
    assert broken.steps is None and broken.metadata == {}


def test_ranges_follow_python_slices(catalog):
    assert [s.index for s in catalog.tasks("all", 1, 3)] == [1, 2]
    assert [s.id for s in catalog.tasks("train", -1)] == ["train/c"]
    assert [s.index for s in catalog.tasks("train")] == [0, 1, 2]
    assert catalog.tasks("train", 5, 9) == []


def test_bad_splits_and_indexes_are_named(catalog):
    with pytest.raises(UnknownSplitError, match=r"unknown split 'dev': .*'all', 'test', 'train'"):
        catalog.num_tasks("dev")
    with pytest.raises(TaskIndexError, match=r"index 3 is out of range for split 'train' \(0\.\.2"):
        catalog.task("train", 3)
    with pytest.raises(IndexError):  # the TaskProvider contract
        catalog.task("all", -1)


def test_pick_within_a_split(catalog):
    assert catalog.pick(split="test", index=2) == "test/multi"
    assert catalog.pick(index=3) == "train/a" == catalog.ids(ALL)[3]
    drawn = {catalog.pick(split="train", seed=seed) for seed in range(20)}
    assert drawn <= set(catalog.ids("train")) and len(drawn) > 1
    assert catalog.pick(split="train", seed=7) == catalog.pick(split="train", seed=7)
    assert catalog.pick(default="test/a") == "test/a"
    assert catalog.pick(split="train", default="test/a") == "train/a"  # the split's first
    assert catalog.pick(task_id="test/a", split="train") == "test/a"
    with pytest.raises(DatasetError, match="split must be str"):
        catalog.pick(split=1)
    with pytest.raises(DatasetError, match="out of range for split 'test'"):
        catalog.pick(split="test", index=3)
