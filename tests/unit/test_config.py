"""config.Settings: every HARBOR_OPENENV_* variable parses and bad values name their variable. No
engine needed. The docs' settings reference is generated from Settings (docs/hooks.py), which
also checks its hand-written "In detail" table (tests/test_docs.py)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harbor_openenv.config import Settings

# A value for each field's variable, and what it parses to (none of them its default).
GIVEN = {
    "tasks": ("/srv/tasks", Path("/srv/tasks")),
    "max_sessions": ("3", 3),
    "session_timeout_s": ("12.5", 12.5),
    "reset_within_s": ("30", 30.0),
    "pristine_verifier": ("grade*, other,", ("grade*", "other")),
    "drain_s": ("0", 0.0),
    "exec_timeout_s": ("7", 7.0),
    "max_output_bytes": ("100", 100),
    "max_write_bytes": ("200", 200),
    "max_read_bytes": ("300", 300),
    "exec_channel": ("0", False),
    "solve_timeout_s": ("60", 60.0),
    "rollout_timeout_s": ("600", 600.0),
    "rollout_max_turns": ("20", 20),
    "pids_limit": ("64", 64),
    "default_cpus": ("0.5", 0.5),
    "default_memory_mb": ("512", 512),
    "disk_mb": ("0", 0),
    "disk_check_s": ("0.25", 0.25),
    "max_reward_bytes": ("1000", 1000),
    "max_artifact_bytes": ("2000", 2000),
    "reward_key": (" mean:f2p,p2p ", "mean:f2p,p2p"),
    "orchestration_token": ("s3cret", "s3cret"),
    "default_task": ("hello-world", "hello-world"),
    "build_network": ("host", "host"),
    "public_network": ("hoe-public", "hoe-public"),
    "verifier_network": ("hoe-grading", "hoe-grading"),
    "docker_tls_ca": ("CA PEM", "CA PEM"),
    "docker_tls_cert": ("CERT PEM", "CERT PEM"),
    "docker_tls_key": ("KEY PEM", "KEY PEM"),
    "docker_hosts": ("tcp://a:2376,ssh://b", ("tcp://a:2376", "ssh://b")),
    "engine_probe_s": ("2.5", 2.5),
    "pool_size": ("2", 2),
    "fork_ttl_s": ("90", 90.0),
    "backend": (" harbor:docker ", "harbor:docker"),
    "harbor_env_kwargs": ('{"keep_containers": false}', {"keep_containers": False}),
    "log_format": ("JSON", "json"),
    "log_level": ("warning", "WARNING"),
    "record_dir": ("/srv/rollouts", Path("/srv/rollouts")),
    "codex_package": ("/srv/codex", Path("/srv/codex")),
    "harness_cache": ("/srv/harnesses", Path("/srv/harnesses")),
    "env_name": ("my-env", "my-env"),
    "env_version": ("1.2.3", "1.2.3"),
}


# Settings that go only with others (the rest are given together, one of each pair left out).
APART = {"backend", "docker_hosts"}


def test_every_field_parses_from_its_variable():
    assert set(GIVEN) == {f.name for f in dataclasses.fields(Settings)}
    environ = {Settings.variable(n): raw for n, (raw, _) in GIVEN.items() if n not in APART}
    together = Settings.from_env(environ)
    for name, (raw, expected) in GIVEN.items():
        settings = Settings.from_env({Settings.variable(name): raw}) if name in APART else together
        value = getattr(settings, name)
        assert value == expected and type(value) is type(expected), name
        assert expected != getattr(Settings(), name), f"{name}: give a value other than its default"


def test_unset_or_empty_variables_keep_the_defaults():
    assert Settings.from_env({}) == Settings()
    assert Settings.from_env({v: "" for v in Settings.variables()}) == Settings()
    assert Settings.from_env({"UNRELATED": "x", "HARBOR_OPENENV_NOT_A_SETTING": "-1"}) == Settings()


def test_the_defaults_are_the_documented_ones():
    defaults = Settings()
    assert (defaults.max_sessions, defaults.session_timeout_s) == (8, 1800.0)
    assert (defaults.exec_timeout_s, defaults.solve_timeout_s) == (300.0, 1800.0)
    assert (defaults.max_output_bytes, defaults.max_reward_bytes) == (1 << 20, 1 << 20)
    assert (defaults.max_read_bytes, defaults.max_write_bytes) == (8 << 20, 8 << 20)
    assert (defaults.pids_limit, defaults.default_cpus, defaults.default_memory_mb) == (
        1024,
        1.0,
        2048,
    )
    assert (defaults.disk_mb, defaults.disk_check_s, defaults.pool_size) == (10240, 2.0, 0)
    assert defaults.max_artifact_bytes == 1 << 30
    assert (defaults.log_format, defaults.log_level) == ("text", "INFO")
    assert defaults.exec_channel is True
    assert (defaults.backend, defaults.harbor_env_kwargs) == ("docker", None)
    for name in ("tasks", "orchestration_token", "default_task", "build_network", "env_name"):
        assert getattr(defaults, name) is None
    assert defaults.reward_key is None  # no key named: reward None among several metrics


NUMBERS = [f.name for f in dataclasses.fields(Settings) if f.metadata["kind"] in (int, float)]


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("raw", ["many", "-1", "nan", "1e999"])
def test_a_bad_number_names_its_variable_and_value(name, raw):
    variable = Settings.variable(name)
    with pytest.raises(ValueError) as caught:
        Settings.from_env({variable: raw})
    assert f"{variable}={raw!r}" in str(caught.value)


@pytest.mark.parametrize("name", NUMBERS)
def test_zero_only_where_it_means_off(name):
    variable = Settings.variable(name)
    if name in ("disk_mb", "pool_size", "drain_s", "pids_limit"):
        assert getattr(Settings.from_env({variable: "0"}), name) == 0
    else:
        with pytest.raises(ValueError, match=f"{variable}='0' must be greater than 0"):
            Settings.from_env({variable: "0"})


@pytest.mark.parametrize("raw", ["harbor", "harbor:", "kubernetes"])
def test_the_backend_is_docker_or_a_harbor_type(raw):
    with pytest.raises(
        ValueError, match=f"HARBOR_OPENENV_BACKEND='{raw}' must be docker or harbor"
    ):
        Settings.from_env({"HARBOR_OPENENV_BACKEND": raw})


@pytest.mark.parametrize("raw", ["[1]", "{nope", '"text"'])
def test_harbor_env_kwargs_are_a_json_object(raw):
    with pytest.raises(ValueError, match="HARBOR_OPENENV_HARBOR_ENV_KWARGS must be a JSON object"):
        Settings.from_env({"HARBOR_OPENENV_HARBOR_ENV_KWARGS": raw})


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"backend": "harbor:docker", "pool_size": 1}, "POOL_SIZE=1: Harbor's backends"),
        ({"docker_hosts": ("tcp://a",), "backend": "harbor:docker"}, "names Docker engines"),
        ({"docker_hosts": ("tcp://a",), "pool_size": 1}, "the warm pool keeps one engine's"),
        ({"docker_tls_ca": "CA PEM"}, "_CA, _CERT and _KEY go together: one is unset"),
        ({"public_network": "host"}, "PUBLIC_NETWORK='host' is not a network .*never the host"),
        ({"verifier_network": "none"}, "VERIFIER_NETWORK='none' is not a network a public"),
        ({"public_network": "container:x"}, "PUBLIC_NETWORK='container:x' is not a network"),
        ({"public_network": "a b"}, "PUBLIC_NETWORK='a b' is not a Docker network name"),
        ({"public_network": "n", "backend": "harbor:docker"}, "does not use: unset one"),
    ],
)
def test_settings_that_do_not_go_together_are_refused_whichever_way_made(given, said):
    environ = {
        Settings.variable(name): ",".join(raw) if isinstance(raw, tuple) else str(raw)
        for name, raw in given.items()
    }
    with pytest.raises(ValueError, match=said):
        Settings.from_env(environ)
    with pytest.raises(ValueError, match=said):  # made in code, as the CLI and tests make them
        Settings(**given)


def test_pristine_patterns_name_tasks():
    settings = Settings.from_env({"HARBOR_OPENENV_PRISTINE_VERIFIER": "grade*, x"})
    assert [settings.pristine(t) for t in ("grade-1", "x", "y")] == [True, True, False]
    assert not Settings().pristine("grade-1")


def test_whole_numbers_refuse_fractions():
    with pytest.raises(
        ValueError, match=re.escape("HARBOR_OPENENV_MAX_SESSIONS='1.5' is not a number")
    ):
        Settings.from_env({"HARBOR_OPENENV_MAX_SESSIONS": "1.5"})


@pytest.mark.parametrize("raw", ["yes", "2", "-1", "on"])
def test_the_exec_channel_switch_is_0_or_1(raw):
    with pytest.raises(ValueError, match=f"HARBOR_OPENENV_EXEC_CHANNEL='{raw}' must be 0 or 1"):
        Settings.from_env({"HARBOR_OPENENV_EXEC_CHANNEL": raw})
    assert Settings.from_env({"HARBOR_OPENENV_EXEC_CHANNEL": "1"}).exec_channel is True


@pytest.mark.parametrize(
    ("variable", "raw"),
    [("HARBOR_OPENENV_LOG_FORMAT", "yaml"), ("HARBOR_OPENENV_LOG_LEVEL", "chatty")],
)
def test_a_bad_log_setting_names_its_variable(variable, raw):
    with pytest.raises(ValueError, match=f"{variable}='{raw}'"):
        Settings.from_env({variable: raw})


def test_settings_are_frozen_and_documented():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().pool_size = 3  # type: ignore[misc]
    for f in dataclasses.fields(Settings):
        doc = f.metadata["doc"]
        assert doc and "\n" not in doc, f.name


def test_importing_reads_no_environment():
    # A module-level read would show as an unknown variable's error at import; none happens.
    code = "import harbor_openenv.config, harbor_openenv.server.app, harbor_openenv.events"
    env = {"PATH": "/usr/bin:/bin", "HARBOR_OPENENV_MAX_SESSIONS": "not-a-number"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("raw", ["a,b", "mean:", "mean:a,,b", "mean:a,a"])
def test_a_bad_reward_key_names_its_variable(raw):
    with pytest.raises(ValueError, match="HARBOR_OPENENV_REWARD_KEY="):
        Settings.from_env({"HARBOR_OPENENV_REWARD_KEY": raw})
