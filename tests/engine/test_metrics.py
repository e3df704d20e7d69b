"""/metrics against a real server and engine: Prometheus' text format, parsed by
prometheus_client's own parser; the counts follow real episodes (started, ended by outcome), the
action histograms count each reset, exec and evaluate, an image build of a task never built before
is timed, and the gauges (sessions, episodes, capacity, utilization, readiness, the engine's
containers of this server) read what is running at the scrape."""

from __future__ import annotations

import json
import shutil
import uuid

import httpx
import pytest
from _server import FIXTURE_TASKS, TOKEN, Server, runtime_containers, wait_until
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

pytestmark = pytest.mark.docker


def _ws(srv: Server):
    return connect(srv.url.replace("http", "ws") + "/ws", max_size=None, open_timeout=30)


def _send(ws, kind: str, data: dict) -> dict:
    ws.send(json.dumps({"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=300))


def _step(ws, **action) -> dict:
    return _send(ws, "step", action)["data"]


def _scrape(srv: Server) -> dict[tuple[str, tuple], float]:
    response = httpx.get(srv.url + "/metrics", timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain"), response.headers
    samples: dict[tuple[str, tuple], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _get(samples, name: str, **labels: str) -> float:
    return samples[("harbor_openenv_" + name, tuple(sorted(labels.items())))]


@pytest.fixture
def tasks(tmp_path):
    """The fixture tasks plus a copy of edit-file whose Dockerfile no engine has built."""
    root = tmp_path / "tasks"
    for name in ("edit-file", "no-reward"):
        shutil.copytree(FIXTURE_TASKS / name, root / name)
    fresh = root / "fresh-image"
    shutil.copytree(FIXTURE_TASKS / "edit-file", fresh)
    with (fresh / "environment" / "Dockerfile").open("a") as dockerfile:
        dockerfile.write(f"LABEL harbor-openenv.test-metrics={uuid.uuid4().hex}\n")
    return root


def test_metrics_follow_real_episodes(docker_client, tasks):
    try:
        _episodes(docker_client, tasks)
    finally:
        for image in docker_client.images.list(filters={"label": "harbor-openenv.test-metrics"}):
            docker_client.images.remove(image.id, force=True)


def _episodes(docker_client, tasks) -> None:
    with Server(tasks, HARBOR_OPENENV_MAX_SESSIONS="4") as srv:
        prefix = srv.owner_prefix
        start = _scrape(srv)
        assert _get(start, "sessions_capacity") == 4
        assert _get(start, "sessions_active") == 0
        assert _get(start, "episodes_running") == 0
        assert _get(start, "sessions_utilization") == 0
        assert _get(start, "ready") == 1
        assert _get(start, "draining") == 0
        assert _get(start, "containers_running") == 0
        assert _get(start, "episodes_started_total") == 0
        for outcome in ("reward", "error", "timeout", "reaped"):
            assert _get(start, "episodes_ended_total", outcome=outcome) == 0

        # 1: the agent's edit scores 1.0, on an image built for this test (timed).
        with _ws(srv) as ws:
            reset = _send(ws, "reset", {"task_id": "fresh-image"})
            assert reset["data"]["observation"]["error"] is None, reset
            assert _step(ws, action_type="exec", command="true")["observation"]["exit_code"] == 0
            running = _scrape(srv)
            assert _get(running, "sessions_active") == 1
            assert _get(running, "episodes_running") == 1
            assert _get(running, "sessions_utilization") == 0.25
            assert _get(running, "containers_running") == 1
            assert len(runtime_containers(docker_client, prefix)) == 1
            _step(ws, action_type="write", path="answer.txt", content="42")
            assert _step(ws, action_type="evaluate", token=TOKEN)["reward"] == 1.0
            # 2: a no-op episode in the same session scores 0.0 (a reward all the same).
            _send(ws, "reset", {"task_id": "edit-file"})
            _step(ws, action_type="exec", command="ls")
            assert _step(ws, action_type="evaluate", token=TOKEN)["reward"] == 0.0
        # 3: a verifier that writes no reward: outcome error.
        with _ws(srv) as ws:
            _send(ws, "reset", {"task_id": "no-reward"})
            graded = _step(ws, action_type="evaluate", token=TOKEN)
            assert graded["reward"] is None and graded["done"] is True
        # 4: a client that leaves mid-episode: reaped.
        with _ws(srv) as ws:
            _send(ws, "reset", {"task_id": "edit-file"})
            _step(ws, action_type="exec", command="echo left")
        # 5: a reset the server refuses (no such task).
        with _ws(srv) as ws:
            refused = _send(ws, "reset", {"task_id": "no-such-task"})
            assert refused["data"]["observation"]["error"], refused

        assert wait_until(lambda: _get(_scrape(srv), "episodes_running") == 0, timeout=60)
        end = _scrape(srv)
        assert _get(end, "episodes_started_total") == 4
        assert _get(end, "episodes_ended_total", outcome="reward") == 2
        assert _get(end, "episodes_ended_total", outcome="error") == 1
        assert _get(end, "episodes_ended_total", outcome="reaped") == 1
        assert _get(end, "episodes_ended_total", outcome="timeout") == 0
        assert _get(end, "reset_errors_total") == 1
        assert _get(end, "action_seconds_count", action="reset") == 5
        assert _get(end, "action_seconds_count", action="exec") == 3
        assert _get(end, "action_seconds_count", action="write") == 1
        assert _get(end, "action_seconds_count", action="evaluate") == 3
        assert _get(end, "action_seconds_sum", action="evaluate") > 0
        # The fresh image was built once, and took time; the fixtures' images may be cached.
        assert _get(end, "image_seconds_count", operation="build", outcome="ok") >= 1
        assert _get(end, "image_seconds_sum", operation="build", outcome="ok") > 0
        assert _get(end, "sessions_active") == 0
        assert _get(end, "containers_running") == 0
        assert _get(end, "ready") == 1
        assert "harbor_openenv_sessions_utilization" in httpx.get(srv.url + "/metrics").text
