"""Past one machine, proven on this one: three "nodes", each a Docker engine of its own
(tests/support/_engines.py: a ``dockerd`` with its own data root, exec root, containerd and
socket) with one server replica beside it, behind a real HAProxy (tests/support/_balancer.py),
every replica pulling the task's image by digest from a real registry
(tests/support/_registry.py) through ``images.lock``.

The module starts all of it once (and always stops it): the registry, ``images push`` of a
one-task dataset built on the machine's own engine, three fresh engines, a replica per engine
(``DOCKER_HOST`` its engine's socket, a fixed port so a restarted replica keeps its place behind
the balancer), HAProxy. Then:

- 24 concurrent trainer sessions, each a whole episode with the agent's edit: all score 1.0 and
  every replica served some; each engine had no image before, pulled the locked digest and never
  built; no container is left on any engine;
- SIGTERM to one replica mid-episode: its running episodes finish with 1.0, no new session
  reaches it, it exits within its grace period with nothing left on its engine;
- kill -9 of one replica mid-run: only its sessions fail, each with a closed connection; their
  retries land on the others; the replica started again on its engine removes the dead one's
  containers.

Run with ``-s`` for the figures. The engines' folders are fresh temp folders, removed after, so
every run pushes and pulls the whole image (the 292 MB stand-in base included) over loopback:
about 8 s for a first reset in bench/scale_out.py, part of the file's 51-134 s on this machine.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import docker.errors
import pytest
from _balancer import TASK, HAProxy, episodes_started
from _engines import Engine, EngineError, engines
from _registry import RegistryError, env_repo, remove_ours, serve_registry
from _serve import run_cli
from _server import TOKEN, Server, runtime_containers, wait_until

from harbor_openenv import HarborEnvClient
from harbor_openenv.client.launch import free_port
from harbor_openenv.images.lock import LOCK_NAME, read_lock

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

REPLICAS = 3
GRACE_S = 60
REPLICA_ENV = {"HARBOR_OPENENV_MAX_SESSIONS": "12", "HARBOR_OPENENV_DRAIN_S": str(GRACE_S)}


class Cluster:
    """The engines, a replica on each (index n on ``engines[n]`` at ``ports[n]``), the balancer."""

    def __init__(self, nodes: list[Engine], tasks: Path, folder: Path) -> None:
        self.engines = nodes
        self.tasks = tasks
        self.folder = folder
        self.ports = [free_port() for _ in nodes]
        self.replicas: list[Server | None] = [None] * len(nodes)
        self.balancer: HAProxy | None = None
        self.starts = 0

    def start(self, n: int) -> Server:
        """Replica ``n`` on its engine and port (a replica there before must have exited)."""
        self.starts += 1
        self.replicas[n] = Server(
            self.tasks,
            port=self.ports[n],
            log=self.folder / f"replica-r{n + 1}-{self.starts}.log",
            DOCKER_HOST=self.engines[n].host,
            **REPLICA_ENV,
        )
        return self.replicas[n]

    def replica(self, n: int) -> Server:
        server = self.replicas[n]
        assert server is not None
        return server

    def ensure_running(self) -> HAProxy:
        """Every replica running (started again where one exited) and UP at the balancer."""
        down = [n for n, s in enumerate(self.replicas) if s is None or s.process.poll() is not None]
        with ThreadPoolExecutor(REPLICAS) as pool:
            list(pool.map(self.start, down))
        if self.balancer is None:
            self.balancer = HAProxy(self.folder, self.ports)
        assert self.balancer.wait_up(), self.balancer.states()
        return self.balancer

    def started(self) -> list[float]:
        return [episodes_started(self.replica(n).url) for n in range(len(self.engines))]

    def stop(self) -> None:
        if self.balancer is not None:
            self.balancer.stop()
        with ThreadPoolExecutor(REPLICAS) as pool:
            list(pool.map(lambda srv: srv and srv.stop(timeout=GRACE_S + 10), self.replicas))


@dataclass
class Pool:
    cluster: Cluster
    image: str  # the locked digest reference
    source: str  # the tag a build would have made
    images_before: list[list[str]]


@pytest.fixture(scope="module")
def cluster(docker_client, tmp_path_factory) -> Iterator[Pool]:
    folder = tmp_path_factory.mktemp("scale-out")
    repo = env_repo(folder, TASK)
    with contextlib.ExitStack() as stack:
        try:
            registry = stack.enter_context(serve_registry(folder))
            stack.callback(remove_ours, docker_client)
            pushed = run_cli("images", "push", repo, "--registry", f"{registry}/scale-out")
            assert pushed.returncode == 0, pushed
            nodes = stack.enter_context(engines(REPLICAS, logs=folder))
        except (RegistryError, EngineError) as exc:
            pytest.fail(str(exc))
        locked = read_lock(repo / LOCK_NAME)[TASK]
        before = [[str(i.id) for i in engine.client.images.list(all=True)] for engine in nodes]
        cluster = Cluster(nodes, repo / "tasks", folder)
        stack.callback(cluster.stop)
        cluster.ensure_running()
        yield Pool(cluster, locked.image, locked.source, before)


def _outcome(url: str) -> float | str | None:
    """A whole trainer episode's reward (reset, the agent's edit, evaluate), or what ended it
    otherwise: the error raised, or evaluate's observation."""
    try:
        with HarborEnvClient(url, orchestration_token=TOKEN) as env:
            reset = env.reset(task_id=TASK)
            if reset.observation.error is not None:
                return f"reset: {reset.observation.error}"
            env.exec("cat answer.txt 2>/dev/null; true")
            env.write("answer.txt", "42\n")
            result = env.evaluate()
            if result.reward != 1.0 or not result.done:
                return f"evaluate: {result}"
            return result.reward
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _no_containers(engine: Engine, prefix: str | None = None) -> bool:
    return wait_until(lambda: runtime_containers(engine.client, prefix) == [], timeout=60)


@dataclass
class Session:
    env: HarborEnvClient
    replica: int


def _open_sessions(stack: contextlib.ExitStack, cluster: Cluster, count: int) -> list[Session]:
    """``count`` sessions through the balancer, reset one after the other, with the replica
    each reached (from the replicas' own counts of started episodes)."""
    balancer = cluster.ensure_running()
    sessions = []
    for _ in range(count):
        before = cluster.started()
        env = stack.enter_context(HarborEnvClient(balancer.url, orchestration_token=TOKEN))
        reset = env.reset(task_id=TASK)
        assert reset.observation.error is None, reset.observation.error
        after = cluster.started()
        (reached,) = [n for n in range(len(after)) if after[n] > before[n]]
        sessions.append(Session(env, reached))
    return sessions


def _finish(session: Session) -> float | str | None:
    """The agent's edit and evaluate on an open session: the reward, or the error."""
    try:
        written = session.env.write("answer.txt", "42\n")
        if written.observation.error is not None:
            return f"write: {written.observation.error}"
        result = session.env.evaluate()
        if result.reward != 1.0 or not result.done:
            return f"evaluate: {result}"
        reward: float = result.reward
        return reward
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def test_24_sessions_spread_over_three_replicas_that_pull_and_never_build(cluster):
    cl = cluster.cluster
    assert cluster.images_before == [[]] * REPLICAS  # fresh engines: no image of the task
    balancer = cl.ensure_running()
    before = cl.started()
    started = time.monotonic()
    with ThreadPoolExecutor(24) as pool:
        outcomes = list(pool.map(lambda _: _outcome(balancer.url), range(24)))
    took = time.monotonic() - started
    served = [after - first for after, first in zip(cl.started(), before, strict=True)]
    print(f"\n24 sessions through HAProxy over 3 engines in {took:.1f} s: {served} per replica")
    assert outcomes == [1.0] * 24, [o for o in outcomes if o != 1.0]
    assert sum(served) == 24 and min(served) >= 1, served

    for n, engine in enumerate(cl.engines):
        output = cl.replica(n).output
        assert f"image pull task={TASK} image={cluster.image}" in output, output
        assert "image build" not in output, output
        (image,) = engine.client.images.list(all=True)  # the pulled one, nothing built
        assert image.attrs["RepoDigests"] == [cluster.image], image.attrs
        with pytest.raises(docker.errors.ImageNotFound):
            engine.client.images.get(cluster.source)
    for engine in cl.engines:
        assert _no_containers(engine), runtime_containers(engine.client)


def test_sigterm_drains_one_replica_while_the_others_serve(cluster):
    cl = cluster.cluster
    with contextlib.ExitStack() as stack:
        sessions = _open_sessions(stack, cl, REPLICAS)  # leastconn: one on each
        assert sorted(s.replica for s in sessions) == list(range(REPLICAS)), sessions
        drained = sessions[0].replica
        server, name = cl.replica(drained), f"r{drained + 1}"
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert wait_until(lambda: cl.balancer.states().get(name) == "DOWN", timeout=10)
        before = cl.started()

        with ThreadPoolExecutor(6) as pool:  # new sessions while the drained one's episode runs
            late = list(pool.map(lambda _: _outcome(cl.balancer.url), range(6)))
        assert late == [1.0] * 6, late
        after = cl.started()
        assert after[drained] == before[drained]  # no new session reached it
        assert sum(after) == sum(before) + 6
        assert server.process.poll() is None  # still draining

        assert [_finish(s) for s in sessions] == [1.0] * REPLICAS
    server.process.wait(timeout=GRACE_S)
    took = time.monotonic() - signalled
    print(f"\nthe drained replica exited {took:.1f} s after SIGTERM (grace {GRACE_S} s)")
    assert took < GRACE_S
    # uvicorn ends by raising the signal it stopped for again: -15 is its clean SIGTERM exit.
    assert server.process.returncode in (0, -signal.SIGTERM), server.output
    assert "drained episodes=0" in server.output, server.output
    assert _no_containers(cl.engines[drained]), runtime_containers(cl.engines[drained].client)


def test_a_replica_killed_with_9_fails_only_its_sessions(cluster):
    cl = cluster.cluster
    with contextlib.ExitStack() as stack:
        sessions = _open_sessions(stack, cl, 2 * REPLICAS)  # leastconn: two on each
        dead = sessions[0].replica
        engine, server = cl.engines[dead], cl.replica(dead)
        prefix = server.owner_prefix
        mine = [s for s in sessions if s.replica == dead]
        assert len(mine) == 2 and len(runtime_containers(engine.client, prefix)) == 2
        server.stop(signal.SIGKILL)
        live = [n for n in range(REPLICAS) if n != dead]
        counts = [episodes_started(cl.replica(n).url) for n in live]

        with ThreadPoolExecutor(len(sessions)) as pool:
            outcomes = list(pool.map(_finish, sessions))
        for session, outcome in zip(sessions, outcomes, strict=True):
            if session.replica == dead:
                print(f"\na session of the killed replica: {outcome}")
                # OpenEnv's client reconnects once it sees its socket closed: the balancer gives
                # it a new session elsewhere, which says the episode is lost. One that has not
                # seen the close yet raises it.
                assert isinstance(outcome, str), outcome
                assert "reconnected" in outcome or "ConnectionClosed" in outcome, outcome
            else:
                assert outcome == 1.0, outcome

    # Retried through the balancer: they land on the others.
    with ThreadPoolExecutor(len(mine)) as pool:
        retries = list(pool.map(lambda _: _outcome(cl.balancer.url), mine))
    assert retries == [1.0] * len(mine), retries
    assert sum(episodes_started(cl.replica(n).url) for n in live) == sum(counts) + len(mine)

    # The killed replica's containers outlive it, until a replica starts on its engine.
    assert len(runtime_containers(engine.client, prefix)) == 2
    cl.start(dead)
    assert _no_containers(engine, prefix), runtime_containers(engine.client)
    assert cl.ensure_running()
