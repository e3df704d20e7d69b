"""One server, two engines (``HARBOR_OPENENV_DOCKER_HOSTS``): two extra ``dockerd``'s, one
reached by TCP with TLS (its certificates given as contents), one by SSH (a local sshd), and a
server with no socket of the machine's engine (tests/support/_remote.py). Episodes land on both
(each engine's containers, by label), a compose task's on each (the compose CLI pointed at its
episode's engine), and score 1.0 after an agent's fix (the compose task: its oracle); a fork's
branch starts on its parent's engine; one engine stopped mid-episode ends that episode with an
error naming it (no reward) while the other keeps serving, ``/ready`` and ``/metrics`` show it
down; restarted, it comes back swept of the server's containers; after the server stops nothing
of it is left on either engine.

Run with ``-s`` for the durations.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _engines import Engine, EngineError
from _remote import NO_SOCKET, remote_engine, remote_env
from _server import ROOT, Server, runtime_containers, wait_until
from _sshd import SshdError, serve_sshd

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

EXAMPLES = ROOT / "examples" / "dataset" / "tasks"
COMPOSE = ROOT / "tests" / "fixtures" / "format" / "compose"
FIX_SUM = "sed -i 's/range(1, len(numbers))/range(len(numbers))/' sum_utils.py"


@pytest.fixture(scope="module")
def pair(docker_client) -> Iterator[tuple[Engine, Engine]]:
    """Two engines with the base images: ``tls`` (tcp:// with TLS) and ``far`` (by SSH)."""
    try:
        with remote_engine(docker_client, "tls") as tls, remote_engine(docker_client, "far") as far:
            yield tls, far
    except EngineError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def ssh_env(pair) -> Iterator[dict[str, str]]:
    try:
        with serve_sshd(pair[1].host) as env:
            yield env
    except SshdError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("engines") / "tasks"
    shutil.copytree(EXAMPLES, root)
    shutil.copytree(COMPOSE, root / "compose")
    return root


def _secrets(engine: Engine) -> dict[str, str]:
    folder = Path(engine.tls_env["DOCKER_CERT_PATH"])
    names = {"CA": "ca.pem", "CERT": "cert.pem", "KEY": "key.pem"}
    return {f"HARBOR_OPENENV_DOCKER_TLS_{k}": (folder / v).read_text() for k, v in names.items()}


@pytest.fixture(scope="module")
def srv(pair, ssh_env, tasks, docker_client, tmp_path_factory) -> Iterator[Server]:
    tls, _ = pair
    started = time.perf_counter()
    server = Server(
        tasks,
        prefix=NO_SOCKET,
        HARBOR_OPENENV_MAX_SESSIONS="6",
        HARBOR_OPENENV_DOCKER_HOSTS=f"{tls.tcp},{ssh_env['DOCKER_HOST']}",
        HARBOR_OPENENV_ENGINE_PROBE_S="1",
        TMPDIR=str(tmp_path_factory.mktemp("engines-tmp")),
        HOME=ssh_env["HOME"],  # the SSH engine's key and known_hosts, and an ssh for compose
        PATH=ssh_env["PATH"],
        **remote_env(_secrets(tls)),
    )
    try:
        yield server
    finally:
        server.stop()
        print(f"\nthe server's whole run took {time.perf_counter() - started:.1f} s")
        for engine in pair:
            assert engine.client is not None, f"{engine.name} is not running"
            assert runtime_containers(engine.client) == [], (engine.name, server.output)
            assert engine.client.volumes.list(filters={"label": "harbor-openenv"}) == []
        assert runtime_containers(docker_client, server.owner_prefix) == []


def _on(engine: Engine, srv: Server) -> int:
    assert engine.client is not None
    return len(runtime_containers(engine.client, srv.owner_prefix))


def _settled(srv: Server, pair: tuple[Engine, Engine]) -> None:
    """Wait until the last test's containers, removed in the background, are gone."""
    assert wait_until(lambda: all(_on(engine, srv) == 0 for engine in pair), 30)


def _get(srv: Server, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(srv.url + path, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _fix(env: Any, task: str) -> None:
    if task == "fix-sum-bug":
        assert env.exec(FIX_SUM).observation.exit_code == 0
    elif task == "hello-world":
        assert env.write("/app/hello.txt", "Hello, world!\n").observation.error is None
    else:  # compose: its oracle
        assert env.solve().observation.error is None


def test_episodes_spread_over_both_engines_and_score_1(srv, pair):
    tls, far = pair
    tasks = ["compose", "compose", "fix-sum-bug", "hello-world"]
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        envs = [stack.enter_context(srv.client()) for _ in tasks]
        for env, task in zip(envs, tasks, strict=True):  # least busy first: tls, far, tls, far
            assert env.reset(task_id=task).observation.error is None
        # main and its sidecar for the compose task, one container for the other
        assert (_on(tls, srv), _on(far, srv)) == (3, 3)
        for env, task in zip(envs, tasks, strict=True):
            _fix(env, task)
            result = env.evaluate()
            assert (result.reward, result.observation.error) == (1.0, None), result.observation
    print(
        f"\n4 episodes on two engines, images built on each: {time.perf_counter() - started:.1f} s"
    )


def test_a_forks_branch_starts_on_its_engine(srv, pair):
    tls, far = pair
    _settled(srv, pair)
    with srv.client() as first, srv.client() as parent:
        assert first.reset(task_id="hello-world").observation.error is None  # tls
        assert parent.reset(task_id="hello-world").observation.error is None  # far
        _fix(parent, "hello-world")
        (branch,) = parent.fork(1)  # 1 and 1 episodes: tls first, were the branch not pinned
        with branch:
            assert (_on(tls, srv), _on(far, srv)) == (1, 2)
            result = branch.evaluate()
            assert (result.reward, result.observation.error) == (1.0, None), result.observation


def test_losing_an_engine_ends_its_episode_and_the_other_keeps_serving(srv, pair, ssh_env):
    tls, far = pair
    _settled(srv, pair)
    with srv.client() as doomed, srv.client() as kept:
        assert doomed.reset(task_id="fix-sum-bug").observation.error is None  # tls: listed first
        assert kept.reset(task_id="fix-sum-bug").observation.error is None
        assert (_on(tls, srv), _on(far, srv)) == (1, 1)
        stopped = time.perf_counter()
        tls.stop_daemon()
        answer = doomed.exec("echo still here").observation
        print(
            f"\nthe step after the engine stopped answered in {time.perf_counter() - stopped:.1f} s"
        )
        assert answer.done and answer.reward is None, answer
        assert answer.error.startswith(
            f"the Docker engine {tls.tcp} went down ([Errno 111] Connection refused): this"
            " episode has ended"
        ), answer.error
        _fix(kept, "fix-sum-bug")
        result = kept.evaluate()
        assert (result.reward, result.observation.error) == (1.0, None), result.observation
    with srv.client() as env:  # new resets go to the engine that is up
        assert env.reset(task_id="hello-world").observation.error is None
        assert _on(far, srv) >= 1
        _fix(env, "hello-world")
        assert env.evaluate().reward == 1.0
    status, body = _get(srv, "/ready")
    assert status == 200 and f'"engine":"{tls.tcp}","up":false' in body, body
    _, metrics = _get(srv, "/metrics")
    assert f'harbor_openenv_engine_up{{engine="{tls.tcp}"}} 0.0' in metrics
    assert f'harbor_openenv_engine_up{{engine="{ssh_env["DOCKER_HOST"]}"}} 1.0' in metrics
    # Back: the prober reconnects it, the server's containers from before are swept.
    tls.start_daemon()
    assert wait_until(lambda: f'"engine":"{tls.tcp}","up":true' in _get(srv, "/ready")[1], 30)
    assert _on(tls, srv) == 0
    with srv.client() as env:  # the least busy again (a tie, listed first)
        assert env.reset(task_id="hello-world").observation.error is None
        assert _on(tls, srv) == 1
    assert re.search(r'"engines":\[\{[^]]*"up":true[^]]*"up":true', _get(srv, "/ready")[1])
