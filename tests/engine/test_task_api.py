"""OpenEnv's Task API (``task_api``) on a real server: OpenEnv's own routes and clients, and reset
by split and index in real containers. The split logic is tests/unit/test_task_catalog.py."""

from __future__ import annotations

import shutil

import httpx
import pytest
from _server import FIXTURE_TASKS, ROOT, Server

from harbor_openenv.tasks.dataset import Dataset

ENV = "harbor_openenv"  # build_app's env_name: the routes are /harbor_openenv/splits, ...
MULTI_STEP = ROOT / "tests" / "fixtures" / "format" / "multi-step"

# -- the split logic ------------------------------------------------------------------------------


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
