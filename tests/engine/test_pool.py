"""The warm pool (HARBOR_OPENENV_POOL_SIZE) against a real engine, over /ws with the real client."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager

import docker.errors
import httpx
import pytest
from _server import FIXTURE_TASKS, Server, runtime_containers, wait_until

pytestmark = pytest.mark.docker

TASK = "edit-file"
POOL_LABEL = "harbor-openenv.pool"


@contextmanager
def serving(**env: str):
    srv = Server(FIXTURE_TASKS, **env)
    try:
        yield srv
    finally:
        srv.stop()


def idle(docker_client, srv: Server, active: set[str] = frozenset()) -> set[str]:
    """Ids of the server's pooled containers that no episode holds (``active``: short ids)."""
    return {
        c["Id"]
        for c in runtime_containers(docker_client, srv.owner_prefix)
        if POOL_LABEL in c["Labels"] and c["Id"][:12] not in active
    }


def pool_idle(srv: Server) -> float:
    """What the server says its pool holds ready (its ``harbor_openenv_pool_idle`` gauge)."""
    metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
    (line,) = (x for x in metrics.splitlines() if x.startswith("harbor_openenv_pool_idle "))
    return float(line.split()[1])


def wait_ready(docker_client, srv: Server, count: int, active: set[str] = frozenset()) -> set[str]:
    """Wait until the server's pool holds ``count`` ready containers (its own gauge: a container
    joins the pool only once its setup exec returned, which a loaded engine can take seconds
    for), and as many idle pooled containers exist on the engine; return their ids."""

    def done() -> bool:
        return pool_idle(srv) == count and len(idle(docker_client, srv, active)) == count

    assert wait_until(done, timeout=60), (pool_idle(srv), idle(docker_client, srv, active))
    return idle(docker_client, srv, active)


def container_of(env) -> str:
    """The short id of the episode's container (its hostname)."""
    output = env.exec("hostname").observation.output.strip()
    assert len(output) == 12, output
    return output


def exists(docker_client, short_id: str) -> bool:
    try:
        docker_client.api.inspect_container(short_id)
    except docker.errors.NotFound:
        return False
    return True


def test_reset_hands_out_prestarted_containers_once_and_refills(docker_client):
    pool = {"HARBOR_OPENENV_POOL_SIZE": "2", "HARBOR_OPENENV_MAX_SESSIONS": "4"}
    with serving(**pool) as srv, srv.client() as env:
        env.reset(task_id=TASK)  # the first reset of this spec starts its own container
        first = container_of(env)
        wait_ready(docker_client, srv, 2, {first})
        env.evaluate()
        seen = [first]
        for _ in range(3):
            ready = wait_ready(docker_client, srv, 2)  # refilled to two, never more
            env.reset(task_id=TASK)
            mine = container_of(env)
            assert any(full.startswith(mine) for full in ready), (mine, ready)
            assert mine not in seen  # never a container an earlier episode had
            inspected = docker_client.api.inspect_container(mine)
            assert "harbor-openenv.task" not in inspected["Config"]["Labels"]
            assert env.exec("pwd").observation.output.strip() == "/work"
            env.write("answer.txt", "42\n")
            assert env.evaluate().reward == 1.0
            # Removed (in the background, after the answer), never returned to the pool.
            assert wait_until(lambda mine=mine: not exists(docker_client, mine))
            seen.append(mine)
        wait_ready(docker_client, srv, 2)
        time.sleep(2)
        assert len(idle(docker_client, srv)) == 2


def test_a_stopped_pooled_container_is_never_handed_out(docker_client):
    pool = {"HARBOR_OPENENV_POOL_SIZE": "2", "HARBOR_OPENENV_MAX_SESSIONS": "4"}
    with serving(**pool) as srv, srv.client() as env:
        env.reset(task_id=TASK)
        first = container_of(env)
        wait_ready(docker_client, srv, 2, {first})
        env.evaluate()
        dead = idle(docker_client, srv)
        for container in dead:
            docker_client.api.kill(container)
        env.reset(task_id=TASK)
        mine = container_of(env)
        assert not any(full.startswith(mine) for full in dead)
        assert env.exec("echo ok").observation.output == "ok\n"
        assert wait_until(lambda: not any(exists(docker_client, c) for c in dead))
        env.write("answer.txt", "42\n")
        assert env.evaluate().reward == 1.0


def test_idle_and_running_containers_stay_within_the_session_limit(docker_client):
    limit = 3
    with serving(HARBOR_OPENENV_POOL_SIZE="2", HARBOR_OPENENV_MAX_SESSIONS=str(limit)) as srv:
        counts: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                counts.append(len(runtime_containers(docker_client, srv.owner_prefix)))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            with srv.client() as a, srv.client() as b, srv.client() as c:
                a.reset(task_id=TASK)
                wait_ready(docker_client, srv, 2, {container_of(a)})  # one running, two idle
                b.reset(task_id=TASK)  # takes an idle one; no room to refill it
                time.sleep(3)
                assert len(idle(docker_client, srv, {container_of(b)})) == 1
                c.reset(task_id="limits")  # another spec: evicts the last idle container
                assert c.exec("ls /sys/class/net").observation.output.split() == ["lo"]
                assert idle(docker_client, srv, {container_of(b), container_of(c)}) == set()
                assert len(runtime_containers(docker_client, srv.owner_prefix)) == limit
                c.evaluate()
                b.evaluate()
                # Two places free: the most recently asked-for spec refills first, then the other.
                assert wait_until(lambda: len(idle(docker_client, srv)) == 2)
                time.sleep(2)
        finally:
            stop.set()
            sampler.join()
        assert max(counts) <= limit, counts
        assert counts[-1] == limit  # the pool did fill the room it had


def test_default_task_is_prewarmed_at_startup(docker_client):
    env_vars = {"HARBOR_OPENENV_POOL_SIZE": "1", "HARBOR_OPENENV_DEFAULT_TASK": TASK}
    with serving(**env_vars) as srv:
        (ready,) = wait_ready(docker_client, srv, 1)  # no reset has asked for it yet
        with srv.client() as env:
            env.reset()
            assert ready.startswith(container_of(env))


def test_shutdown_and_restart_remove_pooled_containers(docker_client):
    with serving(HARBOR_OPENENV_POOL_SIZE="2") as srv, srv.client() as env:
        env.reset(task_id=TASK)
        assert wait_until(lambda: len(idle(docker_client, srv, {container_of(env)})) == 2)
        srv.stop(signal.SIGTERM)
        assert runtime_containers(docker_client, srv.owner_prefix, probes=True) == []

    killed = Server(FIXTURE_TASKS, HARBOR_OPENENV_POOL_SIZE="2")
    try:
        with killed.client() as env:
            env.reset(task_id=TASK)
            assert wait_until(lambda: len(idle(docker_client, killed, {container_of(env)})) == 2)
            killed.stop(signal.SIGKILL)
        assert len(runtime_containers(docker_client, killed.owner_prefix)) == 3
    finally:
        killed.stop(signal.SIGKILL)
    with serving():  # its startup sweep removes a dead server's containers, pooled ones too
        assert runtime_containers(docker_client, killed.owner_prefix, probes=True) == []


def test_without_a_pool_size_reset_starts_its_own_container(server, docker_client):
    mine = lambda: runtime_containers(docker_client, server.owner_prefix)  # noqa: E731
    assert wait_until(lambda: not mine())
    with server.client() as env:
        before = time.time()
        env.reset(task_id=TASK)
        time.sleep(2)  # a pool would fill meanwhile
        (only,) = mine()
        assert only["Labels"]["harbor-openenv.task"] == TASK
        assert POOL_LABEL not in only["Labels"]
        assert only["Created"] >= int(before)  # started by this reset
        env.evaluate()
        assert wait_until(lambda: not mine())
