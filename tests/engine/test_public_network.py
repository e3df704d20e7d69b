"""A public task's network, selected by name and per phase (HARBOR_OPENENV_PUBLIC_NETWORK for the
agent's containers, _VERIFIER_NETWORK for a separate verifier's), on a real engine: two
user-defined networks made here with ``docker network create --internal`` (this engine has no
bridge network and no iptables; an internal network needs neither), removed after. A no-network
task stays on ``none``; a network missing on the engine fails the reset, naming it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from _episodes import run
from _server import ROOT, Server, runtime_containers

pytestmark = pytest.mark.docker

EXAMPLES = ROOT / "examples" / "dataset" / "tasks"
FORMAT = ROOT / "tests" / "fixtures" / "format"
NONCE = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def networks(docker_client) -> Iterator[tuple[str, str]]:
    made = [
        docker_client.networks.create(f"hoe-{phase}-{NONCE}", internal=True)
        for phase in ("agents", "graders")
    ]
    try:
        yield made[0].name, made[1].name
    finally:
        for network in made:
            network.remove()


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    import shutil

    root = tmp_path_factory.mktemp("public-network") / "tasks"
    shutil.copytree(EXAMPLES / "hello-world", root / "hello-world")
    for name in ("separate-verifier", "options"):
        shutil.copytree(FORMAT / name, root / name)
    return root


@pytest.fixture(scope="module")
def srv(docker_client, networks, tasks) -> Iterator[Server]:
    agents, graders = networks
    server = Server(
        tasks,
        HARBOR_OPENENV_PUBLIC_NETWORK=agents,
        HARBOR_OPENENV_VERIFIER_NETWORK=graders,
        HOE_FORMAT_GREETING="hello",
    )
    yield server
    server.stop()


def joined(docker_client, owner_prefix: str) -> dict[str, set[str]]:
    """Each of the server's task containers (by task id): the networks it is on."""
    found = {}
    for listed in runtime_containers(docker_client, owner_prefix):
        container = docker_client.containers.get(listed["Id"])
        networks = set(container.attrs["NetworkSettings"]["Networks"])
        found[container.labels.get("harbor-openenv.task", listed["Id"])] = networks
    return found


def test_a_public_task_joins_the_named_network_and_scores(srv, docker_client, networks):
    agents, _ = networks
    with srv.client() as env:
        env.reset(task_id="hello-world")
        assert joined(docker_client, srv.owner_prefix) == {"hello-world": {agents}}
        assert env.write("/app/hello.txt", "Hello, world!\n").observation.error is None
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (1.0, None), result.observation


def test_a_no_network_task_stays_on_none(srv, docker_client):
    with srv.client() as env:
        reset = env.reset(task_id="options")
        assert reset.observation.error is None, reset.observation
        assert joined(docker_client, srv.owner_prefix) == {"options": {"none"}}


def test_a_separate_verifier_joins_the_verifiers_network(srv, docker_client, networks):
    """The engine's own network events: during the episode the agent's container connects to
    the agents' network and the verifier's to the graders'."""
    agents, graders = networks
    seen: list[tuple[str, str]] = []
    events = docker_client.events(filters={"type": "network", "event": "connect"}, decode=True)

    def watch() -> None:
        for event in events:
            name = event["Actor"]["Attributes"].get("name", "")
            seen.append((name, event["Actor"]["Attributes"]["container"]))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with srv.client() as env:
            last = run(env, "separate-verifier", oracle_steps=1)[-1]
    finally:
        events.close()
    assert last.reward == 1.0, last
    ours = [(name, cid) for name, cid in seen if name in (agents, graders)]
    assert {name for name, _ in ours} == {agents, graders}, seen
    assert len({cid for _, cid in ours}) == len(ours), "one container joined both"


def test_a_missing_network_fails_the_reset_naming_it(docker_client, tasks):
    missing = f"hoe-missing-{NONCE}"
    server = Server(tasks, HARBOR_OPENENV_PUBLIC_NETWORK=missing)
    try:
        with server.client() as env:
            reset = env.reset(task_id="hello-world")
        assert reset.observation.error is not None and missing in reset.observation.error
    finally:
        server.stop()
    assert runtime_containers(docker_client, server.owner_prefix) == []
