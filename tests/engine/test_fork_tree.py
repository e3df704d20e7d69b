"""A branch's filesystem is exactly its parent's at the fork: over hypothesis-generated file
operations (writes, folders, deletions of the image's files, modes with set-id bits, owners,
symlinks, fifos), the tree listing (path, type, mode, owner, group, link target, sha256) of the
parent and of each branch is the same, against a real server and engine."""

from __future__ import annotations

import shlex
import textwrap
from pathlib import Path

import pytest
from _server import TOKEN, Server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harbor_openenv import HarborAction

pytestmark = pytest.mark.docker

TASK = "tree"
DOCKERFILE = textwrap.dedent(
    """\
    FROM debian:bookworm-slim
    RUN useradd -u 1234 worker && mkdir -p /app /opt/seed/sub \\
        && echo one > /opt/seed/x && echo two > /opt/seed/sub/y && ln -s x /opt/seed/link \\
        && chown -R worker /opt/seed/sub && chmod 750 /opt/seed/sub
    WORKDIR /app
    """
)
ROOTS = ("/app", "/opt/seed", "/logs/agent")
LISTING = (
    f"find {' '.join(ROOTS)} -printf '%p %y %m %U %G %l\\n' 2>/dev/null | sort;"
    f" find {' '.join(ROOTS)} -type f -print0 2>/dev/null | sort -z | xargs -0r sha256sum"
)
NAMES = ["a", "b", "d", "d/e", "d/f", "sub", "sub/y", "x", "link"]
paths = st.sampled_from([f"{root}/{name}" for root in ROOTS[:2] for name in NAMES])
ops = st.one_of(
    st.tuples(st.just("write"), paths, st.binary(max_size=64)),
    st.tuples(st.just("mkdir"), paths),
    st.tuples(st.just("rm"), paths | st.just("/opt/seed")),
    st.tuples(st.just("chmod"), paths, st.sampled_from(["600", "644", "755", "700", "4755"])),
    st.tuples(st.just("chown"), paths, st.sampled_from(["0:0", "1234:1234", "4242:7"])),
    st.tuples(st.just("symlink"), paths, st.sampled_from(["x", "../seed/x", "/nowhere", "d"])),
    st.tuples(st.just("fifo"), paths),
)


def script(op: tuple) -> str:
    """One operation as a shell line; one that cannot apply (its parent is a file, a write into a
    fifo) fails alone."""
    kind, path, *rest = op
    quoted = shlex.quote(path)
    parent = f"mkdir -p -- {shlex.quote(str(Path(path).parent))}"
    lines = {
        # not into a fifo (itself or a link's target): a write there waits for a reader forever
        "write": lambda: (
            f"{parent} && [ ! -p {quoted} ] && printf %s {shlex.quote(rest[0].hex())} > {quoted}"
        ),
        "mkdir": lambda: f"mkdir -p -- {quoted}",
        "rm": lambda: f"rm -rf -- {quoted}",
        "chmod": lambda: f"chmod {rest[0]} -- {quoted}",
        "chown": lambda: f"chown -h {rest[0]} -- {quoted}",
        "symlink": lambda: f"{parent} && ln -sfn {shlex.quote(rest[0])} {quoted}",
        "fifo": lambda: f"{parent} && rm -rf -- {quoted} && mkfifo {quoted}",
    }
    return f"( {lines[kind]()} ) 2>/dev/null"


@pytest.fixture(scope="module")
def tree_server(docker_client, tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    task = root / TASK
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    (task / "instruction.md").write_text("Change files.\n")
    (task / "task.toml").write_text('schema_version = "1.4"\n')
    srv = Server(root, HARBOR_OPENENV_MAX_SESSIONS="6")
    yield srv
    srv.stop()


def listing(env) -> str:
    result = env.exec(LISTING)
    assert result.observation.error is None, result.observation
    return result.observation.output


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=st.lists(ops, min_size=1, max_size=12))
def test_each_branch_has_exactly_the_parents_tree(tree_server, operations):
    with tree_server.client() as parent:
        assert parent.reset(task_id=TASK).observation.error is None
        done = parent.exec("; ".join(script(op) for op in operations) + "; true")
        assert done.observation.exit_code == 0, done.observation
        answer = parent.step(HarborAction(action_type="fork", n=2, token=TOKEN))
        assert answer.observation.error is None, answer.observation.error
        at_fork = listing(parent)
        assert "/opt/seed" in at_fork or any(op[1] == "/opt/seed" for op in operations)
        for ident in answer.observation.info["forks"]:
            with tree_server.client() as branch:
                started = branch.reset(fork=ident)
                assert started.observation.error is None, started.observation.error
                assert listing(branch) == at_fork
