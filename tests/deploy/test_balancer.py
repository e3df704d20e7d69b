"""The balancer proof, on this machine: two replicas (each its own server process with its own
owner, both on the one Docker engine) behind a real HAProxy (tests/support/_balancer.py:
Debian's, on 127.0.0.1 with ``balance leastconn`` and ``option httpchk GET /ready``).

8 concurrent trainer sessions through HAProxy, each a whole episode with an agent edit scoring
1.0: both replicas serve sessions, 0 wrong rewards, 0 leaked containers. Then one replica gets
SIGTERM mid-episode: HAProxy marks it down, new sessions all reach the other replica, and the
drained replica's running episode still finishes with 1.0 before it exits with nothing left.
And one replica killed with -9: only its session fails, a retry lands on the other, and a replica
started again on the engine removes the dead one's container.
Separate engines per replica: tests/deploy/test_scale_out.py."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from _balancer import TASK, HAProxy, episodes_started, trainer_episode
from _server import FIXTURE_TASKS, TOKEN, Server, runtime_containers, wait_until

from harbor_openenv import HarborEnvClient

pytestmark = pytest.mark.docker


def test_two_replicas_behind_haproxy_serve_sessions_and_drain(docker_client, tmp_path):
    env = {"HARBOR_OPENENV_MAX_SESSIONS": "6", "HARBOR_OPENENV_DRAIN_S": "120"}
    replicas: list[Server] = []
    balancer: HAProxy | None = None
    try:
        replicas = [Server(FIXTURE_TASKS, **env) for _ in range(2)]
        prefixes = [srv.owner_prefix for srv in replicas]
        assert prefixes[0] != prefixes[1]  # distinct owners on the one engine
        balancer = HAProxy(tmp_path, [srv.port for srv in replicas])

        # 8 concurrent sessions through the balancer, each a whole episode.
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            rewards = list(pool.map(lambda _: trainer_episode(balancer.url), range(8)))
        took = time.monotonic() - started
        wrong = [reward for reward in rewards if reward != 1.0]
        served = [episodes_started(srv.url) for srv in replicas]
        print(f"\n8 sessions through HAProxy in {took:.1f} s: {served} per replica")
        assert wrong == [], rewards
        assert sum(served) == 8 and min(served) >= 1, served
        for prefix in prefixes:
            assert wait_until(lambda p=prefix: runtime_containers(docker_client, p) == [], 60)

        # A session mid-episode on one replica, then SIGTERM to that replica.
        with HarborEnvClient(balancer.url, orchestration_token=TOKEN) as running:
            assert running.reset(task_id=TASK).observation.error is None
            holding = [n for n, srv in enumerate(replicas) if episodes_started(srv.url) > served[n]]
            assert len(holding) == 1, holding
            drained, other = replicas[holding[0]], replicas[1 - holding[0]]
            name = f"r{holding[0] + 1}"
            drained.process.send_signal(signal.SIGTERM)
            assert wait_until(lambda: balancer.states().get(name) == "DOWN", timeout=10)
            before = episodes_started(drained.url), episodes_started(other.url)

            # New sessions all reach the other replica while the drained one's episode runs.
            with ThreadPoolExecutor(4) as pool:
                late = list(pool.map(lambda _: trainer_episode(balancer.url), range(4)))
            assert late == [1.0] * 4, late
            assert episodes_started(drained.url) == before[0]
            assert episodes_started(other.url) == before[1] + 4
            assert drained.process.poll() is None  # still draining, well past uvicorn's 1 s

            running.write("answer.txt", "42\n")
            result = running.evaluate()
            assert result.reward == 1.0 and result.done, result
        drained.process.wait(timeout=60)
        assert "drained episodes=0" in drained.output, drained.output
        assert runtime_containers(docker_client, prefixes[holding[0]]) == []
        assert wait_until(lambda: runtime_containers(docker_client, other.owner_prefix) == [], 60)
        assert balancer.states()[name] == "DOWN"
    finally:
        if balancer is not None:
            balancer.stop()
        for srv in replicas:
            srv.stop()


def test_a_replica_killed_with_9_fails_only_its_sessions(docker_client, tmp_path):
    """kill -9 of the replica holding one of two sessions: that session's next action gets a
    clear error (the episode is lost), the other replica's session scores 1.0, a retry through
    HAProxy lands on the live replica and scores 1.0, and a replica started again on the same
    engine removes the dead one's container."""
    replicas: list[Server] = []
    balancer: HAProxy | None = None
    restarted: Server | None = None
    try:
        replicas = [Server(FIXTURE_TASKS, HARBOR_OPENENV_MAX_SESSIONS="4") for _ in range(2)]
        balancer = HAProxy(tmp_path, [srv.port for srv in replicas])
        with (
            HarborEnvClient(balancer.url, orchestration_token=TOKEN) as first,
            HarborEnvClient(balancer.url, orchestration_token=TOKEN) as second,
        ):
            assert first.reset(task_id=TASK).observation.error is None
            (held,) = [n for n, srv in enumerate(replicas) if episodes_started(srv.url) == 1]
            assert second.reset(task_id=TASK).observation.error is None
            assert [episodes_started(srv.url) for srv in replicas] == [1, 1]  # leastconn: one each
            dead, live = replicas[held], replicas[1 - held]
            dead_prefix = dead.owner_prefix
            assert len(runtime_containers(docker_client, dead_prefix)) == 1
            dead.stop(signal.SIGKILL)

            # OpenEnv's client reconnects once its socket is closed; the balancer redispatches
            # that connection to the live replica, whose new session says the episode is lost.
            try:
                lost = first.write("answer.txt", "42\n").observation.error
            except Exception as exc:  # the close not seen yet: it is raised
                lost = f"{type(exc).__name__}: {exc}"
            print(f"\nthe killed replica's session: {lost}")
            assert lost is not None, "a write on the killed replica's session succeeded"
            assert "reconnected" in lost or "ConnectionClosed" in lost, lost
            second.write("answer.txt", "42\n")
            assert second.evaluate().reward == 1.0

        assert wait_until(lambda: balancer.states().get(f"r{held + 1}") == "DOWN", timeout=10)
        assert trainer_episode(balancer.url) == 1.0  # the retry lands on the live replica
        assert episodes_started(live.url) == 2
        # The killed replica's container outlives it, until a replica starts on its engine.
        assert len(runtime_containers(docker_client, dead_prefix)) == 1
        restarted = Server(FIXTURE_TASKS)
        assert wait_until(lambda: runtime_containers(docker_client, dead_prefix) == [], 60)
    finally:
        if balancer is not None:
            balancer.stop()
        for srv in [*replicas, *([restarted] if restarted else [])]:
            srv.stop()
