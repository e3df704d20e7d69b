"""The backends without an engine: which one the settings choose (made without touching Docker),
the one environment request and what it asks a backend for, and the in-memory backend
(tests/support/_memory_backend.py), one file implementing the one interface, running an episode
through the runtime. The Docker backends against real engines: tests/engine, tests/deploy."""

from __future__ import annotations

from _memory_backend import MemoryBackend

from harbor_openenv.backends.base import Backend
from harbor_openenv.backends.factory import chosen
from harbor_openenv.backends.local import LocalEngine
from harbor_openenv.backends.request import EnvRequest
from harbor_openenv.backends.several import SeveralEngines
from harbor_openenv.config import Settings
from harbor_openenv.models import HarborAction
from harbor_openenv.sandbox.spec import ContainerSpec
from harbor_openenv.server.environment import HarborEnvironment
from harbor_openenv.tasks.dataset import Dataset

from .test_episode import FIXTURES, TOKEN, FakeRuntime

FORMAT = FIXTURES / "format"


def test_the_settings_choose_the_backend_once_and_nothing_connects(monkeypatch):
    def refuse(**_: object) -> None:
        raise AssertionError("a backend connected at start-up")

    monkeypatch.setattr("harbor_openenv.sandbox.engine.connect", refuse)
    dataset = Dataset(FIXTURES / "tasks")
    local = chosen(dataset, Settings(), owner="o", sessions=2)
    assert isinstance(local, LocalEngine) and local.running() == 0
    hosts = Settings.from_env({"HARBOR_OPENENV_DOCKER_HOSTS": "tcp://a:2376,ssh://me@b"})
    several = chosen(dataset, hosts, owner="o", sessions=2)
    assert isinstance(several, SeveralEngines)
    assert [(s.name, s.up) for s in several.statuses()] == [
        ("tcp://a:2376", True),
        ("ssh://me@b", True),
    ]


def test_a_tasks_request_is_its_container_and_compose_project():
    task = Dataset(FORMAT)["compose"]
    settings = Settings(pids_limit=0, disk_mb=0, default_cpus=2.0, build_network="host")
    request = EnvRequest.of_task(task, "img", {"A": "1"})
    assert request.container(settings) == ContainerSpec(
        "img", workdir="/app", cpus=2.0, memory_mb=2048, env=(("A", "1"),)
    )
    project = request.project(settings)
    assert project is not None and project.compose_file == task.compose_file
    assert (project.build_network, project.compose_env, project.prebuilt) == (
        "host",
        {"A": "1"},
        None,
    )
    assert EnvRequest.of_task(task, "img", {}, alone=True).project(settings) is None


def test_the_memory_backend_is_one_file_implementing_the_interface():
    backend = MemoryBackend()
    assert isinstance(backend, Backend)
    runtime = FakeRuntime(FIXTURES / "tasks", backend=backend)
    env = HarborEnvironment(runtime)
    assert env.reset(task_id="edit-file").error is None
    assert backend.specs[-1].image == "fake/edit-file" and runtime.snapshot().containers == 1
    graded = env.step(HarborAction(action_type="evaluate", token=TOKEN))
    assert graded.done and graded.reward == 0.0
    runtime.shutdown()
    assert runtime.snapshot().containers == 0


def test_a_public_tasks_network_is_the_one_named_for_its_phase():
    """HARBOR_OPENENV_PUBLIC_NETWORK for the task's own containers, _VERIFIER_NETWORK for a
    separate verifier's (else the agent's); a no-network task keeps none; unset: the engine's."""
    format_tasks = Dataset(FORMAT)
    public, separate = format_tasks["compose"], format_tasks["separate-verifier"]
    closed = format_tasks["options"]
    assert public.config.environment.network_mode == "public"
    assert separate.config.environment.network_mode == "public"
    assert closed.config.environment.network_mode == "no-network"
    both = Settings(public_network="agents", verifier_network="graders")
    agent_only = Settings(public_network="agents")
    assert EnvRequest.of_task(public, "img", {}).container(Settings()).network is None
    assert EnvRequest.of_task(public, "img", {}).container(both).network == "agents"
    assert EnvRequest.of_task(public, "img", {}, alone=True).network(both) == "agents"
    verifier = EnvRequest.verifier(separate, None, "img", {})
    assert verifier.container(both).network == "graders"
    assert verifier.network(agent_only) == "agents"
    assert verifier.network(Settings()) is None
    assert EnvRequest.of_task(closed, "img", {}).container(both).network == "none"
