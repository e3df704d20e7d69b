"""Task containers on the real engine: limits, workdir and network; none left after an episode
ends, a client disconnects or a server is killed; one per concurrent session; whose containers a
startup sweep may remove."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from _server import FIXTURE_TASKS, Server, runtime_containers, wait_until
from websockets.sync.client import connect

pytestmark = pytest.mark.docker


def test_task_limits_workdir_and_network(server, docker_client):
    with server.client() as env:
        reset = env.reset(task_id="limits")
        assert reset.observation.workdir == "/srv/project"  # task.toml overrides WORKDIR
        nets = env.exec("ls /sys/class/net").observation.output.split()
        assert nets == ["lo"]
        (info,) = [
            c
            for c in runtime_containers(docker_client, server.owner_prefix)
            if c["Labels"]["harbor-openenv.task"] == "limits"
        ]
        host = docker_client.api.inspect_container(info["Id"])["HostConfig"]
        assert host["NanoCpus"] == 500_000_000
        assert host["Memory"] == 256 * 1024 * 1024  # legacy memory = "256M"
        assert host["NetworkMode"] == "none"  # allow_internet = false
        assert env.evaluate().reward == 1.0  # the verifier ran in /srv/project too


def test_episode_end_and_disconnect_leave_no_container(server, docker_client):
    mine = lambda: runtime_containers(docker_client, server.owner_prefix)  # noqa: E731
    assert wait_until(lambda: not mine())
    with server.client() as env:
        env.reset(task_id="edit-file")
        assert len(mine()) == 1
        env.evaluate()
        assert wait_until(lambda: not mine())  # removed in the background after the answer
        env.reset(task_id="edit-file")
        assert len(mine()) == 1
        env.reset(task_id="edit-file")  # a new reset replaces the old container
        assert wait_until(lambda: len(mine()) == 1)
    assert wait_until(lambda: not mine())  # a clean close

    # A client that vanishes without a close frame (a crashed trainer): drop the TCP socket.
    with contextlib.suppress(Exception), connect(server.url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task_id": "edit-file"}}))
        assert json.loads(ws.recv(timeout=120))["type"] == "observation"
        assert len(mine()) == 1
        ws.socket.close()
    assert wait_until(lambda: not mine()), "a dropped connection left its container behind"


def test_server_killed_and_restarted_leaves_no_container(docker_client):
    first = Server(FIXTURE_TASKS)
    try:
        with first.client() as env:
            env.reset(task_id="edit-file")
            orphans = runtime_containers(docker_client, first.owner_prefix)
            assert len(orphans) == 1
            first.stop(signal.SIGKILL)
        assert len(runtime_containers(docker_client, first.owner_prefix)) == 1
    finally:
        first.stop(signal.SIGKILL)
    second = Server(FIXTURE_TASKS)
    try:
        # Removed by the time it is healthy, or still being removed by another server's sweep
        # (a test on the other xdist worker starting a server at the same moment: the engine
        # answers the second removal with 409, in progress), gone a moment later.
        assert wait_until(lambda: runtime_containers(docker_client, first.owner_prefix) == [], 15)
        with second.client() as env:
            env.reset(task_id="edit-file")
            assert len(runtime_containers(docker_client, second.owner_prefix)) == 1
    finally:
        second.stop(signal.SIGTERM)  # a clean shutdown removes what it started
    assert runtime_containers(docker_client, second.owner_prefix) == []


def test_concurrent_sessions_each_get_their_own_container(server, docker_client):
    barrier = threading.Barrier(8)

    def episode(i: int) -> tuple[float | None, str]:
        with server.client() as env:
            env.reset(task_id="edit-file")
            if i % 2 == 0:
                env.write("answer.txt", "42")
            else:
                env.write("answer.txt", str(i))
            marker = env.exec(f"echo {i} > /tmp/session; hostname").observation.output.strip()
            barrier.wait(timeout=120)  # all eight containers exist at once
            mine = env.exec("cat /tmp/session").observation
            assert mine.output.strip() == str(i), mine  # the whole observation, if it fails
            return env.evaluate().reward, marker

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(episode, range(8)))
    assert [reward for reward, _ in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(8)]
    assert len({host for _, host in results}) == 8
    assert wait_until(lambda: not runtime_containers(docker_client, server.owner_prefix))


def test_owner_liveness(docker_client):
    """Whose containers the startup sweep may remove: only those of servers known to be dead."""
    import os

    from harbor_openenv.sandbox import owner_alive, server_identity, server_scope

    assert server_scope().startswith("h-")  # these tests run on the host
    assert owner_alive(docker_client, server_identity())
    assert not owner_alive(docker_client, f"{server_scope()}:{os.getpid()}:0")  # PID reused
    # A server in a container is alive while that container runs; an unknown container is gone.
    running = docker_client.containers.run(
        "debian:bookworm-slim", ["sleep", "60"], detach=True, network_mode="none"
    )
    try:
        assert owner_alive(docker_client, f"c-{running.id[:12]}:1:123")
        running.kill()
        running.wait()
        assert not owner_alive(docker_client, f"c-{running.id[:12]}:1:123")
    finally:
        running.remove(force=True)
    assert not owner_alive(docker_client, "c-0123456789ab:1:123")
    # A server on another host (or seen from inside a container) cannot be checked: kept.
    assert owner_alive(docker_client, "h-some-other-host:1:123")
