"""A server with no Docker engine of its own: it reaches a remote engine by TCP with TLS (client
certificates made in the test, given to the server as contents, as a Space's secrets are) and by
SSH (a local sshd whose ``docker system dial-stdio`` reaches
that engine), from a mount namespace where the machine's ``/var/run/docker.sock`` is hidden
(tests/support/_remote.py). The bundled examples, a compose task and a multi-step task score 1.0
on each transport, the agent's own fix included; nothing is left on the remote engine or created
on the machine's; a compose task binding a server path is refused by name.

Run with ``-s`` for the durations. The engine is a fresh ``dockerd`` on this machine: "remote"
here means reached only through its TCP or SSH listener.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _engines import Engine, EngineError
from _episodes import run
from _remote import DEFAULT_SOCKET, NO_SOCKET, remote_engine, remote_env
from _server import ROOT, Server, runtime_containers
from _sshd import SshdError, serve_sshd

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

EXAMPLES = ROOT / "examples" / "dataset" / "tasks"
FORMAT = ROOT / "tests" / "fixtures" / "format"
ORACLE_STEPS = {"multi-step": 2}  # (text-only-pr-diff has no container: scored client-side)
BIND_COMPOSE = "services:\n  main:\n    volumes:\n      - ./data:/data\n"


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    """The bundled examples, the compose and multi-step fixtures, and a compose task that binds a
    folder of the server's host."""
    root = tmp_path_factory.mktemp("remote") / "tasks"
    shutil.copytree(EXAMPLES, root)
    for name in ("compose", "multi-step"):
        shutil.copytree(FORMAT / name, root / name)
    shutil.copytree(FORMAT / "compose", root / "compose-bind")
    (root / "compose-bind" / "environment" / "docker-compose.yaml").write_text(BIND_COMPOSE)
    return root


@pytest.fixture(scope="module")
def engine(docker_client) -> Iterator[Engine]:
    try:
        with remote_engine(docker_client, "remote") as started:
            yield started
    except EngineError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def ssh_env(engine) -> Iterator[dict[str, str]]:
    try:
        with serve_sshd(engine.host) as env:
            yield env
    except SshdError as exc:
        pytest.fail(str(exc))


def secrets(engine: Engine) -> dict[str, str]:
    """The client certificates as ``HARBOR_OPENENV_DOCKER_TLS_*`` contents, no file named."""
    folder = Path(engine.tls_env["DOCKER_CERT_PATH"])
    names = {"CA": "ca.pem", "CERT": "cert.pem", "KEY": "key.pem"}
    return {f"HARBOR_OPENENV_DOCKER_TLS_{k}": (folder / v).read_text() for k, v in names.items()}


@pytest.fixture(scope="module", params=["tls", "ssh"])
def srv(request, engine, tasks, docker_client, tmp_path_factory) -> Iterator[Server]:
    # The server's own temporary folder: other tests' servers write their certificates too.
    scratch = tmp_path_factory.mktemp(f"server-tmp-{request.param}")
    if request.param == "tls":  # as a Space gives them: the certificates' contents as secrets
        docker_env = {"DOCKER_HOST": engine.tls_env["DOCKER_HOST"], **secrets(engine)}
    else:
        docker_env = request.getfixturevalue("ssh_env")
    started = time.perf_counter()
    server = Server(
        tasks,
        prefix=NO_SOCKET,
        HARBOR_OPENENV_MAX_SESSIONS="4",
        TMPDIR=str(scratch),
        **remote_env(docker_env),
    )
    try:
        yield server
    finally:
        server.stop()
        print(
            f"\n{request.param}: the server's whole run took {time.perf_counter() - started:.1f} s"
        )
        assert engine.client is not None
        assert runtime_containers(engine.client) == [], server.output
        assert engine.client.volumes.list(filters={"label": "harbor-openenv"}) == []
        assert runtime_containers(docker_client, server.owner_prefix) == []
        assert not list(scratch.glob("harbor-openenv-docker-tls-*")), "certificates left"


def test_the_server_cannot_reach_the_machines_engine(srv):
    mounts = Path(f"/proc/{srv.process.pid}/mountinfo").read_text()
    hidden = [
        line
        for line in mounts.splitlines()
        if line.split(" ")[4] in (DEFAULT_SOCKET, "/run/docker.sock")
    ]
    assert hidden, mounts


def test_an_agents_fix_scores_1(srv):
    with srv.client() as env:
        env.reset(task_id="fix-sum-bug")
        fixed = env.exec("sed -i 's/range(1, len(numbers))/range(len(numbers))/' sum_utils.py")
        assert fixed.observation.exit_code == 0, fixed.observation
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (1.0, None), result.observation
    with srv.client() as env:
        env.reset(task_id="hello-world")
        assert env.write("/app/hello.txt", "Hello, world!\n").observation.error is None
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (1.0, None), result.observation


@pytest.mark.parametrize(
    "task",
    sorted(p.parent.name for p in EXAMPLES.glob("*/environment")) + ["compose", "multi-step"],
)
def test_every_example_scores_1_by_its_oracle(srv, task):
    started = time.perf_counter()
    with srv.client() as env:
        seen = run(env, task, oracle_steps=ORACLE_STEPS.get(task, 1))
    last = seen[-1]
    assert (last.reward, last.error) == (1.0, None), last
    print(f"\n{task}: {time.perf_counter() - started:.1f} s")


def test_a_compose_bind_mount_is_refused_by_name(srv):
    with srv.client() as env:
        error = env.reset(task_id="compose-bind").observation.error
    assert "binds paths of the server's host (main:" in error, error
    assert "remote Docker engine cannot mount" in error
