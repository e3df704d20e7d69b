"""task.toml parsing with Harbor 0.25's semantics, task kinds, and lazy discovery."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harbor_openenv.dataset import (
    Dataset,
    DatasetError,
    TaskKind,
    find_tasks_root,
    parse_task_config,
    strip_canary,
)

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"


def test_defaults_match_harbor():
    config = parse_task_config("")
    assert config.schema_version == "1.4"
    assert config.verifier.timeout_sec == 600.0
    assert config.agent.timeout_sec is None
    assert config.environment.build_timeout_sec == 600.0
    assert config.environment.network_mode == "public"


def test_version_is_an_alias_and_schema_version_wins():
    assert parse_task_config('version = "1.0"').schema_version == "1.0"
    both = parse_task_config('version = "1.0"\nschema_version = "1.4"')
    assert both.schema_version == "1.4"


def test_unknown_keys_are_tolerated_and_metadata_kept_verbatim():
    config = parse_task_config(
        "surprise = 1\n[repo2env]\nx = 1\n[environment]\nwhat = 1\n"
        '[metadata]\ndifficulty = "easy"\n[metadata.repo2env]\nspec_version = "0.2.0"\n'
        '[metadata.repo2env.reproducibility]\nmode = "local_only"\n'
    )
    assert config.metadata == {
        "difficulty": "easy",
        "repo2env": {"spec_version": "0.2.0", "reproducibility": {"mode": "local_only"}},
    }


@pytest.mark.parametrize(
    ("text", "memory_mb", "storage_mb"),
    [
        ('memory = "4G"', 4096, None),
        ('memory = "512M"\nstorage = "10G"', 512, 10240),
        ('memory = "2048K"', 2, None),
        ("memory = 4096", None, None),  # Harbor silently drops non-string legacy values
        ('memory = "1G"\nmemory_mb = 2000', 2000, None),
    ],
)
def test_legacy_sizes(text, memory_mb, storage_mb):
    env = parse_task_config(f"[environment]\n{text}\n").environment
    assert (env.memory_mb, env.storage_mb) == (memory_mb, storage_mb)


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("allow_internet = false", "no-network"),
        ("allow_internet = true", "public"),
        ('allow_internet = false\nnetwork_mode = "public"', "public"),
    ],
)
def test_allow_internet(text, mode):
    assert parse_task_config(f"[environment]\n{text}\n").environment.network_mode == mode


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[environment]\ncpus = "many"', "[environment].cpus: Input should be a valid integer"),
        ("[verifier]\ntimeout_sec = [1]", "[verifier].timeout_sec"),
        ('[environment]\nnetwork_mode = "off"', "[environment].network_mode"),
        ('[environment]\nmemory = "lots"', "[environment]: memory = 'lots' is not a size"),
        ("[environment]\nmemory_mb = -1", "[environment].memory_mb: must be greater than 0"),
        ("environment = 3", "environment: Input should be a valid dictionary"),
        ("x = [", "not valid TOML"),
    ],
)
def test_errors_name_the_file_and_field(text, expected):
    with pytest.raises(DatasetError) as info:
        parse_task_config(text, "my/task/task.toml")
    assert str(info.value).startswith("my/task/task.toml: ")
    assert expected in str(info.value)


def test_kinds_of_the_fixture_tasks():
    dataset = Dataset(FIXTURES)
    kinds = {task.id: task.kind for task in dataset}
    assert kinds["edit-file"] is TaskKind.RUNNABLE
    assert kinds["text-only"] is TaskKind.TEXT_ONLY
    assert kinds["broken/nested-invalid"] is TaskKind.INVALID
    assert "[environment].cpus" in dataset["broken/nested-invalid"].problems[0]


def write(path: Path, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_task(root: Path, name: str, toml: str = "", *, dockerfile=True, tests=True) -> Path:
    task = root / name
    write(task / "task.toml", toml)
    write(task / "instruction.md", "Do it.\n")
    if dockerfile:
        write(task / "environment" / "Dockerfile", "FROM debian:bookworm-slim\n")
    if tests:
        write(task / "tests" / "test.sh", "#!/bin/bash\n")
    return task


def test_image_sources_and_classification(tmp_path):
    make_task(tmp_path, "dockerfile")
    make_task(tmp_path, "prebuilt", '[environment]\ndocker_image = "x:1"', dockerfile=False)
    make_task(
        tmp_path,
        "registry",
        '[metadata.repo2env.reproducibility]\nmode = "registry"\nimage_ref = "r@sha256:ab"',
        dockerfile=False,
    )
    make_task(
        tmp_path,
        "local",
        '[environment]\ndocker_image = "y:1"\n'
        '[metadata.repo2env.reproducibility]\nmode = "local_only"\nimage_ref = "y:1"',
        dockerfile=False,
    )
    make_task(tmp_path, "no-env", dockerfile=False)
    make_task(tmp_path, "no-tests", tests=False)
    make_task(tmp_path, "text", dockerfile=False, tests=False)
    make_task(tmp_path, "steps", "[[steps]]\nname = 'one'")
    make_task(tmp_path, "windows", "[environment]\nos = 'Windows'")
    make_task(tmp_path, "gpu", "[environment]\ngpus = 1")
    make_task(tmp_path, "allowlist", "[environment]\nnetwork_mode = 'allowlist'")
    make_task(tmp_path, "separate", "[verifier]\nenvironment_mode = 'separate'")
    compose = make_task(tmp_path, "compose")
    write(compose / "environment" / "docker-compose.yaml", "services: {}\n")

    dataset = Dataset(tmp_path)
    image = {task.id: task.image for task in dataset}
    assert image["dockerfile"].kind == "dockerfile"
    assert (image["prebuilt"].kind, image["prebuilt"].ref, image["prebuilt"].pullable) == (
        "docker_image",
        "x:1",
        True,
    )
    assert (image["registry"].kind, image["registry"].ref) == ("registry", "r@sha256:ab")
    assert image["local"].pullable is False
    kinds = {task.id: task.kind.value for task in dataset}
    assert kinds == {
        "allowlist": "unsupported",
        "compose": "runnable",
        "dockerfile": "runnable",
        "gpu": "unsupported",
        "local": "runnable",
        "no-env": "invalid",
        "no-tests": "invalid",
        "prebuilt": "runnable",
        "registry": "runnable",
        "separate": "runnable",
        "steps": "invalid",
        "text": "text-only",
        "windows": "unsupported",
    }
    assert "tests/test.sh: missing" in dataset["no-tests"].problems[0]
    assert "[environment].os = 'windows'" in dataset["windows"].problems[0]
    assert "steps/one/instruction.md: missing" in dataset["steps"].problems[0]


def test_find_tasks_root(tmp_path):
    make_task(tmp_path / "flat", "a")
    make_task(tmp_path / "nested" / "tasks", "a")
    (tmp_path / "empty").mkdir()
    assert find_tasks_root(tmp_path / "flat") == tmp_path / "flat"
    assert find_tasks_root(tmp_path / "nested") == tmp_path / "nested" / "tasks"
    with pytest.raises(DatasetError, match="no task directory"):
        find_tasks_root(tmp_path / "empty")
    with pytest.raises(DatasetError, match="not a folder"):
        find_tasks_root(tmp_path / "missing")


def test_nested_ids_skip_hidden_folders(tmp_path):
    make_task(tmp_path, "group/one")
    make_task(tmp_path, "group/two")
    make_task(tmp_path, ".git/hidden")
    make_task(tmp_path, "top")
    assert Dataset(tmp_path).ids == ["group/one", "group/two", "top"]


def test_listing_does_not_parse(tmp_path):
    for i in range(10_000):
        task = tmp_path / f"t{i:05d}"
        task.mkdir()
        (task / "task.toml").write_text("this is not toml [")
    start = time.perf_counter()
    dataset = Dataset(tmp_path)
    assert len(dataset) == 10_000
    elapsed = time.perf_counter() - start
    task = dataset["t00042"]
    assert "_parsed" not in task.__dict__  # nothing was read yet
    assert task.kind is TaskKind.INVALID
    assert elapsed < 5, f"listing 10,000 tasks took {elapsed:.2f} s"


def test_strip_canary():
    text = "<!-- canary GUID 123 -->\n# harbor-canary xyz\n\nDo the thing.\n"
    assert strip_canary(text) == "Do the thing.\n"
    assert strip_canary("No canary here.\n") == "No canary here.\n"
