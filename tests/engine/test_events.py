"""The server logs one line per episode event and image build, as text or JSON lines."""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid

import docker
import pytest
from _server import FIXTURE_TASKS, Server, wait_until

from harbor_openenv import events
from harbor_openenv.client import HarborEnvClient

pytestmark = pytest.mark.docker


def task_needing_a_build(tmp_path):
    """edit-file with a Dockerfile no engine has built before (a fresh LABEL)."""
    tasks = tmp_path / "tasks"
    shutil.copytree(FIXTURE_TASKS / "edit-file", tasks / "edit-file")
    with (tasks / "edit-file" / "environment" / "Dockerfile").open("a") as handle:
        handle.write(f"LABEL harbor-openenv.test-nonce={uuid.uuid4().hex}\n")
    return tasks


def remove_image(tag: str) -> None:
    client = docker.from_env()
    try:
        client.images.remove(tag, force=True)
    finally:
        client.close()


def test_a_served_process_logs_builds_and_episodes(tmp_path):
    server = Server(task_needing_a_build(tmp_path))
    built = None
    try:
        with server.client() as env:
            reset = env.reset(task_id="edit-file")
            assert reset.observation.error is None, reset.observation.error
            env.write("answer.txt", "42\n")
            assert env.evaluate().reward == 1.0
        with HarborEnvClient(server.url) as env:  # no orchestration token
            env.reset(task_id="edit-file")
            assert env.evaluate().observation.error
        assert wait_until(
            lambda: server.output.count(" evaluate ") >= 1 and "error " in server.output
        )
    finally:
        server.stop()
        lines = server.output.splitlines()
        built = next((line for line in lines if " image built " in line), None)
        if built:
            remove_image(built.split("image=")[1].split()[0])
    text = server.output
    assert "Application startup complete" in text  # uvicorn's own lines are still there
    ours = [line for line in lines if " harbor_openenv: " in line]
    events_seen = [line.split(" harbor_openenv: ")[1].split(" task=")[0] for line in ours]
    assert events_seen[:2] == ["image build", "image build step"], ours
    assert "image built" in events_seen
    step = re.compile(
        r'image build step task=edit-file step=\d/\d instruction="LABEL harbor-openenv.t'
    )
    assert any(step.search(line) for line in ours), ours
    reset = next(line for line in ours if " harbor_openenv: reset task=edit-file image=" in line)
    assert "image=harbor-openenv/task:" in reset and " seconds=" in reset
    evaluate = next(line for line in ours if " harbor_openenv: evaluate task=edit-file" in line)
    assert "reward=1.0 " in evaluate and " seconds=" in evaluate
    refused = next(line for line in ours if "error action=evaluate task=edit-file" in line)
    assert " WARNING " in refused and "orchestration token" in refused


def test_json_lines(tmp_path):
    server = Server(FIXTURE_TASKS, HARBOR_OPENENV_LOG_FORMAT="json")
    try:
        with server.client() as env:
            env.reset(task_id="edit-file")
            env.solve()
            env.evaluate()
        assert wait_until(lambda: '"event": "evaluate"' in server.output)
    finally:
        server.stop()
    records = [json.loads(line) for line in server.output.splitlines() if line.startswith("{")]
    by_event = {record.get("event"): record for record in records}
    reset = by_event["reset"]
    assert (reset["level"], reset["logger"], reset["task"]) == (
        "info",
        "harbor_openenv",
        "edit-file",
    )
    assert reset["image"] and isinstance(reset["seconds"], float) and reset["time"].endswith("Z")
    assert by_event["evaluate"]["reward"] == 1.0
    assert isinstance(by_event["evaluate"]["seconds"], float)


def test_text_quoting_and_level():
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    events.log.addHandler(handler)
    try:
        events.event("error", logging.WARNING, task="a b", error='say "no"', gone=None, n=0.123456)
    finally:
        events.log.removeHandler(handler)
    (record,) = records
    assert record.getMessage() == 'error task="a b" error="say \\"no\\"" n=0.123'
    assert record.levelno == logging.WARNING
    assert record.harbor_fields == {"task": "a b", "error": 'say "no"', "n": 0.123456}


def test_every_json_line_names_its_event():
    """A line that is only a message (the first a server logs may be one) has ``event: log``."""
    record = logging.LogRecord(
        "harbor_openenv", logging.INFO, __file__, 1, "hello %s", ("x",), None
    )
    line = json.loads(events.JsonFormatter().format(record))
    assert (line["event"], line["message"]) == ("log", "hello x")
