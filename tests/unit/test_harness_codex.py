"""The codex harness's own logic without an engine: where it finds the binary (a folder or an
npm pack), the command it runs, how it reads Codex's failures, and that a backend without a
relay gives a crashed result, not an exception (the real run: tests/engine/test_harness_codex.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shlex
import subprocess
import tarfile

import pytest

from harbor_openenv.config import Settings
from harbor_openenv.harness.base import Budget, HarnessError, HarnessRun, ModelEndpoint
from harbor_openenv.harness.codex import (
    ABSENT,
    ABSENT_CODE,
    HOME,
    LAUNCH,
    MOUNTED,
    Codex,
    _failure,
    _sources,
)
from harbor_openenv.sandbox.memory import MemorySandbox
from harbor_openenv.sandbox.result import ExecResult

TRIPLE = "x86_64-unknown-linux-musl"


def test_a_folder_or_an_npm_pack_gives_codex_and_ripgrep(tmp_path):
    vendor = tmp_path / "cache" / TRIPLE
    (vendor / "bin").mkdir(parents=True)
    (vendor / "codex-path").mkdir()
    (vendor / "bin" / "codex").write_bytes(b"codex!")
    (vendor / "codex-path" / "rg").write_bytes(b"rg")
    found = [(name, source.read(), size) for name, source, size in _sources(tmp_path, TRIPLE)]
    assert found == [("bin/codex", b"codex!", 6), ("path/rg", b"rg", 2)]

    pack = tmp_path / "openai-codex-linux-x64.tgz"
    with tarfile.open(pack, "w:gz") as tar:
        for name, data in [(f"package/vendor/{TRIPLE}/bin/codex", b"codex!")]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    found = [(name, source.read(), size) for name, source, size in _sources(pack, TRIPLE)]
    assert found == [("bin/codex", b"codex!", 6)]  # ripgrep is optional


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_a_package_without_the_build_is_a_harness_error(tmp_path, where):
    package = tmp_path / "nothing" if where == "missing" else tmp_path
    with pytest.raises(HarnessError):
        list(_sources(package, "aarch64-unknown-linux-musl"))


class RelayingSandbox(MemorySandbox):
    """A memory sandbox whose relay does nothing, and whose handler sees the command the launch
    line runs (its arguments) in place of the line."""

    def relay(self, port, target):
        return contextlib.nullcontext()

    def run(self, command):
        if len(command.argv) > 3 and command.argv[2] == LAUNCH:
            command = dataclasses.replace(command, argv=["sh", "-c", shlex.join(command.argv[4:])])
        return super().run(command)


def run_of(sandbox, base_url="http://127.0.0.1:8100/v1") -> HarnessRun:
    return HarnessRun(
        sandbox=sandbox,
        instruction="fix it",
        user="agent",
        workdir="/app",
        model=ModelEndpoint(base_url=base_url, api_key="s123", model="policy"),
        budget=Budget(max_turns=5, timeout_s=90),
    )


def test_the_command_points_codex_at_the_relayed_port_only(tmp_path):
    argv = Codex(tmp_path, port=4999).argv(run_of(None))
    assert argv[:2] == ["/opt/harbor-openenv/codex/bin/codex", "exec"]
    assert argv[-2:] == ["--", "fix it"]
    config = [argv[i + 1] for i, part in enumerate(argv) if part == "-c"]
    assert 'model_providers.harbor-openenv.base_url="http://127.0.0.1:4999/v1"' in config
    assert 'model_providers.harbor-openenv.wire_api="responses"' in config
    assert "8100" not in " ".join(argv)  # the server's side stays on the server's side
    assert "s123" not in " ".join(argv)  # codex holds no key: the keyed port adds it
    assert not [item for item in config if "env_key" in item]


def test_codex_failures_are_read_from_its_json_events():
    events = '{"type":"turn.started"}\nnot json\n{"type":"error","message":"stream lost"}\n'
    assert _failure(events) == "stream lost"
    assert _failure(events + '{"type":"turn.failed","error":{"message":"gave up"}}') == "gave up"
    assert _failure('{"type":"turn.completed"}') is None


def test_a_backend_without_a_relay_gives_a_crashed_result(tmp_path):
    (tmp_path / TRIPLE / "bin").mkdir(parents=True)
    (tmp_path / TRIPLE / "bin" / "codex").write_bytes(b"codex")

    def handler(command, user, env, workdir):
        return ExecResult(0, "x86_64\n" if command.startswith("uname -m") else "")

    sandbox = MemorySandbox(handler)
    result = Codex(tmp_path).run(run_of(sandbox))
    assert result.status == "crashed"
    assert "cannot relay" in (result.error or "")


def test_an_unset_package_is_named():
    with pytest.raises(HarnessError, match="HARBOR_OPENENV_CODEX_PACKAGE"):
        Codex.from_settings(Settings())


def test_codex_in_the_helpers_volume_runs_with_no_exec_before_it(tmp_path):
    """A container whose helper volume holds codex runs it at once: the launch line is the
    rollout's only exec, as the agent, with CODEX_HOME in /var/tmp. One without gets the
    architecture asked (one root exec), the upload into HOME and the line again. The volume's
    archive names codex/ alone."""
    (tmp_path / TRIPLE / "bin").mkdir(parents=True)
    (tmp_path / TRIPLE / "bin" / "codex").write_bytes(b"codex")
    calls = []

    def mounted(command, user, env, workdir):
        calls.append((command, user))
        return ExecResult(0, '{"type":"turn.completed"}\n')

    codex = Codex(tmp_path)
    sandbox = RelayingSandbox(mounted)
    assert codex.run(run_of(sandbox)).status == "completed"
    ((command, user),) = calls
    assert user == "agent" and command.startswith(f"{MOUNTED}/bin/codex exec")
    assert sandbox.files == {}

    calls.clear()

    def bare(command, user, env, workdir):
        calls.append((command, user))
        if command == "uname -m":
            return ExecResult(0, "x86_64\n")
        if command.startswith(f"{MOUNTED}/bin/codex exec"):
            return ExecResult(ABSENT_CODE, ABSENT + "\n")
        return ExecResult(0, '{"type":"turn.completed"}\n')

    sandbox = RelayingSandbox(bare)
    assert codex.run(run_of(sandbox)).status == "completed"
    assert [user for _, user in calls if user == "agent"] == ["agent", "agent"]
    assert calls[1] == ("uname -m", "root") and calls[-1][0].startswith(f"{HOME}/bin/codex exec")
    assert sandbox.files[f"{HOME}/bin/codex"] == b"codex"
    with tarfile.open(codex.volume_archive("x86_64")) as tar:
        assert tar.getnames() == ["codex/bin/codex"]


def test_the_launch_line_finds_codex_or_says_it_is_absent(tmp_path):
    """LAUNCH itself, in a shell: an absent binary is ABSENT and ABSENT_CODE; a present one
    runs with CODEX_HOME made, one per uid."""
    absent = subprocess.run(
        ["bash", "-c", LAUNCH, "bash", str(tmp_path / "bin" / "codex"), "exec"],
        capture_output=True,
        text=True,
    )
    assert (absent.returncode, absent.stdout.strip()) == (ABSENT_CODE, ABSENT)
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "codex"
    fake.write_text('#!/bin/sh\necho "$CODEX_HOME $1"; test -d "$CODEX_HOME"\n')
    fake.chmod(0o755)
    ran = subprocess.run(
        ["bash", "-c", LAUNCH, "bash", str(fake), "exec"], capture_output=True, text=True
    )
    home = f"/var/tmp/harbor-openenv-codex-{os.getuid()}"
    assert (ran.returncode, ran.stdout.split()) == (0, [home, "exec"])
