"""Several engines without Docker (backends/fleet.py): where episodes go (least busy first, ties
in the listed order, only engines that are up), an engine that fails taken out and brought back
by the prober, and a server's episodes on fake engines: the one whose engine dies ends with an
error naming it (no reward), new resets go to the others, none up fails the reset in one line.
Against real engines: tests/deploy/test_engines.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _fake_sandbox import FakeSandbox
from _memory_backend import MemoryBackend

from harbor_openenv.backends.fleet import (
    Engine,
    EngineSet,
    display_name,
    engine_environ,
    short_reason,
)
from harbor_openenv.backends.several import OnEngine, SeveralEngines
from harbor_openenv.config import Settings
from harbor_openenv.episode.runtime import Runtime
from harbor_openenv.images.pins import Pins
from harbor_openenv.sandbox import ExecResult, SandboxError
from harbor_openenv.sandbox.compose import ComposeSandbox
from harbor_openenv.sandbox.spec import ComposeSpec, ContainerSpec
from harbor_openenv.server.environment import HarborEnvironment
from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.task import Task

from .test_episode import FIXTURES, TOKEN, act

URLS = ["tcp://a:2376", "tcp://b:2376", "ssh://c"]
VARIABLE = "HARBOR_OPENENV_DOCKER_HOSTS"


class Fleet:
    """Fake engines by URL: ``alive`` ones connect and answer pings."""

    def __init__(self, urls: list[str]) -> None:
        self.alive = set(urls)
        self.connects: list[str] = []

    def connect(self, url: str) -> str:
        self.connects.append(url)
        if url not in self.alive:
            raise ConnectionRefusedError(f"{url}: connection refused")
        return url  # the "client" is its URL

    def ping(self, client: str) -> None:
        if client not in self.alive:
            raise ConnectionResetError("connection reset by peer")


def _set(fleet: Fleet, urls: list[str] = URLS, make: Any = None) -> EngineSet[Any]:
    return EngineSet(
        urls,
        connect=fleet.connect,
        ping=fleet.ping,
        make=make or (lambda engine: f"parts of {engine.url}"),
        probe_s=3600,  # probed by hand here
    )


def test_episodes_go_to_the_least_busy_engine_ties_in_listed_order():
    engines = _set(Fleet(URLS))
    leases = [engines.lease() for _ in range(4)]
    assert [lease.engine.url for lease in leases] == [URLS[0], URLS[1], URLS[2], URLS[0]]
    leases[1].release()
    leases[1].release()  # once only
    assert engines.lease().engine.url == URLS[1]
    assert [s.episodes for s in engines.statuses()] == [2, 1, 1]
    assert leases[0].engine.parts == f"parts of {URLS[0]}"


def test_an_engine_that_fails_is_taken_out_its_episodes_lost_and_probed_back():
    fleet = Fleet(URLS)
    engines = _set(fleet)
    first, second = engines.lease(), engines.lease()
    fleet.alive.discard(URLS[0])
    assert first.lost() is None  # not noticed yet
    lost = first.lost(check=True)
    assert lost is not None and lost.startswith(f"the Docker engine {URLS[0]} went down (")
    assert "connection reset by peer" in lost and "this episode has ended" in lost
    assert second.lost(check=True) is None
    third, fourth = engines.lease(), engines.lease()
    assert (third.engine.url, fourth.engine.url) == (URLS[2], URLS[1])  # b held one already
    assert [s.up for s in engines.statuses()] == [False, True, True]
    first.release()  # its episode's next step ended it
    engines.probe()  # still down
    assert engines.statuses()[0].up is False
    fleet.alive.add(URLS[0])
    engines.probe()
    assert engines.statuses()[0] == engines.statuses()[0].__class__(URLS[0], True, 0, None)
    # An episode from before the failure stays ended although its engine is back.
    assert "it failed and came back since" in (first.lost() or "")
    assert engines.lease().engine.url == URLS[0]  # the least busy again
    assert [s.episodes for s in engines.statuses()] == [1, 2, 1]


def test_the_prober_takes_out_an_idle_engine_that_stops_answering():
    fleet = Fleet(URLS)
    engines = _set(fleet)
    engines.lease().release()  # connects URLS[0]
    fleet.alive.discard(URLS[0])
    engines.probe()
    status = engines.statuses()[0]
    assert (status.up, status.error) == (False, "connection reset by peer")


def test_an_engine_that_cannot_connect_is_skipped_and_none_up_is_one_line():
    fleet = Fleet(URLS)
    fleet.alive = {URLS[2]}
    engines = _set(fleet)
    assert engines.lease().engine.url == URLS[2]
    assert fleet.connects == URLS
    fleet.alive.clear()
    engines.probe()
    with pytest.raises(SandboxError) as caught:
        engines.lease()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("no Docker engine is up (HARBOR_OPENENV_DOCKER_HOSTS): ")
    assert all(url in message for url in URLS)


def test_a_pinned_lease_refuses_a_down_engine_by_name():
    fleet = Fleet(URLS)
    engines = _set(fleet)
    held = engines.lease()
    fleet.alive.discard(URLS[0])
    engines.probe()
    with pytest.raises(SandboxError, match=f"the Docker engine {URLS[0]} is down"):
        engines.lease(held.engine)


def test_run_moves_on_when_the_engine_fails_but_not_when_the_work_does():
    fleet = Fleet(URLS)
    engines = _set(fleet)
    tried: list[str] = []

    def work(engine: Engine[Any]) -> str:
        tried.append(engine.url)
        if engine.url == URLS[0]:
            fleet.alive.discard(URLS[0])  # the engine dies during the start
            raise SandboxError("start failed: connection refused")
        return "started"

    lease, result = engines.run(work)
    assert (lease.engine.url, result, tried) == (URLS[1], "started", URLS[:2])
    assert [s.episodes for s in engines.statuses()] == [0, 1, 0]

    def broken(engine: Engine[Any]) -> str:
        raise SandboxError("the task's image does not build")

    with pytest.raises(SandboxError, match="does not build"):
        engines.run(broken)  # the engine answers: the task's failure, not tried elsewhere
    assert [s.episodes for s in engines.statuses()] == [0, 1, 0]


def test_urls_are_checked_and_each_engine_gets_its_own_docker_settings():
    hosts = Settings.from_env({VARIABLE: " unix:///a.sock, tcp://b:2376 ,"}).docker_hosts
    assert hosts == ("unix:///a.sock", "tcp://b:2376")
    for bad, said in (
        (",", "names nothing"),
        ("http://x", "not a unix://"),
        ("ssh://a,ssh://a", "more than once"),
    ):
        with pytest.raises(ValueError, match=f"{VARIABLE}='.*' .*{said}"):
            Settings.from_env({VARIABLE: bad})
    tls = {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": "/certs", "DOCKER_HOST": "unix:///x"}
    assert engine_environ("tcp://b:2376", tls) == {
        "DOCKER_HOST": "tcp://b:2376",
        **{k: tls[k] for k in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")},
    }
    assert engine_environ("ssh://me@c", tls) == {"DOCKER_HOST": "ssh://me@c"}
    assert display_name("ssh://me:secret@c:22") == "ssh://me@c:22"
    urllib3 = (
        "HTTPSConnectionPool(host='127.0.0.1', port=1): Max retries exceeded with url: /_ping"
        " (Caused by NewConnectionError(\"HTTPSConnection(host='127.0.0.1', port=1): Failed to"
        ' establish a new connection: [Errno 111] Connection refused"))'
    )
    assert short_reason(ConnectionError(urllib3)) == "[Errno 111] Connection refused"
    assert short_reason(TimeoutError("x: Read timed out. (read timeout=5)")) == "Read timed out"
    assert short_reason(RuntimeError("first\nsecond")) == "first"


def test_a_compose_task_on_an_ssh_engine_without_the_ssh_client_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no ssh on it
    compose = ComposeSpec(tmp_path / "docker-compose.yaml")
    with pytest.raises(SandboxError, match="needs OpenSSH's ssh client on this server's PATH"):
        ComposeSandbox.start_project(
            None,  # type: ignore[arg-type]  # never reached
            ContainerSpec("img"),
            compose,
            task_id="t",
            owner="o",
            helper_volume="v",
            engine_env={"DOCKER_HOST": "ssh://me@far"},
        )


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({VARIABLE: "tcp://a:2376", "HARBOR_OPENENV_POOL_SIZE": "1"}, "the warm pool keeps one"),
        ({VARIABLE: "http://a"}, "is not a unix://, tcp:// or ssh:// engine URL"),
        ({VARIABLE: "tcp://a", "HARBOR_OPENENV_BACKEND": "harbor:docker"}, "names Docker engines"),
    ],
)
def test_a_server_refuses_engines_it_cannot_use_at_start_up(settings, said):
    with pytest.raises(ValueError, match=said):
        Runtime(FIXTURES / "tasks", Settings.from_env(settings))


class _Dying(FakeSandbox):
    """A sandbox whose exec raises once its fake engine is dead."""

    def __init__(self, fleet: Fleet, url: str, workdir: str) -> None:
        super().__init__(workdir)
        self.fleet, self.url = fleet, url

    def exec(self, command: str, **options: Any) -> ExecResult:
        if self.url not in self.fleet.alive:
            raise SandboxError("exec failed: connection refused")
        return super().exec(command, **options)


class _Images:
    def resolve(self, task: Task) -> str:
        return f"fake/{task.id}"


class _EngineBackend(MemoryBackend):
    def __init__(self, fleet: Fleet, url: str) -> None:
        super().__init__()
        self.fleet, self.url = fleet, url

    def start(self, spec: ContainerSpec, **_: Any) -> Any:
        sandbox = _Dying(self.fleet, self.url, spec.workdir or "/work")
        self.sandboxes.append(sandbox)
        return sandbox


@pytest.fixture
def fleet_runtime(tmp_path: Path) -> Any:
    fleet = Fleet(URLS[:2])
    backends: dict[str, _EngineBackend] = {}

    def make(engine: Engine[OnEngine]) -> OnEngine:
        backends[engine.url] = _EngineBackend(fleet, engine.url)
        return OnEngine(_Images(), backends[engine.url])  # type: ignore[arg-type]

    pins = Pins(Dataset(FIXTURES / "tasks"))
    several = SeveralEngines(_set(fleet, URLS[:2], make), pins, owner="unit-test")
    runtime = Runtime(FIXTURES / "tasks", Settings(orchestration_token=TOKEN), backend=several)
    yield runtime, fleet, backends
    runtime.shutdown()


def test_a_servers_episodes_spread_and_the_one_on_a_dead_engine_ends_naming_it(fleet_runtime):
    runtime, fleet, backends = fleet_runtime
    first, second = HarborEnvironment(runtime), HarborEnvironment(runtime)
    assert first.reset(task_id="edit-file").error is None
    assert second.reset(task_id="edit-file").error is None
    assert [len(backends[url].sandboxes) for url in URLS[:2]] == [1, 1]
    fleet.alive.discard(URLS[0])
    obs = act(first, "exec", command="echo hi")
    assert obs.done and obs.reward is None
    assert obs.error.startswith(f"the Docker engine {URLS[0]} went down (")
    assert act(first, "exec", command="echo hi").error == "the episode has ended: call reset first"
    assert act(second, "exec", command="echo hi").output == "hi\n"  # the other engine's
    assert act(second, "evaluate", token=TOKEN).reward == 0.0  # graded as ever
    third = HarborEnvironment(runtime)
    assert third.reset(task_id="edit-file").error is None
    assert len(backends[URLS[1]].sandboxes) == 2
    assert [(s.up, s.episodes) for s in runtime.snapshot().engines] == [(False, 0), (True, 1)]
    assert runtime.not_ready() is None
    fleet.alive.clear()
    runtime.backend.engines.probe()
    refused = HarborEnvironment(runtime).reset(task_id="edit-file")
    assert refused.done and refused.error.startswith("no Docker engine is up")
    assert runtime.not_ready().startswith("no Docker engine is up")
    scrape = runtime.metrics.scrape().decode()
    assert "harbor_openenv_ready 0.0" in scrape
    assert f'harbor_openenv_engine_up{{engine="{URLS[1]}"}} 0.0' in scrape
    obs = act(third, "evaluate", token=TOKEN)
    assert (obs.done, obs.reward) == (True, None)
    assert obs.error.startswith(f"the Docker engine {URLS[1]} went down (")
