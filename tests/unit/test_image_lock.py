"""``images.lock`` and ``images push``'s arguments, no engine: the lock files checked, a malformed
lock stops the server and the command line in one line, registry names, usage errors. Pushing
and pulling is tests/deploy/test_registry.py."""

from __future__ import annotations

import json
import re

import pytest
from _registry import env_repo
from _serve import run_cli
from _server import FIXTURE_TASKS

from harbor_openenv.images.lock import (
    LOCK_NAME,
    LockedImage,
    LockError,
    parse_registry,
    read_lock,
    write_lock,
)


def test_lock_files_are_checked(tmp_path):
    lock = tmp_path / LOCK_NAME
    ref = f"127.0.0.1:5000/envs/task@sha256:{'a' * 64}"
    write_lock(
        lock, "127.0.0.1:5000/envs", {"b": LockedImage(ref, "x:1"), "a": LockedImage(ref, "y")}
    )
    assert read_lock(lock) == {"a": LockedImage(ref, "y"), "b": LockedImage(ref, "x:1")}
    assert list(json.loads(lock.read_text())["tasks"]) == ["a", "b"]
    for text, needle in (
        ("{", "cannot read it"),
        ('{"version": 2, "tasks": {}}', "version 1"),
        ('{"version": 1}', "'tasks'"),
        ('{"version": 1, "tasks": {"a": {"image": "x"}}}', "'image' and 'source'"),
        (
            '{"version": 1, "tasks": {"a": {"image": "r/task:latest", "source": "s"}}}',
            "not a digest reference",
        ),
        (
            json.dumps(
                {"version": 1, "tasks": {"a": {"image": ref, "source": "s", "verifiers": []}}}
            ),
            "'verifiers' maps image names to strings",
        ),
        (
            json.dumps(
                {
                    "version": 1,
                    "tasks": {
                        "a": {"image": ref, "source": "s", "verifiers": {"v:1": "r/task:latest"}}
                    },
                }
            ),
            "'r/task:latest' is not a digest reference",
        ),
    ):
        lock.write_text(text)
        with pytest.raises(LockError, match=re.escape(needle)):
            read_lock(lock)


def test_a_malformed_lock_stops_the_server_at_start(tmp_path):
    from harbor_openenv.episode.runtime import Runtime

    repo = env_repo(tmp_path, "edit-file", nonce=False)
    (repo / LOCK_NAME).write_text("not json")
    with pytest.raises(LockError, match=f"{LOCK_NAME}: cannot read it"):
        Runtime(repo / "tasks")


@pytest.mark.parametrize("command", ["serve", "check", "images"])
def test_a_malformed_lock_is_one_line_from_the_cli(tmp_path, command):
    repo = env_repo(tmp_path, "edit-file", nonce=False)
    (repo / LOCK_NAME).write_text('{"version": 1, "tasks": []}')
    result = run_cli(command, repo, timeout=120)
    assert result.returncode == 2, result
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"harbor-openenv {command}: {repo / LOCK_NAME}: has no 'tasks' table" in result.stderr


def test_registry_names(tmp_path):
    assert parse_registry("127.0.0.1:5000/envs/my-env/") == "127.0.0.1:5000/envs/my-env"
    assert parse_registry("registry.example.org/team") == "registry.example.org/team"
    assert parse_registry("localhost/a") == "localhost/a"
    for bad in ("envs", "me/envs", "127.0.0.1:5000", "127.0.0.1:5000/Envs", "h.org/a//b"):
        with pytest.raises(ValueError, match="is not HOST/PREFIX"):
            parse_registry(bad)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("push", FIXTURE_TASKS), "push needs --registry HOST/PREFIX"),
        (("push", FIXTURE_TASKS, "--registry", "me/envs"), "is not HOST/PREFIX"),
        (("build", FIXTURE_TASKS, "--registry", "localhost/a"), "--registry goes with push"),
        (("build", "nope-folder"), "nope-folder: no such folder"),
        (("push", "a", "b", "--registry", "localhost/a"), "one DATASET, not 'a b'"),
    ],
)
def test_images_push_usage_errors(args, needle):
    result = run_cli("images", *args)
    assert result.returncode == 2, result
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert needle in result.stderr
