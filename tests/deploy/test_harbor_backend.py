"""Harbor's environment backends (HARBOR_OPENENV_BACKEND=harbor:TYPE): a real server, run from the
Python 3.12 venv .ci/interop-tools.sh installs (the runtime with its harbor extra), serves the
bundled example on Harbor's docker backend, which shells out to `docker compose`: on this machine's
engine, and on a remote engine reached over SSH (a dockerd of its own behind a local sshd) by a
server that cannot reach the machine's engine. Harbor 0.25 has no ssh environment type: its
docker backend over DOCKER_HOST=ssh://... is how Harbor reaches a host by SSH.

This engine has no bridge network: a compose overlay given through HARBOR_OPENENV_HARBOR_ENV_KWARGS
(Harbor's own extra_docker_compose) builds and runs the task's container with network none.
Missing tools fail these tests; nothing here skips.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _engines import EngineError
from _interop import HARBOR_SERVER_PYTHON
from _remote import NO_SOCKET, remote_engine, remote_env
from _server import ROOT, TOKEN, Server, runtime_containers
from _sshd import SshdError, serve_sshd

from harbor_openenv.client import driver
from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.task import TaskKind

pytestmark = pytest.mark.docker

TASKS = ROOT / "examples" / "dataset" / "tasks"
PYTHON = HARBOR_SERVER_PYTHON
FIX = "printf 'Hello, world!\\n' > /app/hello.txt"


def harbor_server(
    tmp_path: Path, *, tasks: Path = TASKS, prefix: tuple[str, ...] = (), **env: str
) -> Server:
    overlay = tmp_path / "network-none.json"
    overlay.write_text(
        json.dumps({"services": {"main": {"build": {"network": "none"}, "network_mode": "none"}}})
    )
    kwargs = json.dumps({"extra_docker_compose": [str(overlay)]})
    return Server(
        tasks,
        python=PYTHON,
        prefix=prefix,
        HARBOR_OPENENV_BACKEND="harbor:docker",
        HARBOR_OPENENV_HARBOR_ENV_KWARGS=kwargs,
        **env,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with harbor_server(
        tmp_path_factory.mktemp("harbor"), HARBOR_OPENENV_PIDS_LIMIT="0", HARBOR_OPENENV_DISK_MB="0"
    ) as running:
        yield running


@pytest.mark.timeout(600)
def test_the_agents_fix_scores_one_and_nothing_zero(server: Server, docker_client) -> None:
    """reset, the agent's fix through exec, evaluate: 1.0; without the fix: 0.0. The episode's
    container is Harbor's (its compose project, its image), none of the runtime's own."""
    with server.client() as env:
        reset = env.reset(task_id="hello-world")
        assert reset.observation.error is None, (reset.observation.error, server.output[-3000:])
        assert not runtime_containers(docker_client, server.owner_prefix)
        # The episode's container by its hostname (other modules' compose projects may run now).
        hostname = env.exec("hostname").observation.output.strip()
        container = docker_client.api.inspect_container(hostname)
        project = container["Config"]["Labels"]["com.docker.compose.project"]
        assert project.startswith("harbor-openenv-"), project
        assert container["Config"]["Image"] == f"{project}-main"  # Harbor's compose build made it
        fixed = env.exec(FIX)
        assert fixed.observation.exit_code == 0, fixed.observation
        assert env.read("hello.txt").observation.output == "Hello, world!\n"
        graded = env.evaluate()
        assert graded.done and graded.reward == 1.0, graded.observation

        assert env.reset(task_id="hello-world").observation.error is None
        assert env.exec("ls").observation.output == ""  # a fresh environment
        assert env.evaluate().reward == 0.0


@pytest.mark.timeout(900)
def test_every_runnable_example_scores_as_under_harbor_run(server: Server) -> None:
    """The bundled dataset's oracles score 1.0 and doing nothing 0.0, as `harbor run` and this
    runtime's own backend give them (tests/deploy/test_interop.py); the text-only task is
    refused at reset."""
    dataset = Dataset(TASKS)
    for task_id in dataset.ids:
        for name, policy, expected in (
            ("nop", driver.nop, 0.0),
            ("oracle", driver.oracle(TOKEN, steps=99), 1.0),
        ):
            with server.client() as env:
                episode = driver.run_episode(driver.ClientEnv(env), task_id, policy, TOKEN)
            if dataset[task_id].kind is TaskKind.TEXT_ONLY:
                assert episode.refused and "text-only" in (episode.error or ""), episode
            else:
                assert episode.reward == expected, (task_id, name, episode.error)


@pytest.mark.timeout(600)
def test_the_stop_before_grading_ends_a_planted_writer(server: Server) -> None:
    """A detached loop that keeps writing reward 1 is killed before the verifier runs (Harbor's
    own shared verifier would score it): the reward is the verifier's 0.0."""
    with server.client() as env:
        assert env.reset(task_id="hello-world").observation.error is None
        plant = (
            "setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done'"
            " >/dev/null 2>&1 & sleep 0.5; cat /logs/verifier/reward.txt"
        )
        assert env.exec(plant).observation.output == "1\n"
        graded = env.evaluate()
        assert graded.done and graded.reward == 0.0, graded.observation


@pytest.mark.timeout(600)
def test_an_unprivileged_agent_acts_as_its_user(tmp_path: Path) -> None:
    """[agent].user = "nobody": its exec and its writes run as uid 65534 through Harbor's exec,
    its fix scores 1.0 and a writer it planted is stopped before grading (0.0)."""
    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS / "hello-world", tasks / "as-nobody")
    toml = tasks / "as-nobody" / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\n", '[agent]\nuser = "nobody"\n'))
    dockerfile = tasks / "as-nobody" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN chmod 777 /app\n")
    env_vars = {"HARBOR_OPENENV_PIDS_LIMIT": "0", "HARBOR_OPENENV_DISK_MB": "0"}
    with harbor_server(tmp_path, tasks=tasks, **env_vars) as running, running.client() as env:
        assert env.reset(task_id="as-nobody").observation.error is None
        assert env.exec("id -u").observation.output == "65534\n"
        assert env.write("hello.txt", "Hello, world!\n").observation.error is None
        assert env.exec("stat -c %u hello.txt").observation.output == "65534\n"
        assert env.evaluate().reward == 1.0

        assert env.reset(task_id="as-nobody").observation.error is None
        # It writes the answer once the tests are staged, i.e. just before the verifier runs,
        # if it outlived the stop before grading.
        plant = (
            "setsid sh -c 'while [ ! -e /tests/test.sh ]; do sleep 0.05; done;"
            ' printf "Hello, world!\\n" > /app/hello.txt\' >/dev/null 2>&1 &'
            # until its loop is seen sleeping (a loaded machine may take a while to start it)
            " for i in $(seq 100); do u=$(ps -o user= -C sleep | sort -u);"
            ' case "$u" in *nobody*) break;; esac; sleep 0.1; done; echo "$u"'
        )
        assert "nobody" in env.exec(plant).observation.output.split()  # (root's: the keepalive)
        graded = env.evaluate()
        assert graded.reward == 0.0, graded.observation


@pytest.mark.timeout(300)
def test_a_setting_the_backend_cannot_honour_refuses_the_reset(tmp_path: Path) -> None:
    """The default pids limit cannot be kept by Harbor's docker backend: reset says so in one
    line and names the setting to change; nothing starts."""
    with harbor_server(tmp_path, HARBOR_OPENENV_DISK_MB="0") as running, running.client() as env:
        reset = env.reset(task_id="hello-world")
        error = reset.observation.error or ""
        assert reset.done and "HARBOR_OPENENV_PIDS_LIMIT=0" in error, error
        assert "\n" not in error.strip()


@pytest.mark.timeout(300)
def test_a_network_the_backend_cannot_enforce_refuses_the_reset(tmp_path: Path) -> None:
    """A no-network task: Harbor's docker backend enforces it with an nftables egress sidecar,
    which this engine's kernel cannot run, so Harbor refuses it, and so does reset (in one line,
    naming the network mode) rather than run the agent with a network."""
    tasks = tmp_path / "tasks"
    shutil.copytree(TASKS / "hello-world", tasks / "offline")
    with (tasks / "offline" / "task.toml").open("a") as toml:
        toml.write('network_mode = "no-network"\n')  # into [environment], the file's last table
    env_vars = {"HARBOR_OPENENV_PIDS_LIMIT": "0", "HARBOR_OPENENV_DISK_MB": "0"}
    with (
        harbor_server(tmp_path, tasks=tasks, **env_vars) as running,
        running.client() as env,
    ):
        reset = env.reset(task_id="offline")
        error = reset.observation.error or ""
        assert reset.done and "refused task offline" in error and "no-network" in error, error
        assert "\n" not in error.strip()


def _docker_config(folder: Path) -> Path:
    """A docker CLI config folder holding only the machine's compose plugin."""
    home = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    plugin = home / "cli-plugins" / "docker-compose"
    assert plugin.exists(), f"{plugin} is missing: run .ci/interop-tools.sh"
    (folder / "cli-plugins").mkdir(parents=True)
    (folder / "cli-plugins" / "docker-compose").symlink_to(plugin.resolve())
    return folder


@pytest.mark.timeout(600)
def test_harbors_docker_backend_on_a_remote_engine_over_ssh(tmp_path: Path, docker_client) -> None:
    """A server with no local engine runs hello-world on Harbor's docker backend against a
    remote engine reached by SSH: the agent's fix scores 1.0, the compose project lives on the
    remote engine alone, and nothing is left there once the server stops."""
    env_vars = {
        "HARBOR_OPENENV_PIDS_LIMIT": "0",
        "HARBOR_OPENENV_DISK_MB": "0",
        # The SSH client's HOME is the test's: the docker CLI finds compose in a DOCKER_CONFIG
        # of the test's own that holds the machine's plugin.
        "DOCKER_CONFIG": str(_docker_config(tmp_path / "docker-config")),
    }
    try:
        with remote_engine(docker_client, "harbor-ssh") as engine, serve_sshd(engine.host) as ssh:
            assert engine.client is not None
            with (
                harbor_server(tmp_path, prefix=NO_SOCKET, **remote_env(ssh), **env_vars) as srv,
                srv.client() as env,
            ):
                reset = env.reset(task_id="hello-world")
                assert reset.observation.error is None, (reset.observation, srv.output[-3000:])
                labels = {"label": "com.docker.compose.project"}
                projects = [
                    c["Labels"]["com.docker.compose.project"]
                    for c in engine.client.api.containers(filters=labels)
                ]
                assert [p for p in projects if p.startswith("harbor-openenv-")], projects
                assert env.exec(FIX).observation.exit_code == 0
                graded = env.evaluate()
                assert (graded.reward, graded.observation.error) == (1.0, None), graded
            left = engine.client.api.containers(all=True, filters=labels)
            assert left == [], left
    except (EngineError, SshdError) as exc:
        pytest.fail(str(exc))
