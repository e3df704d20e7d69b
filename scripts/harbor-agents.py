"""Print what Harbor's installed agents run, as the cached harnesses replay it: their commands and
environment, with placeholders for the model, its key, its base URL and the instruction.

    $HARBOR_OPENENV_HARBOR_VENV/bin/python scripts/harbor-agents.py > \\
        runtime/src/harbor_openenv/harness/harbor_agents.json

Needs Harbor 0.25 (Python >= 3.12; .ci/interop-tools.sh installs it). Each agent class of
``harbor.agents.installed`` runs against a recording environment that answers every command with
exit 0 and no output: its ``run()`` is what is recorded, never its ``install()`` (the harness cache
replaces that step). tests/deploy/test_harbor_agents.py checks the committed table against the
installed Harbor. The runtime reads the table alone: it never imports Harbor.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

# LiteLLM (under Harbor) fetches its model price table at import unless told to use its own copy.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from harbor.agents.installed.aider import Aider
from harbor.agents.installed.claude_code import ClaudeCode
from harbor.agents.installed.gemini_cli import GeminiCli
from harbor.agents.installed.opencode import OpenCode
from harbor.agents.installed.pi import Pi
from harbor.agents.installed.qwen_code import QwenCode
from harbor.models.agent.context import AgentContext
from harbor.models.model_api_format import ModelApiFormat

# The placeholders the runtime replaces (harness/cached.py reads them from the table).
PLACEHOLDERS = {
    "model": "harbor-openenv-model",
    "api_key": "harbor-openenv-key",
    "base_url": "http://harbor-openenv-base.invalid",
    "instruction": "harbor-openenv-instruction",
}
AGENTS: dict[str, tuple[type[Any], str, dict[str, str]]] = {
    # name: the class, its model name (provider/model), the environment that names the endpoint
    "claude-code": (
        ClaudeCode,
        f"anthropic/{PLACEHOLDERS['model']}",
        {
            "ANTHROPIC_API_KEY": PLACEHOLDERS["api_key"],
            "ANTHROPIC_BASE_URL": PLACEHOLDERS["base_url"],
        },
    ),
    "gemini-cli": (
        GeminiCli,
        f"gemini/{PLACEHOLDERS['model']}",
        {
            "GEMINI_API_KEY": PLACEHOLDERS["api_key"],
            "GOOGLE_GEMINI_BASE_URL": PLACEHOLDERS["base_url"],
        },
    ),
    "qwen-code": (
        QwenCode,
        f"openai/{PLACEHOLDERS['model']}",
        {
            "OPENAI_API_KEY": PLACEHOLDERS["api_key"],
            "OPENAI_BASE_URL": PLACEHOLDERS["base_url"],
        },
    ),
    "opencode": (
        OpenCode,
        f"vllm/{PLACEHOLDERS['model']}",
        {"OPENAI_API_KEY": PLACEHOLDERS["api_key"], "OPENAI_BASE_URL": PLACEHOLDERS["base_url"]},
    ),
    "pi": (
        Pi,
        f"openai/{PLACEHOLDERS['model']}",
        {"OPENAI_API_KEY": PLACEHOLDERS["api_key"], "OPENAI_BASE_URL": PLACEHOLDERS["base_url"]},
    ),
    "aider": (
        Aider,
        f"openai/{PLACEHOLDERS['model']}",
        {"OPENAI_API_KEY": PLACEHOLDERS["api_key"], "OPENAI_BASE_URL": PLACEHOLDERS["base_url"]},
    ),
}
# Each class's further arguments: opencode speaks OpenAI chat through the openai-compatible
# provider Harbor's class writes into its config, named vllm (opencode's own openai provider
# would call the Responses API); pi through the custom provider of the models.json it uploads
# (a custom base URL needs the API format named).
OPTIONS: dict[str, dict[str, Any]] = {
    "opencode": {"model_api_format": ModelApiFormat.OPENAI_CHAT_COMPLETIONS},
    "pi": {"model_api_format": ModelApiFormat.OPENAI_CHAT_COMPLETIONS},
}


class Recorder:
    """A Harbor environment that records each ``exec`` and each file upload (a config file the
    agent's class writes: its path and text) and answers them with success."""

    default_user = None  # the agent runs as the container's user: no chown after an upload

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def exec(self, command: str, **kwargs: Any) -> Any:
        self.calls.append({"command": command, "env": dict(kwargs.get("env") or {})})
        return mock.Mock(return_code=0, stdout="", stderr="")

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        self.calls.append({"upload": target_path, "content": Path(source_path).read_text()})

    def __getattr__(self, name: str) -> Any:
        async def nothing(*args: Any, **kwargs: Any) -> None:
            return None

        return nothing


def record(cls: type[Any], model: str, env: dict[str, str], **options: Any) -> list[dict[str, Any]]:
    """What ``cls(...).run()`` executes, in order (its random names made fixed)."""
    recorder = Recorder()
    fixed = uuid.UUID(int=0)
    with (
        tempfile.TemporaryDirectory() as logs,
        mock.patch.object(uuid, "uuid4", return_value=fixed),
    ):
        agent = cls(logs_dir=Path(logs), model_name=model, extra_env=env, **options)
        asyncio.run(agent.run(PLACEHOLDERS["instruction"], recorder, AgentContext()))
    return recorder.calls


def main() -> int:
    import harbor

    table = {
        "harbor": getattr(harbor, "__version__", "unknown"),
        "placeholders": PLACEHOLDERS,
        "agents": {name: record(*spec, **OPTIONS.get(name, {})) for name, spec in AGENTS.items()},
    }
    json.dump(table, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
