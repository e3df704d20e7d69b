"""The balancer proof, on this machine: two replicas (each its own server process with its own
owner, both on the one Docker engine) behind a real HAProxy (Debian's, installed by
.ci/balancer.sh) on 127.0.0.1 with ``balance leastconn`` and ``option httpchk GET /ready``.

8 concurrent trainer sessions through HAProxy, each a whole episode with an agent edit scoring
1.0: both replicas serve sessions, 0 wrong rewards, 0 leaked containers. Then one replica gets
SIGTERM mid-episode: HAProxy marks it down, new sessions all reach the other replica, and the
drained replica's running episode still finishes with 1.0 before it exits with nothing left.
And one replica killed with -9: only its session fails, a retry lands on the other, and a replica
started again on the engine removes the dead one's container.
What this does not prove: separate engines per replica (see README, Scaling out)."""

from __future__ import annotations

import csv
import io
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from conftest import FIXTURE_TASKS, TOKEN, Server, runtime_containers, wait_until
from prometheus_client.parser import text_string_to_metric_families

from harbor_openenv import HarborEnvClient
from harbor_openenv.launch import free_port, stop_process

pytestmark = pytest.mark.docker

TASK = "edit-file"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def _haproxy_config(front: int, stats: int, replicas: list[Server]) -> str:
    servers = "\n".join(
        f"  server r{n} 127.0.0.1:{srv.port}" for n, srv in enumerate(replicas, start=1)
    )
    return f"""global
  maxconn 256

defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  timeout tunnel 1h

frontend trainers
  bind 127.0.0.1:{front}
  default_backend replicas

backend replicas
  balance leastconn
  option httpchk GET /ready
  http-check expect status 200
  default-server check inter 300ms fall 1 rise 1
{servers}

listen stats
  bind 127.0.0.1:{stats}
  stats enable
  stats uri /stats
"""


class HAProxy:
    def __init__(self, folder: Path, replicas: list[Server]) -> None:
        if not Path(HAPROXY).exists():
            pytest.fail("haproxy is not installed: run .ci/balancer.sh")
        self.front, self.stats = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.front}"
        config = folder / "haproxy.cfg"
        config.write_text(_haproxy_config(self.front, self.stats, replicas))
        check = subprocess.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = folder / "haproxy.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [HAPROXY, "-W", "-db", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT
            )
        ready = wait_until(lambda: self.states() == {"r1": "UP", "r2": "UP"}, timeout=30)
        assert ready, (self.states(), self.log.read_text())

    def states(self) -> dict[str, str]:
        """Each replica's status as HAProxy's health checks see it (UP, DOWN ...)."""
        try:
            text = httpx.get(f"http://127.0.0.1:{self.stats}/stats;csv", timeout=5).text
        except httpx.HTTPError:
            return {}
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        return {
            row["svname"]: row["status"]
            for row in rows
            if row["pxname"] == "replicas" and row["svname"] not in ("FRONTEND", "BACKEND")
        }

    def stop(self) -> None:
        stop_process(self.process, timeout=30)


def _started(srv: Server) -> float:
    """The replica's episodes started so far, from its own /metrics (directly, not balanced)."""
    text = httpx.get(srv.url + "/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "harbor_openenv_episodes_started_total":
                return sample.value
    raise AssertionError(text)


def _episode(url: str) -> float | None:
    """A whole trainer episode through the balancer: reset, the agent's edit, evaluate."""
    with HarborEnvClient(url, orchestration_token=TOKEN) as env:
        first = env.reset(task_id=TASK)
        assert first.observation.error is None, first.observation.error
        env.exec("cat answer.txt 2>/dev/null; true")
        env.write("answer.txt", "42\n")
        result = env.evaluate()
        assert result.done, result
        reward: float | None = result.reward
        return reward


def test_two_replicas_behind_haproxy_serve_sessions_and_drain(docker_client, tmp_path):
    env = {"HARBOR_OPENENV_MAX_SESSIONS": "6", "HARBOR_OPENENV_DRAIN_S": "120"}
    replicas: list[Server] = []
    balancer: HAProxy | None = None
    try:
        replicas = [Server(FIXTURE_TASKS, **env) for _ in range(2)]
        prefixes = [srv.owner_prefix for srv in replicas]
        assert prefixes[0] != prefixes[1]  # distinct owners on the one engine
        balancer = HAProxy(tmp_path, replicas)

        # 8 concurrent sessions through the balancer, each a whole episode.
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            rewards = list(pool.map(lambda _: _episode(balancer.url), range(8)))
        took = time.monotonic() - started
        wrong = [reward for reward in rewards if reward != 1.0]
        served = [_started(srv) for srv in replicas]
        print(f"\n8 sessions through HAProxy in {took:.1f} s: {served} per replica")
        assert wrong == [], rewards
        assert sum(served) == 8 and min(served) >= 1, served
        for prefix in prefixes:
            assert wait_until(lambda p=prefix: runtime_containers(docker_client, p) == [], 60)

        # A session mid-episode on one replica, then SIGTERM to that replica.
        with HarborEnvClient(balancer.url, orchestration_token=TOKEN) as running:
            assert running.reset(task_id=TASK).observation.error is None
            holding = [n for n, srv in enumerate(replicas) if _started(srv) > served[n]]
            assert len(holding) == 1, holding
            drained, other = replicas[holding[0]], replicas[1 - holding[0]]
            name = f"r{holding[0] + 1}"
            drained.process.send_signal(signal.SIGTERM)
            assert wait_until(lambda: balancer.states().get(name) == "DOWN", timeout=10)
            before = _started(drained), _started(other)

            # New sessions all reach the other replica while the drained one's episode runs.
            with ThreadPoolExecutor(4) as pool:
                late = list(pool.map(lambda _: _episode(balancer.url), range(4)))
            assert late == [1.0] * 4, late
            assert _started(drained) == before[0]
            assert _started(other) == before[1] + 4
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
    """kill -9 of the replica holding one of two sessions: that session's next action raises a
    clear error, the other replica's session scores 1.0, a retry through HAProxy lands on the
    live replica and scores 1.0, and a replica started again on the same engine removes the dead
    one's container."""
    replicas: list[Server] = []
    balancer: HAProxy | None = None
    restarted: Server | None = None
    try:
        replicas = [Server(FIXTURE_TASKS, HARBOR_OPENENV_MAX_SESSIONS="4") for _ in range(2)]
        balancer = HAProxy(tmp_path, replicas)
        with (
            HarborEnvClient(balancer.url, orchestration_token=TOKEN) as first,
            HarborEnvClient(balancer.url, orchestration_token=TOKEN) as second,
        ):
            assert first.reset(task_id=TASK).observation.error is None
            (held,) = [n for n, srv in enumerate(replicas) if _started(srv) == 1]
            assert second.reset(task_id=TASK).observation.error is None
            assert [_started(srv) for srv in replicas] == [1, 1]  # leastconn: one each
            dead, live = replicas[held], replicas[1 - held]
            dead_prefix = dead.owner_prefix
            assert len(runtime_containers(docker_client, dead_prefix)) == 1
            dead.stop(signal.SIGKILL)

            with pytest.raises(Exception) as failed:
                first.write("answer.txt", "42\n")
            print(f"\nthe killed replica's session: {type(failed.value).__name__}: {failed.value}")
            assert "closed" in str(failed.value).lower() or "connect" in str(failed.value).lower()
            second.write("answer.txt", "42\n")
            assert second.evaluate().reward == 1.0

        assert wait_until(lambda: balancer.states().get(f"r{held + 1}") == "DOWN", timeout=10)
        assert _episode(balancer.url) == 1.0  # the retry lands on the live replica
        assert _started(live) == 2
        # The killed replica's container outlives it, until a replica starts on its engine.
        assert len(runtime_containers(docker_client, dead_prefix)) == 1
        restarted = Server(FIXTURE_TASKS)
        assert wait_until(lambda: runtime_containers(docker_client, dead_prefix) == [], 60)
    finally:
        if balancer is not None:
            balancer.stop()
        for srv in [*replicas, *([restarted] if restarted else [])]:
            srv.stop()
