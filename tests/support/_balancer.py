"""HAProxy in front of replicas, for the tests and benchmarks: Debian's haproxy (installed by
.ci/balancer.sh), run on 127.0.0.1 with its own config: ``balance leastconn`` (each WebSocket is
one session), ``option httpchk GET /ready`` every 300 ms, and ``retries`` with ``option
redispatch``: a connection a replica refuses (killed, not yet marked down) is tried again on
another replica. Also what a trainer does through it: a whole episode, and a replica's count of
started episodes read from its own ``/metrics``."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
from pathlib import Path

import httpx
from _server import TOKEN, wait_until
from prometheus_client.parser import text_string_to_metric_families

from harbor_openenv import HarborEnvClient
from harbor_openenv.client.launch import free_port, stop_process

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TASK = "edit-file"


def haproxy_config(front: int, stats: int, ports: list[int]) -> str:
    """The balancer's config: replicas ``r1``... on 127.0.0.1 at ``ports``."""
    servers = "\n".join(f"  server r{n} 127.0.0.1:{port}" for n, port in enumerate(ports, 1))
    return f"""global
  maxconn 512

defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  timeout tunnel 1h
  retries 3
  option redispatch 1

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
    """HAProxy balancing over the replicas at ``ports``, started with all of them UP."""

    def __init__(self, folder: Path, ports: list[int], *, timeout: float = 30) -> None:
        if not Path(HAPROXY).exists():
            raise RuntimeError("haproxy is not installed: run .ci/balancer.sh")
        self.front, self.stats = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.front}"
        config = folder / "haproxy.cfg"
        config.write_text(haproxy_config(self.front, self.stats, ports))
        check = subprocess.run([HAPROXY, "-c", "-f", str(config)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = folder / "haproxy.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [HAPROXY, "-W", "-db", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT
            )
        self.names = [f"r{n}" for n in range(1, len(ports) + 1)]
        if not self.wait_up(timeout=timeout):
            states = self.states()
            self.stop()
            raise RuntimeError(f"replicas not UP: {states}\n{self.log.read_text()}")

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

    def wait_up(self, timeout: float = 30) -> bool:
        """True once every replica is UP."""
        return wait_until(lambda: self.states() == dict.fromkeys(self.names, "UP"), timeout)

    def stop(self) -> None:
        stop_process(self.process, timeout=30)


def episodes_started(url: str) -> float:
    """A replica's episodes started so far, from its own /metrics (directly, not balanced)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "harbor_openenv_episodes_started_total":
                return sample.value
    raise AssertionError(text)


def trainer_episode(url: str) -> float | None:
    """A whole trainer episode at ``url``: reset, the agent's edit, evaluate; the reward."""
    with HarborEnvClient(url, orchestration_token=TOKEN) as env:
        first = env.reset(task_id=TASK)
        assert first.observation.error is None, first.observation.error
        env.exec("cat answer.txt 2>/dev/null; true")
        env.write("answer.txt", "42\n")
        result = env.evaluate()
        assert result.done, result
        reward: float | None = result.reward
        return reward
