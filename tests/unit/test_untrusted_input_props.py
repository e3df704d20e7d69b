"""Property-based tests (hypothesis), no engine: agent paths never escape the working directory,
and no task.toml, however strange, makes the parser or the task classifier raise anything
unexpected."""

from __future__ import annotations

import posixpath
import uuid
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harbor_openenv.sandbox import PathEscapeError, resolve_within
from harbor_openenv.tasks.config import DatasetError, parse_task_config
from harbor_openenv.tasks.dataset import Dataset

# -- resolve_within (lexical) ----------------------------------------------------------------------


SEGMENTS = st.sampled_from(["a", "b", "..", ".", "", "work", "x.txt", "...", "a b", "~", "-n"])
WORKDIRS = st.sampled_from(["/work", "/work/", "/srv/project", "/a/b/c", "/work/../work"])


@st.composite
def agent_paths(draw) -> str:
    body = "/".join(draw(st.lists(SEGMENTS, min_size=1, max_size=8)))
    prefix = draw(st.sampled_from(["", "/", "/work/", "/srv/project/", "//", "./"]))
    return prefix + body


# -- task.toml -------------------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["4G", "512M", "1" * 400 + "G", ".5K", "0M", "-1G", "linux", "windows"])
    | st.sampled_from(["no-network", "allowlist", "public", "separate", "shared", "registry"])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
KEYS = {
    "environment": [
        "build_timeout_sec", "docker_image", "os", "cpus", "memory", "memory_mb", "storage",
        "storage_mb", "gpus", "tpu", "env", "workdir", "network_mode", "allow_internet",
        "allowed_hosts", "healthcheck",
    ],
    "verifier": ["timeout_sec", "env", "user", "environment_mode", "environment"],
    "agent": ["timeout_sec", "user"],
    "solution": ["env"],
    "metadata": ["repo2env", "category"],
}  # fmt: skip


@st.composite
def task_documents(draw) -> dict:
    document = {}
    for table, keys in KEYS.items():
        if draw(st.booleans()):
            chosen = draw(st.lists(st.sampled_from(keys), max_size=4, unique=True))
            document[table] = {key: draw(VALUES) for key in chosen}
            if draw(st.booleans()):
                document[table] = draw(VALUES)  # a table that is not a table
    for key in draw(st.lists(st.sampled_from(["version", "schema_version", "steps"]), max_size=2)):
        document[key] = draw(VALUES)
    return _toml_ready(document)


def _toml_ready(value):
    """Drop what TOML cannot hold (None) so tomli_w can write the rest."""
    if isinstance(value, dict):
        return {k: _toml_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_toml_ready(v) for v in value if v is not None]
    return value


def _dump(document: dict) -> str | None:
    try:
        return tomli_w.dumps(document)
    except (TypeError, ValueError):  # e.g. a top-level value TOML has no syntax for
        return None


# -- the file actions in a real container, symlink chains and swaps included ----------


# -- the helper's stop: no agent process survives, whatever its name and user ----------------------


@given(workdir=WORKDIRS, path=agent_paths() | st.text(max_size=40))
def test_resolve_within_never_leaves_the_workdir(workdir, path):
    root = posixpath.normpath(workdir)
    try:
        resolved = resolve_within(workdir, path)
    except PathEscapeError:
        return
    assert resolved == posixpath.normpath(resolved)
    assert resolved == root or resolved.startswith(root + "/"), (workdir, path, resolved)
    assert ".." not in resolved.split("/")


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(document=task_documents())
def test_no_task_toml_crashes_the_parser(document):
    text = _dump(document)
    if text is None:
        return
    try:
        parse_task_config(text, "x/task.toml")
    except DatasetError as exc:
        assert str(exc).startswith("x/task.toml: "), exc


@given(text=st.text(max_size=200))
def test_arbitrary_text_only_gives_dataset_errors(text):
    try:
        parse_task_config(text, "x/task.toml")
    except DatasetError as exc:
        assert "x/task.toml" in str(exc)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(document=task_documents(), files=st.sets(st.sampled_from(["Dockerfile", "test.sh"])))
def test_every_task_gets_a_kind_and_reasons(tmp_path, document, files):
    text = _dump(document)
    if text is None:
        return
    root = tmp_path / uuid.uuid4().hex
    task = root / "t"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text(text)
    (task / "instruction.md").write_text("do it\n")
    if "Dockerfile" in files:
        (task / "environment").mkdir()
        (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    if "test.sh" in files:
        (task / "tests" / "test.sh").write_text("#!/bin/bash\n")
    loaded = Dataset(root)["t"]
    kind, problems = loaded.kind, loaded.problems  # never raises
    if kind.value in ("invalid", "unsupported"):
        assert problems and all(p.startswith("t") for p in problems), problems
    else:
        loaded.config  # noqa: B018 - a runnable or text-only task has a config


def test_oversized_sizes_are_errors_not_crashes():
    """Found by the properties above: a huge size string overflowed to infinity."""
    with pytest.raises(DatasetError, match=r"\[environment\]"):
        parse_task_config('[environment]\nmemory = "' + "9" * 400 + 'G"\n', "x/task.toml")


def test_non_finite_timeouts_are_errors(tmp_path: Path):
    for table in ("verifier", "agent"):
        for value in ("nan", "inf", "-1.0"):
            with pytest.raises(DatasetError, match=rf"\[{table}\]\.timeout_sec: must be"):
                parse_task_config(f"[{table}]\ntimeout_sec = {value}\n", "x/task.toml")
