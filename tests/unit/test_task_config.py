"""task.toml parsing with Harbor 0.25's semantics: defaults, legacy spellings, errors."""

from __future__ import annotations

import pytest

from harbor_openenv.tasks.config import DatasetError, parse_task_config


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


def test_an_error_names_the_value_once():
    with pytest.raises(DatasetError) as info:
        parse_task_config('[[artifacts]]\nsource = "../x"')
    assert str(info.value).count("(got '../x')") == 1
