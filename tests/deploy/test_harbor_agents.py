"""The cached harnesses replay Harbor's agents (runtime/.../harness/harbor_agents.json): the table
committed is what scripts/harbor-agents.py records against the installed Harbor 0.25 now, so a
Harbor upgrade that changes an agent's commands, flags or environment fails here."""

from __future__ import annotations

import json
import os
import subprocess

from _interop import HARBOR_VENV
from _template_helpers import REPO

TABLE = REPO / "runtime" / "src" / "harbor_openenv" / "harness" / "harbor_agents.json"


def test_the_recorded_table_is_what_harbor_runs(tmp_path):
    # A home of its own: no ~/.gemini/oauth_creds.json or other login on this machine changes
    # what an agent runs.
    recorded = subprocess.run(
        [str(HARBOR_VENV / "bin" / "python"), "scripts/harbor-agents.py"],
        cwd=REPO,
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    table = json.loads(recorded.stdout)
    assert table == json.loads(TABLE.read_text())
    assert sorted(table["agents"]) == ["claude-code", "gemini-cli", "qwen-code"]
    assert table["harbor"].startswith("0.25.")
