"""Property-based tests (hypothesis): agent paths never escape the working directory, and no
task.toml, however strange, makes the parser or the task classifier raise anything unexpected."""

from __future__ import annotations

import posixpath
import time
import uuid
from pathlib import Path

import pytest
import tomli_w
from _processes import processes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harbor_openenv.sandbox import PathEscapeError, SandboxError, resolve_within
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


# -- the file actions in a real container, symlink chains and swaps included ----------

TARGETS = [
    "/outside", "/", "..", "../..", "a", "../a", "/work/b", "b/c", "../outside", "a/../../outside",
    "c", "/work", "/outside/a", "../../../outside", "x",
]  # fmt: skip
NAMES = ["a", "b", "c", "a/b", "a/c", "b/a", "b/c", "c/a"]
PATH_PARTS = st.sampled_from(["a", "b", "c", "..", ".", "x", "outside", "new"])
OUTSIDE_FILES = ("a", "b", "c", "x", "new")


@st.composite
def layouts(draw) -> list[str]:
    """Shell commands building a tree of folders and symlinks (chains, loops, escapes) in /work."""
    commands = []
    for name in draw(st.lists(st.sampled_from(NAMES), max_size=6, unique=True)):
        parent = posixpath.dirname(name)
        prefix = f"mkdir -p {parent} 2>/dev/null; " if parent else ""
        if draw(st.booleans()):
            commands.append(f"{prefix}mkdir -p {name} 2>/dev/null")
        else:
            commands.append(f"{prefix}ln -sfn {draw(st.sampled_from(TARGETS))} {name} 2>/dev/null")
    return commands


@st.composite
def file_actions(draw) -> tuple[str, str, bool]:
    parts = draw(st.lists(PATH_PARTS, min_size=1, max_size=4))
    prefix = draw(st.sampled_from(["", "", "/work/", "/"]))
    return (
        draw(st.sampled_from(["read", "write", "list"])),
        prefix + "/".join(parts),
        draw(st.booleans()),
    )


# A swap before the action: the deepest existing folder on the path's real one (when inside the
# workdir) becomes a symlink to /outside, as an agent's background process could make it.
_SWAP = r"""
p=$1
while [ "$p" != /work ] && [ "$p" != / ]; do
  if [ -d "$p" ] && [ ! -L "$p" ]; then mv -T "$p" "$p.gone" && ln -s /outside "$p"; exit 0; fi
  p=$(dirname "$p")
done
"""


@pytest.mark.docker
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(layout=layouts(), action=file_actions())
def test_file_actions_never_touch_anything_outside_the_workdir(bare_sandbox, layout, action):
    op, path, swap = action
    box = bare_sandbox
    reset = (
        "rm -rf /work /outside && mkdir -p /work /outside && cd /work"
        + "".join(f" && echo OUTSIDE > /outside/{name}" for name in OUTSIDE_FILES)
        + "".join(f"; {command}" for command in layout)
        + "; sleep 0.01; touch /.probe-marker"
    )
    assert box.exec_root(reset).exit_code == 0
    real = box.exec_root('readlink -m -- "$1"', posixpath.join("/work", path)).output.strip()
    if swap and real.startswith("/work/"):
        box.exec_root(_SWAP, real)
    try:
        if op == "read":
            data, _ = box.read_file(path, max_bytes=1 << 20)
            assert b"OUTSIDE" not in data, (layout, path)
        elif op == "write":
            box.write_file(path, b"written by the agent\n")
        else:
            assert "OUTSIDE" not in box.list_dir(path)
    except (PathEscapeError, SandboxError):
        pass
    changed = box.exec_root(
        "find / -xdev -newer /.probe-marker ! -path / ! -path /work ! -path '/work/*'"
        " ! -path /.probe-marker"
    )
    assert changed.output.strip() == "", (layout, path, swap, changed.output)


def test_oversized_sizes_are_errors_not_crashes():
    """Found by the properties above: a huge size string overflowed to infinity."""
    with pytest.raises(DatasetError, match=r"\[environment\]"):
        parse_task_config('[environment]\nmemory = "' + "9" * 400 + 'G"\n', "x/task.toml")


def test_non_finite_timeouts_are_errors(tmp_path: Path):
    for table in ("verifier", "agent"):
        for value in ("nan", "inf", "-1.0"):
            with pytest.raises(DatasetError, match=rf"\[{table}\]\.timeout_sec: must be"):
                parse_task_config(f"[{table}]\ntimeout_sec = {value}\n", "x/task.toml")


# -- the helper's stop: no agent process survives, whatever its name and user ----------------------

# A planter that renames itself ($1: the new name as printf escapes) and loops on builtins only, so
# it never spawns a child; and a supervisor, also renamed, that respawns it whenever it dies.
PLANTER = (
    'printf "$1" > /proc/self/comm\n'
    "while :; do echo 1 > /logs/verifier/reward.txt; echo '{\"reward\": 1}' >"
    " /logs/verifier/reward.json; done 2>/dev/null\n"
)
SUPERVISOR = 'printf "$1" > /proc/self/comm\nwhile :; do bash /tmp/plant.sh "$1" & wait; done\n'
QUIET = "</dev/null >/dev/null 2>&1"
DAEMON_STYLES = {
    "builtins-only loop": f'setsid bash /tmp/plant.sh "$1" {QUIET} &',
    "setsid double fork": f'setsid bash -c \'(bash /tmp/plant.sh "$0" &) &\' "$1" {QUIET}',
    "respawning supervisor": f'setsid bash /tmp/super.sh "$1" {QUIET} &',
}
# Command names: anything but NUL, up to the kernel's 15 bytes, with the bytes that fooled a
# parser of /proc/PID/stat's first line (parens, spaces, newlines, state letters).
PROCESS_NAMES = st.lists(
    st.sampled_from([b")", b"(", b" ", b"\n", b"Z", b"X", b") Z 1 ", b"\xff", b"\xc3", b"a"])
    | st.binary(min_size=1, max_size=3).filter(lambda b: b"\x00" not in b),
    min_size=1,
    max_size=8,
).map(lambda parts: b"".join(parts)[:15])


@pytest.mark.docker
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=PROCESS_NAMES,
    user=st.sampled_from(["root", "nobody"]),
    style=st.sampled_from(list(DAEMON_STYLES)),
)
def test_no_agent_process_survives_the_stop(bare_sandbox, name, user, style):
    box = bare_sandbox
    box.ran_as.add("root")
    box.stop_processes()  # what earlier examples left: every process but the keeper
    box.mark_baseline()
    setup = (
        "printf '%s' \"$1\" > /tmp/plant.sh && printf '%s' \"$2\" > /tmp/super.sh"
        " && chmod 755 /tmp/plant.sh /tmp/super.sh"
        " && rm -rf /logs/verifier && mkdir -p /logs/verifier && chmod 777 /logs/verifier"
    )
    assert box.exec_root(setup, PLANTER, SUPERVISOR).exit_code == 0
    escaped = "".join(f"\\{byte:03o}" for byte in name)
    started = box.exec(
        DAEMON_STYLES[style], timeout_s=10, max_output=1000, user=user, args=(escaped,)
    )
    assert started.exit_code == 0, started.output
    assert processes(box)  # the daemon runs

    box.stop_processes(prepare=("", "/logs/verifier", "/tests", "stage"))

    time.sleep(0.3)  # a survivor would have planted by now
    assert processes(box) == [], (name, user, style)
    for reward in ("reward.txt", "reward.json"):
        assert box.read_engine_file(f"/logs/verifier/{reward}", limit=100) is None
    mode = box.exec_root("stat -c '%a %U' /logs/verifier").output.strip()
    assert mode == "755 root"  # the verifier's alone
