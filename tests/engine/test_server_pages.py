"""What a person or a client sees of a served environment beyond the episode API: the API docs
work offline, a session refused at the limit reads as the docs say, the web page is named after
the environment (the newcomer's road, round three)."""

from __future__ import annotations

import json
import re
import shutil

import httpx
import pytest
from _server import FIXTURE_TASKS, Server
from websockets.sync.client import connect

pytestmark = pytest.mark.docker


def test_the_api_docs_load_nothing_from_outside():
    """/docs and /redoc were blank offline: FastAPI's pages load Swagger UI from a CDN."""
    with Server(FIXTURE_TASKS) as srv, httpx.Client(base_url=srv.url, timeout=30) as web:
        for page in ("/docs", "/redoc"):
            html = web.get(page)
            assert html.status_code == 200, page
            sources = re.findall(r'(?:src|href)="([^"]+)"', html.text)
            assert sources, html.text
            assert all(src.startswith("/") for src in sources), (page, sources)
            for src in sources:
                if src.endswith((".js", ".css")):
                    asset = web.get(src)
                    assert asset.status_code == 200 and len(asset.content) > 10_000, src
        assert web.get("/openapi.json").json()["paths"]


def test_a_session_over_the_limit_reads_as_the_readme_says():
    """OpenEnv's own CAPACITY_REACHED text is replaced by README's message (its code stays)."""
    with Server(FIXTURE_TASKS, HARBOR_OPENENV_MAX_SESSIONS="1") as srv:
        url = srv.url.replace("http", "ws") + "/ws"
        with connect(url, open_timeout=30) as first, connect(url, open_timeout=30) as second:
            first.send(json.dumps({"type": "reset", "data": {"task_id": "edit-file"}}))
            assert json.loads(first.recv(timeout=300))["type"] == "observation"
            answer = json.loads(second.recv(timeout=300))  # said at once, then closed
    assert answer["type"] == "error" and answer["data"]["code"] == "CAPACITY_REACHED", answer
    assert answer["data"]["message"].startswith("the server is at its limit of 1 sessions"), answer


def test_the_web_page_is_titled_after_the_environment(tmp_path):
    """The web page said "Harbor Openenv"; it takes openenv.yaml's name."""
    (tmp_path / "openenv.yaml").write_text("spec_version: 1\nname: my-fine-env\n")
    shutil.copytree(FIXTURE_TASKS / "edit-file", tmp_path / "tasks" / "edit-file")
    with Server(tmp_path / "tasks", ENABLE_WEB_INTERFACE="true") as srv:
        config = httpx.get(srv.url + "/web/config", timeout=60)  # Gradio's page, as JSON
    assert config.status_code == 200
    assert config.json()["title"] == "my-fine-env", config.json()["title"]
