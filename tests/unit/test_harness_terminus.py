"""terminus-2's install step without an engine: its probe (the agent's own command) picks tmux's
folder from the probe's first line, which the agent can forge, so only a known architecture is
taken, never a path on the server's host (the real run: tests/engine/test_harness_terminus.py)."""

from __future__ import annotations

from typing import Any

import pytest

from harbor_openenv.harness.base import Budget, HarnessError, HarnessRun, ModelEndpoint
from harbor_openenv.harness.cache import MOUNTED
from harbor_openenv.harness.terminus import HOME, Terminus
from harbor_openenv.sandbox.result import ExecResult

pytestmark = pytest.mark.unit


class Probed:
    """A sandbox whose every command answers ``output``; it keeps what was uploaded where."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.uploads: list[tuple[str, bytes]] = []

    def exec(self, command: str, **_: Any) -> ExecResult:
        return ExecResult(0, self.output)

    def import_archive(self, target: str, archive: Any) -> None:
        self.uploads.append((target, archive.read()))


def install(tmp_path, output: str) -> tuple[str, Probed]:
    for folder in ("tmux/linux-x64", "decoy"):  # decoy: a host folder beside the cache's tmux
        (tmp_path / folder / "bin").mkdir(parents=True)
        (tmp_path / folder / "bin" / "tmux").write_text(folder)
    sandbox = Probed(output)
    model = ModelEndpoint("http://127.0.0.1:9/v1", "key", "model")
    run = HarnessRun(sandbox, "task", "agent", "/app", model, Budget(1, 10.0))  # type: ignore[arg-type]
    return Terminus(tmp_path / "tmux").install(run), sandbox


def test_the_cache_s_tmux_is_used_where_the_volume_holds_it(tmp_path):
    mounted = f"{MOUNTED}/tmux/linux-x64"
    found, sandbox = install(tmp_path, f"x86_64\ntmux {mounted}/bin/tmux\n")
    assert (found, sandbox.uploads) == (mounted, [])


def test_the_portable_tmux_is_uploaded_where_the_volume_does_not_hold_it(tmp_path):
    found, sandbox = install(tmp_path, "x86_64\n")
    assert found == HOME
    [(target, archive)] = sandbox.uploads
    assert target == HOME and b"tmux/linux-x64" in archive and b"decoy" not in archive


@pytest.mark.parametrize("machine", ["../../decoy", "../decoy", "/usr", "riscv64"])
def test_a_forged_or_unknown_architecture_uploads_nothing(tmp_path, machine):
    with pytest.raises(HarnessError, match="has no tmux for the container's"):
        install(tmp_path, f"{machine}\n")
