"""The runtime's side of Harbor's backends (HARBOR_OPENENV_BACKEND=harbor:TYPE) that needs no
Harbor: what it refuses at start-up and at reset. The backend itself runs against Harbor's docker
backend in tests/deploy/test_harbor_backend.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from _fake_sandbox import FakeSandbox
from _server import FIXTURE_TASKS

from harbor_openenv.backends.harbor import HarborEnvironments
from harbor_openenv.backends.request import EnvRequest
from harbor_openenv.config import Settings
from harbor_openenv.episode.runtime import Runtime
from harbor_openenv.sandbox import Sandbox, SandboxError
from harbor_openenv.sandbox.spec import ComposeSpec, ContainerSpec

HARBOR = Settings(backend="harbor:docker")


class Started:
    """A backend that records what it was asked to start."""

    def __init__(self) -> None:
        self.specs: list[ContainerSpec] = []

    def start(
        self,
        spec: ContainerSpec,
        *,
        task_id: str | None,
        labels: object = None,
        compose: ComposeSpec | None = None,
    ) -> Sandbox:
        self.specs.append(spec)
        return FakeSandbox()


def test_without_harbor_the_server_says_what_to_install() -> None:
    """(The development venv, Python 3.11, has no Harbor.)"""
    assert importlib.util.find_spec("harbor") is None
    with pytest.raises(ValueError) as caught:
        Runtime(FIXTURE_TASKS, HARBOR)
    message = str(caught.value)
    assert "HARBOR_OPENENV_BACKEND=harbor:docker needs Harbor" in message
    assert "pip install 'harbor-openenv[harbor]'" in message


def test_harbor_backends_have_no_warm_pool() -> None:
    with pytest.raises(ValueError, match="HARBOR_OPENENV_POOL_SIZE=1: Harbor's backends"):
        Settings(backend="harbor:docker", pool_size=1)


def test_harbor_builds_the_image_and_no_separate_verifier_runs(tmp_path: Path) -> None:
    """The task's image is Harbor's to build (the runtime builds nothing, asks no engine), a
    pids limit of 0 is none, and a separate verifier's environment is refused."""
    started = Started()
    settings = Settings(backend="harbor:docker", pids_limit=0, disk_mb=0)
    backend = HarborEnvironments(started, settings)
    runtime = Runtime(FIXTURE_TASKS, settings, backend=backend)
    task = runtime.dataset["edit-file"]
    assert backend.task_image(task) == "edit-file"
    runtime.launch(EnvRequest.of_task(task, "edit-file", {}))
    assert started.specs[0].pids_limit is None and started.specs[0].storage_mb is None
    with pytest.raises(SandboxError, match="separate verifier's environment is not supported"):
        backend.verifier_image(task, None)
