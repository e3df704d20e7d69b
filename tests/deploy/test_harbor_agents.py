"""The recorded table of Harbor's agents (harness/harbor_agents.json) is what the installed Harbor
0.25 runs: scripts/harbor-agents.py, run in Harbor's venv, prints it again byte for byte, so a
Harbor upgrade that changes an agent's commands, flags or environment fails here."""

from __future__ import annotations

import json
import os
import subprocess

from _interop import HARBOR_VENV
from _server import ROOT

TABLE = ROOT / "runtime" / "src" / "harbor_openenv" / "harness" / "harbor_agents.json"


def test_the_committed_table_is_what_harbor_runs(tmp_path):
    # A home of its own: no ~/.gemini/oauth_creds.json or other login on this machine changes
    # what an agent runs.
    printed = subprocess.run(
        [str(HARBOR_VENV / "bin" / "python"), str(ROOT / "scripts" / "harbor-agents.py")],
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    assert printed == TABLE.read_text(), "regenerate it: see scripts/harbor-agents.py"
    table = json.loads(printed)
    assert table["harbor"].startswith("0.25.")
    from harbor_openenv.harness.cache import BUILDS

    runtimes = {build.runtime for build in BUILDS.values() if build.runtime}
    assert set(table["agents"]) == set(BUILDS) - runtimes  # every cached harness is recorded


def test_opencode_is_given_an_openai_chat_provider_at_the_placeholder_url():
    table = json.loads(TABLE.read_text())
    placeholders = table["placeholders"]
    config, run = table["agents"]["opencode"]
    written = json.loads(config["command"].split("echo '", 1)[1].rsplit("' >", 1)[0])
    provider = written["provider"]["vllm"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {
        "baseURL": placeholders["base_url"],
        "apiKey": "{env:OPENAI_API_KEY}",
    }
    assert run["env"]["OPENAI_API_KEY"] == placeholders["api_key"]
    assert f"opencode --model=vllm/{placeholders['model']} run --format=json" in run["command"]
    assert f"-- {placeholders['instruction']} " in run["command"]


def test_pi_uploads_a_models_json_of_an_openai_chat_provider_at_the_placeholder_url():
    table = json.loads(TABLE.read_text())
    placeholders = table["placeholders"]
    steps = table["agents"]["pi"]
    (upload,) = [step for step in steps if "upload" in step]
    assert upload["upload"] == "/tmp/harbor-pi-agent/models.json"
    provider = json.loads(upload["content"])["providers"]["harbor-endpoint"]
    assert provider == {
        "baseUrl": placeholders["base_url"],
        "apiKey": "$OPENAI_API_KEY",
        "api": "openai-completions",
        "models": [{"id": placeholders["model"]}],
    }
    run = steps[-1]
    assert run["env"] == {"OPENAI_API_KEY": placeholders["api_key"]}
    assert "PI_CODING_AGENT_DIR=/tmp/harbor-pi-agent pi --print --mode json" in run["command"]
    assert f"--provider harbor-endpoint --model {placeholders['model']} " in run["command"]
