"""The codex harness's own logic without an engine: where it finds the binary (a folder or an
npm pack), the command it runs, how it reads Codex's failures, and that a backend without a
relay gives a crashed result, not an exception (the real run: tests/engine/test_harness_codex.py).
"""

from __future__ import annotations

import io
import tarfile

import pytest

from harbor_openenv.config import Settings
from harbor_openenv.harness.base import Budget, HarnessError, HarnessRun, ModelEndpoint
from harbor_openenv.harness.codex import HOME, MOUNTED, Codex, _failure, _sources
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


def test_codex_in_the_helpers_volume_is_used_as_it_is(tmp_path):
    """A container whose helper volume holds codex gets no upload, only codex's sticky home (made
    by the probe); one without gets the upload into HOME. The volume's archive names codex/ and
    no home."""
    (tmp_path / TRIPLE / "bin").mkdir(parents=True)
    (tmp_path / TRIPLE / "bin" / "codex").write_bytes(b"codex")
    commands = []

    def handler(command, user, env, workdir):
        commands.append(command)
        return ExecResult(0, "x86_64\nmounted\n" if command.startswith("uname -m") else "")

    sandbox = MemorySandbox(handler)
    assert Codex(tmp_path).install(sandbox) == MOUNTED == "/.harbor-openenv/codex"
    assert sandbox.files == {} and "chmod 1777 /opt/harbor-openenv/codex/home" in commands[-1]
    assert len(commands) == 1  # the probe makes the home: one root exec per episode
    argv = Codex(tmp_path).argv(run_of(sandbox), MOUNTED)
    assert argv[0] == f"{MOUNTED}/bin/codex"

    bare = MemorySandbox(lambda command, user, env, workdir: ExecResult(0, "x86_64\n"))
    assert Codex(tmp_path).install(bare) == HOME
    assert bare.files[f"{HOME}/bin/codex"] == b"codex"
    codex = Codex(tmp_path)  # its archives live as long as it does
    with tarfile.open(codex.volume_archive("x86_64")) as tar:
        assert tar.getnames() == ["codex/bin/codex"]


def test_a_home_that_cannot_be_made_is_named(tmp_path):
    failing = ExecResult(3, "x86_64\nmkdir: cannot create directory '/opt': Read-only\n")
    sandbox = MemorySandbox(lambda command, user, env, workdir: failing)
    with pytest.raises(HarnessError, match="cannot make codex's home: mkdir: cannot create"):
        Codex(tmp_path).install(sandbox)
