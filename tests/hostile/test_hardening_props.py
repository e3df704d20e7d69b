"""Property-based tests (hypothesis) on the real engine: the confined file actions never touch
anything outside the working directory, and no agent process survives the stop. The parser's
properties are tests/unit/test_untrusted_input_props.py."""

from __future__ import annotations

import posixpath
import time

import pytest
from _processes import processes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harbor_openenv.sandbox import PathEscapeError, SandboxError

# -- resolve_within (lexical) ----------------------------------------------------------------------


# -- task.toml -------------------------------------------------------------------------------------


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
