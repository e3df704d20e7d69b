"""Compose task environments on the real engine: the leftovers of a dead server swept, sidecar
builds (their failures, their network), and compose files as public Harbor tasks write them
(a relative dataset path, Harbor's variables, the main service's build)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from _compose_tasks import BUILD_COMPOSE, BUILD_DOCKERFILE, LIMITS_COMPOSE, public_compose_task
from _episodes import run
from _server import ROOT, Server, wait_until

FORMAT_TASKS = ROOT / "tests" / "fixtures" / "format"
PROJECT_LABEL = "harbor-openenv.compose-project"


# -- multi-step -----------------------------------------------------------------------------------


# -- separate verifier ---------------------------------------------------------------------------


# -- compose -------------------------------------------------------------------------------------


def _leftovers(client, owner_prefix: str) -> list[str]:
    def ours(labels: dict[str, str]) -> bool:
        owner = labels.get("harbor-openenv.owner", "")
        return PROJECT_LABEL in labels and owner.startswith(owner_prefix)

    # The low-level container list, which does not inspect (and 404 on) containers removed
    # meanwhile.
    containers = client.api.containers(all=True, filters={"label": PROJECT_LABEL})
    found = [f"Container {c['Names'][0].lstrip('/')}" for c in containers if ours(c["Labels"])]
    for kind in (client.networks, client.volumes):
        for item in kind.list():
            if ours(item.attrs.get("Labels") or {}):
                found.append(f"{type(item).__name__} {item.name}")
    return found


def _scratch(tmp: Path) -> set[str]:
    return {folder.name for folder in tmp.glob("harbor-openenv-compose-*")}


def _compose_task_with_built_sidecar(root, dockerfile: str) -> None:
    """The compose fixture plus a sidecar ``builder`` that compose builds from ``dockerfile``."""
    import shutil

    task = root / "compose-build"
    shutil.copytree(FORMAT_TASKS / "compose", task)
    (task / "environment" / "sidecar").mkdir()
    (task / "environment" / "sidecar" / "Dockerfile").write_text(dockerfile)
    compose = task / "environment" / "docker-compose.yaml"
    compose.write_text(
        compose.read_text().replace(
            "\n  cache:\n",
            '\n  builder:\n    build: ./sidecar\n    command: ["sleep", "infinity"]\n  cache:\n',
            1,
        )
    )


# -- compose, as public Harbor tasks write it -------------------------------------------------


@pytest.fixture(scope="module")
def public_compose(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("public-compose") / "dir"
    public_compose_task(root, "limits", LIMITS_COMPOSE, toml="cpus = 1\nmemory_mb = 1024\n")
    built = public_compose_task(root, "built", BUILD_COMPOSE, dockerfile=BUILD_DOCKERFILE)
    (built / "app").mkdir()
    (built / "app" / "seed.txt").write_text("seeded\n")
    return root


# -- task.toml options ---------------------------------------------------------------------------


def test_compose_leftovers_of_a_dead_server_are_swept(docker_client, tmp_path):
    """kill -9 leaves a project's containers, network, volume and its folder of compose files;
    the next server's startup removes them all, and keeps a live server's."""
    tmp = tmp_path / "tmp"  # the servers' temporary folder, shared by them and by no one else
    tmp.mkdir()
    live = Server(FORMAT_TASKS, HOE_FORMAT_GREETING="hello", TMPDIR=str(tmp))
    dead = Server(FORMAT_TASKS, HOE_FORMAT_GREETING="hello", TMPDIR=str(tmp))
    try:
        with live.client() as kept:
            error = kept.reset(task_id="compose").observation.error
            assert error is None, (error, _tails(live, dead))
            live_folders = _scratch(tmp)
            assert len(live_folders) == 1
            with dead.client() as env:
                error = env.reset(task_id="compose").observation.error
                assert error is None, (error, _tails(live, dead))  # seen once: "No such container"
                prefix = dead.owner_prefix
                assert _leftovers(docker_client, prefix)
                dead.stop(sig=9)  # no shutdown hook runs
            assert _leftovers(docker_client, prefix)
            dead_folders = _scratch(tmp) - live_folders
            assert len(dead_folders) == 1
            fresh = Server(FORMAT_TASKS, TMPDIR=str(tmp))  # its startup sweeps the dead server's
            try:
                assert wait_until(lambda: not _leftovers(docker_client, prefix), timeout=30), (
                    _leftovers(docker_client, prefix)
                )
                assert _scratch(tmp) == live_folders  # the dead one's folder gone, the live kept
                assert _leftovers(docker_client, live.owner_prefix)
                assert kept.exec("pwd").observation.output.strip() == "/app"
            finally:
                fresh.stop()
        assert wait_until(lambda: not _scratch(tmp)), _scratch(tmp)  # a live one removes its own
    finally:
        dead.stop(sig=9)
        live.stop()


def _tails(*servers: Server) -> str:
    """The end of each server's output, for a failure's message."""
    return "\n".join(f"--- server {s.port}:\n{s.output[-3000:]}" for s in servers)


def test_scratch_sweep_judges_only_folders_that_name_a_dead_owner(
    docker_client, tmp_path, monkeypatch
):
    import tempfile

    from harbor_openenv.sandbox import server_identity, server_scope
    from harbor_openenv.sandbox.owner import SCRATCH_PREFIX, remove_dead_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead_owner = f"{server_scope()}:999999999:1"  # no such process
    layout = {
        "live": server_identity(),  # this process
        "dead": dead_owner,
        "no-owner": None,  # being made, or an older runtime's: never judged
    }
    for name, owner in layout.items():
        (tmp_path / f"{SCRATCH_PREFIX}{name}").mkdir()
        if owner:
            (tmp_path / f"{SCRATCH_PREFIX}{name}" / "owner").write_text(owner)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "owner").write_text(dead_owner)
    (tmp_path / f"{SCRATCH_PREFIX}link").symlink_to(elsewhere)
    assert remove_dead_scratch(docker_client) == 1
    assert _scratch(tmp_path) == {f"{SCRATCH_PREFIX}{n}" for n in ("live", "no-owner", "link")}
    assert (elsewhere / "owner").exists()


def test_compose_sidecar_build_failure_is_a_reset_error_with_compose_output(
    docker_client, tmp_path
):
    _compose_task_with_built_sidecar(
        tmp_path,
        "FROM debian:bookworm-slim\nRUN echo sidecar-build-broke-here && exit 3\n",
    )
    srv = Server(tmp_path)
    try:
        with srv.client() as env:
            result = env.reset(task_id="compose-build")
        assert result.done
        error = result.observation.error
        assert error and "docker compose up failed" in error, error
        assert "sidecar-build-broke-here" in error  # the build's own output, not a guess
        assert "is not running" not in error
        assert wait_until(lambda: not _leftovers(docker_client, srv.owner_prefix), timeout=30)
    finally:
        srv.stop()


def test_compose_sidecar_builds_on_the_build_network(docker_client, tmp_path):
    # Builds only where the build has no network interface but loopback.
    _compose_task_with_built_sidecar(
        tmp_path,
        'FROM debian:bookworm-slim\nRUN test "$(ls /sys/class/net)" = lo\n',
    )
    srv = Server(tmp_path, HARBOR_OPENENV_BUILD_NETWORK="none")
    try:
        with srv.client() as env:
            result = env.reset(task_id="compose-build")
            assert result.observation.error is None, result.observation.error
            assert env.exec("pwd").observation.output.strip() == "/app"
    finally:
        srv.stop()
    assert wait_until(lambda: not _leftovers(docker_client, srv.owner_prefix), timeout=30)


def test_compose_tasks_check_and_serve_by_a_relative_path(docker_client, public_compose):
    """`check dir` and `serve dir` (a path relative to where they run) find each compose file."""
    import json
    import os
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "harbor_openenv.cli.main", "check", "dir", "--task", "limits"]
        + ["--json", "-"],
        cwd=public_compose.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    [row] = json.loads(run.stdout)
    assert (row["nop"], row["oracle"], row["ok"]) == (0.0, 1.0, True), row
    relative = Path(os.path.relpath(public_compose))  # HARBOR_OPENENV_TASKS, as `serve` reads it
    assert not relative.is_absolute()
    srv = Server(relative)
    try:
        with srv.client() as env:
            reset = env.reset(task_id="limits")
            assert reset.observation.error is None, reset.observation.error
            assert env.evaluate().reward == 0.0
    finally:
        srv.stop()


def test_compose_gets_harbors_variables(docker_client, public_compose):
    """CPUS and MEMORY (the task's limits) beside MAIN_IMAGE_NAME and CONTEXT_DIR, as Harbor
    sets them: a compose file limiting main with them resolves, and main sees their values."""
    srv = Server(public_compose)
    try:
        with srv.client() as env:
            reset = env.reset(task_id="limits")
            assert reset.observation.error is None, reset.observation.error
            seen = env.exec("echo $SEEN").observation.output.strip()
            context = (public_compose / "limits" / "environment").resolve()
            assert seen == f"1/1024M/{context}"
            [main] = [
                c
                for c in docker_client.containers.list(
                    filters={"label": "com.docker.compose.service=main"}
                )
                if c.labels.get("harbor-openenv.owner", "").startswith(srv.owner_prefix)
            ]
            limits = main.attrs["HostConfig"]
            # the task's limits, and the server's pids limit beside the task's deploy limits
            assert (limits["NanoCpus"], limits["Memory"]) == (10**9, 1024 * 2**20)
            assert limits["PidsLimit"] == 1024
            assert env.evaluate().reward == 0.0
            oracle = run(env, "limits", oracle_steps=1)[-1]
            assert oracle.reward == 1.0, oracle.error
    finally:
        srv.stop()


def test_compose_main_build_is_honoured(docker_client, public_compose):
    """main's own `build` (context the task folder, a dockerfile there, args) builds its image,
    as Harbor's compose merge does; compose itself never rebuilds it (`pull_policy: build`)."""
    srv = Server(public_compose)
    try:
        with srv.client() as env:
            reset = env.reset(task_id="built")
            assert reset.observation.error is None, reset.observation.error
            out = env.exec("cat seed.txt greeting.txt").observation.output.split()
            assert out == ["seeded", "from-compose"]
            assert env.evaluate().reward == 0.0
            oracle = run(env, "built", oracle_steps=1)[-1]
            assert oracle.reward == 1.0, oracle.error
    finally:
        srv.stop()
