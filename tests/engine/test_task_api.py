"""OpenEnv's Task API (``task_api``): the split logic and specs, then OpenEnv's own routes and
clients against a real server, and reset by split and index in real containers."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from conftest import FIXTURE_TASKS, ROOT, Server

from harbor_openenv.tasks.catalog import (
    ALL,
    TaskCatalog,
    TaskIndexError,
    UnknownSplitError,
    group_splits,
)
from harbor_openenv.tasks.config import DatasetError
from harbor_openenv.tasks.dataset import Dataset

ENV = "harbor_openenv"  # build_app's env_name: the routes are /harbor_openenv/splits, ...
MULTI_STEP = ROOT / "tests" / "fixtures" / "format" / "multi-step"

# -- the split logic ------------------------------------------------------------------------------


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


# -- OpenEnv's routes and clients against a real server -----------------------------------------


@pytest.fixture(scope="module")
def split_server(docker_client, tmp_path_factory):
    """A server over train/ and test/ folders of fixture tasks."""
    tasks = tmp_path_factory.mktemp("split-dataset")
    for task_id, source in [
        ("train/edit-file", FIXTURE_TASKS / "edit-file"),
        ("train/text-only", FIXTURE_TASKS / "text-only"),
        ("test/edit-file", FIXTURE_TASKS / "edit-file"),
        ("test/multi-step", MULTI_STEP),
    ]:
        shutil.copytree(source, tasks / task_id)
    srv = Server(tasks)
    srv.tasks = tasks
    yield srv
    srv.stop()


def _post(srv: Server, route: str, **body) -> httpx.Response:
    return httpx.post(f"{srv.url}/{ENV}/{route}", json=body, timeout=30)


def test_routes_list_splits_and_tasks(split_server):
    assert httpx.get(f"{split_server.url}/list_environments").json() == [ENV]
    splits = httpx.get(f"{split_server.url}/{ENV}/splits").json()
    assert splits == [
        {"name": "all", "type": "validation", "num_tasks": 4},
        {"name": "test", "type": "test", "num_tasks": 2},
        {"name": "train", "type": "train", "num_tasks": 2},
    ]
    assert _post(split_server, "num_tasks", split="test").json() == {"num_tasks": 2}

    task = _post(split_server, "task", split="test", index=1).json()["task"]
    assert task["id"] == "test/multi-step" and task["steps"] == 2 and task["kind"] == "runnable"
    train = _post(split_server, "tasks", split="train").json()["tasks"]
    assert [(t["id"], t["kind"]) for t in train] == [
        ("train/edit-file", "runnable"),
        ("train/text-only", "text-only"),
    ]
    assert train[0]["metadata"] == {"category": "fixture"}
    assert (train[0]["agent_timeout_sec"], train[0]["verifier_timeout_sec"]) == (120, 60)
    assert "Write the number 42" in train[0]["instruction"]
    window = _post(split_server, "task_range", split="all", start=1, stop=3).json()["tasks"]
    assert [(t["id"], t["index"]) for t in window] == [
        ("test/multi-step", 1),
        ("train/edit-file", 2),
    ]


def test_routes_name_a_bad_split_or_index(split_server):
    unknown = _post(split_server, "num_tasks", split="dev")
    assert unknown.status_code == 404
    assert (
        unknown.json()["detail"]
        == "unknown split 'dev': this dataset's splits are 'all', 'test', 'train'"
    )
    outside = _post(split_server, "task", split="train", index=2)
    assert outside.status_code == 400
    assert "index 2 is out of range for split 'train' (0..1, 2 tasks)" in outside.json()["detail"]
    assert _post(split_server, "task", split="train", index=1).status_code == 200


def test_specs_are_read_once_per_server(split_server):
    """The routes build a throwaway environment per request; task.toml is still parsed once."""
    first = _post(split_server, "task", split="train", index=1).json()["task"]
    toml = split_server.tasks / "train" / "text-only" / "task.toml"
    toml.write_text("this is [not toml")
    assert _post(split_server, "task", split="train", index=1).json()["task"] == first


def test_reset_by_split_and_index_starts_that_task(split_server):
    with split_server.client() as env:
        first = env.reset(split="train", index=0)
        assert first.observation.error is None, first.observation
        assert first.observation.task_id == "train/edit-file"
        assert env.write("answer.txt", "42\n").observation.error is None
        assert env.evaluate().reward == 1.0

        refused = env.reset(split="train", index=1)  # text-only: the spec's refusal, verbatim
        spec = _post(split_server, "task", split="train", index=1).json()["task"]
        assert refused.done and refused.observation.error == spec["refusal"]


def test_reset_names_the_split_and_range_through_openenvs_own_client(split_server):
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=split_server.url, message_timeout_s=60) as env:
        outside = env.reset(split="test", index=2)
        assert outside.done
        assert outside.observation["error"] == (
            "task index 2 is out of range for split 'test' (0..1, 2 tasks)"
        )
        unknown = env.reset(split="dev", index=0)
        assert "unknown split 'dev'" in unknown.observation["error"]


def test_a_flat_dataset_serves_one_split_in_resets_order(server):
    """The fixture tasks sit at the top level: "all" only, index N as reset(index=N) takes it."""
    (split,) = httpx.get(f"{server.url}/{ENV}/splits").json()
    ids = Dataset(FIXTURE_TASKS).ids
    assert split == {"name": "all", "type": "validation", "num_tasks": len(ids)}
    specs = _post(server, "tasks", split="all").json()["tasks"]
    assert [spec["id"] for spec in specs] == ids
    assert [spec["index"] for spec in specs] == list(range(len(ids)))
    with server.client() as env:
        index = ids.index("text-only")
        refused = env.reset(index=index)
        assert refused.observation.error == specs[index]["refusal"]
