"""Forking an episode against a real server and engine (issue 29): the fork action commits the
episode's files, each ID starts one branch in a session of its own (``reset(fork=ID)``), the
branches diverge and are graded like fresh episodes, the parent goes on unchanged, and no image
or container is left behind."""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from _server import TOKEN, Server, runtime_containers, wait_until

from harbor_openenv import HarborAction, HarborEnvClient

pytestmark = pytest.mark.docker

TASK = "fork-me"
DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\nRUN chmod 777 /app\n"
GRADING = textwrap.dedent(
    """\
    #!/bin/bash
    if [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]; then r=1; else r=0; fi
    echo $r > /logs/verifier/reward.txt
    """
)
# The workdir's content, as one digest: every file's path and bytes.
DIGEST = "find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64"


def make_task(root: Path, name: str = TASK) -> Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text(GRADING)
    (task / "instruction.md").write_text("Write 42 to /app/answer.txt.\n")
    (task / "task.toml").write_text('schema_version = "1.4"\n\n[verifier]\ntimeout_sec = 60\n')
    return root


def fork_images(client, srv: Server) -> list:
    images = client.api.images(filters={"label": "harbor-openenv.fork"})
    return [
        i
        for i in images
        if (i.get("Labels") or {}).get("harbor-openenv.owner", "").startswith(srv.owner_prefix)
    ]


def digest(env) -> str:
    result = env.exec(DIGEST)
    assert result.observation.exit_code == 0, result.observation
    return result.observation.output.strip()


def test_branches_start_from_the_fork_diverge_and_leave_nothing(docker_client, tmp_path):
    """Two branches of an edited episode: the same workdir as the parent's at the fork, files
    of their own afterwards, graded 1.0 and 0.0 like fresh episodes; the parent goes on and
    grades on its own; once all have ended no fork image or container of the server is left."""
    srv = Server(make_task(tmp_path), HARBOR_OPENENV_DEFAULT_TASK=TASK)
    try:
        with srv.client() as parent:
            parent.reset(task_id=TASK)
            parent.write("notes.txt", "half done\n")
            parent.exec("mkdir -p src && echo 'print(1)' > src/main.py && echo 41 > answer.txt")
            at_fork = digest(parent)
            fixer, other = parent.fork(2)
            try:
                assert len(fork_images(docker_client, srv)) == 1
                for branch in (fixer, other):
                    assert digest(branch) == at_fork
                    assert branch.read("notes.txt").observation.output == "half done\n"
                    state = branch.state()
                    assert state.task_id == TASK and state.workdir == "/app"
                fixer.write("answer.txt", "42")
                fixer.write("only-fixer.txt", "mine")
                assert other.read("only-fixer.txt").observation.error  # not in the other branch
                assert other.exec("echo 40 > answer.txt").observation.exit_code == 0
                assert parent.read("answer.txt").observation.output == "41\n"  # unchanged
                graded = fixer.evaluate()
                assert (graded.done, graded.reward, graded.observation.error) == (True, 1.0, None)
                graded = other.evaluate()
                assert (graded.done, graded.reward) == (True, 0.0)
            finally:
                fixer.close()
                other.close()
            # The parent goes on: it still acts, and grades on its own.
            assert digest(parent) == at_fork
            graded = parent.evaluate()
            assert (graded.done, graded.reward) == (True, 0.0)

        def clean() -> bool:
            left = runtime_containers(docker_client, srv.owner_prefix)
            return not left and not fork_images(docker_client, srv)

        assert wait_until(clean, timeout=60), (
            runtime_containers(docker_client, srv.owner_prefix),
            fork_images(docker_client, srv),
        )
    finally:
        srv.stop()


def test_fork_is_refused_without_the_token_after_the_end_and_for_an_unknown_id(
    docker_client, tmp_path
):
    """fork needs the token; an ended episode cannot fork; a used or unknown ID starts nothing;
    IDs never used are removed with their image when the server stops."""
    srv = Server(make_task(tmp_path), HARBOR_OPENENV_DEFAULT_TASK=TASK)
    try:
        with srv.client() as env, HarborEnvClient(srv.url) as agent:
            env.reset(task_id=TASK)
            refused = agent.step(HarborAction(action_type="fork", n=1))
            assert "orchestration token" in refused.observation.error
            assert not refused.done and "forks" not in refused.observation.info
            wrong = env.step(HarborAction(action_type="fork", n=1, token=TOKEN + "x"))
            assert "orchestration token" in wrong.observation.error
            assert env.exec("true").observation.error is None  # the episode goes on
            assert not fork_images(docker_client, srv)

            kept = env.step(HarborAction(action_type="fork", n=2, token=TOKEN))
            ids = kept.observation.info["forks"]
            assert kept.observation.error is None and len(ids) == 2 and len(set(ids)) == 2
            assert len(fork_images(docker_client, srv)) == 1

            assert env.evaluate().done
            ended = env.step(HarborAction(action_type="fork", n=1, token=TOKEN))
            assert ended.done and "ended" in ended.observation.error
            with pytest.raises(RuntimeError, match="fork refused"):
                env.fork(1)

            unknown = agent.reset(fork="fork-nope")
            assert unknown.done and "no fork" in unknown.observation.error
            used = agent.reset(fork=ids[0])
            assert used.observation.error is None and used.observation.info["fork"] == ids[0]
            again = env.reset(fork=ids[0])
            assert again.done and "already used" in again.observation.error
        # ids[1] was never used: the image stays while the server runs, goes when it stops.
        assert wait_until(lambda: not runtime_containers(docker_client, srv.owner_prefix), 60)
        assert len(fork_images(docker_client, srv)) == 1
        srv.stop()
        assert not fork_images(docker_client, srv)
    finally:
        srv.stop()


def test_eight_branches_at_once(docker_client, tmp_path):
    """Eight branches, started together, each in its own session: each sees the fork's files
    and only its own afterwards."""
    srv = Server(make_task(tmp_path), HARBOR_OPENENV_MAX_SESSIONS="9")
    try:
        with srv.client() as parent:
            parent.reset(task_id=TASK)
            parent.write("shared.txt", "from the parent")
            ids = parent.step(HarborAction(action_type="fork", n=8, token=TOKEN))
            ids = ids.observation.info["forks"]

            def run(i_ident: tuple[int, str]) -> float | None:
                i, ident = i_ident
                with srv.client() as branch:
                    started = branch.reset(fork=ident)
                    assert started.observation.error is None, started.observation.error
                    assert branch.read("shared.txt").observation.output == "from the parent"
                    branch.write(f"branch-{i}.txt", str(i))
                    listed = branch.exec("ls branch-*.txt").observation.output.split()
                    assert listed == [f"branch-{i}.txt"], listed
                    branch.write("answer.txt", "42" if i % 2 else "0")
                    return branch.evaluate().reward

            with ThreadPoolExecutor(8) as pool:
                rewards = list(pool.map(run, enumerate(ids)))
            assert rewards == [float(i % 2) for i in range(8)]
            assert parent.exec("ls branch-*.txt").observation.exit_code != 0
        assert wait_until(lambda: not fork_images(docker_client, srv), 60)
    finally:
        srv.stop()
