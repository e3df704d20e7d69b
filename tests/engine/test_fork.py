"""Forking an episode against a real server and engine (issue 29): the fork action commits the
episode's files, each ID starts one branch in a session of its own (``reset(fork=ID)``), the
branches diverge and are graded like fresh episodes, the parent goes on unchanged, and no image
or container is left behind."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import threading
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
    images = client.api.images(all=True, filters={"label": "harbor-openenv.fork"})
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
        # ids[1] was never used: the container its fork started and the image stay while the
        # server runs (until HARBOR_OPENENV_FORK_TTL_S), and go when it stops.
        assert wait_until(lambda: len(runtime_containers(docker_client, srv.owner_prefix)) == 1)
        assert len(fork_images(docker_client, srv)) == 1
        srv.stop()
        assert not fork_images(docker_client, srv)
    finally:
        srv.stop()


def test_sixteen_branches_at_once_each_on_its_own(docker_client, tmp_path):
    """Sixteen branches of one fork (the most one fork makes), reset and driven at once, each in
    its own session over the WebSocket: each sees the fork's files, then only its own (a change
    in one is absent from the others and from the parent), and grades on its own; once they
    have ended, no container or fork image of the server is left."""
    srv = Server(make_task(tmp_path), HARBOR_OPENENV_MAX_SESSIONS="17")
    try:
        with srv.client() as parent:
            parent.reset(task_id=TASK)
            parent.write("shared.txt", "from the parent")
            ids = parent.step(HarborAction(action_type="fork", n=16, token=TOKEN))
            ids = ids.observation.info["forks"]
            assert len(set(ids)) == 16
            barrier = threading.Barrier(16, timeout=300)

            def run(i_ident: tuple[int, str]) -> tuple[float | None, list[str]]:
                i, ident = i_ident
                with srv.client() as branch:
                    started = branch.reset(fork=ident)
                    assert started.observation.error is None, started.observation.error
                    assert branch.read("shared.txt").observation.output == "from the parent"
                    branch.write(f"branch-{i}.txt", str(i))
                    branch.write("shared.txt", f"changed by {i}")
                    barrier.wait()  # every branch has written before any looks
                    listed = branch.exec("ls branch-*.txt").observation.output.split()
                    shared = branch.read("shared.txt").observation.output
                    assert shared == f"changed by {i}", shared
                    branch.write("answer.txt", "42" if i % 2 else "0")
                    return branch.evaluate().reward, listed

            with ThreadPoolExecutor(16) as pool:
                results = list(pool.map(run, enumerate(ids)))
            assert [reward for reward, _ in results] == [float(i % 2) for i in range(16)]
            assert [listed for _, listed in results] == [[f"branch-{i}.txt"] for i in range(16)]
            assert parent.exec("ls branch-*.txt").observation.exit_code != 0
            assert parent.read("shared.txt").observation.output == "from the parent"

        def clean() -> bool:
            left = runtime_containers(docker_client, srv.owner_prefix)
            return not left and not fork_images(docker_client, srv)

        assert wait_until(clean, 120), runtime_containers(docker_client, srv.owner_prefix)
    finally:
        srv.stop()


def test_an_unused_id_expires_with_its_container(docker_client, tmp_path):
    """HARBOR_OPENENV_FORK_TTL_S: an ID not used in time is refused with an error naming the
    setting, the container its fork started is removed at once, and the image goes when the
    branch that was used ends."""
    srv = Server(make_task(tmp_path), HARBOR_OPENENV_FORK_TTL_S="8")
    try:
        with srv.client() as parent, srv.client() as late:
            parent.reset(task_id=TASK)
            parent.write("answer.txt", "42")
            ids = parent.step(HarborAction(action_type="fork", n=2, token=TOKEN))
            used, unused = ids.observation.info["forks"]
            with srv.client() as branch:
                assert branch.reset(fork=used).observation.error is None
                # the parent, the branch and the container started for the unused ID, until
                # the ID expires
                assert wait_until(
                    lambda: len(runtime_containers(docker_client, srv.owner_prefix)) == 3, 8
                )
                assert wait_until(
                    lambda: len(runtime_containers(docker_client, srv.owner_prefix)) == 2, 60
                )
                refused = late.reset(fork=unused)
                assert refused.done and "expired" in refused.observation.error
                assert "HARBOR_OPENENV_FORK_TTL_S" in refused.observation.error
                assert len(fork_images(docker_client, srv)) == 1  # the branch still runs on it
                assert branch.evaluate().reward == 1.0
            assert wait_until(lambda: not fork_images(docker_client, srv), 60)
    finally:
        srv.stop()


# A trainer's fork() with the light client (openenv hidden), sync and async.
LIGHT_FORK = """
import asyncio, sys
sys.modules["openenv"] = None
from harbor_openenv import HarborEnvClient
import harbor_openenv._openenv as bases

url, token = sys.argv[1], sys.argv[2]
assert bases.EnvClient.__module__ == "harbor_openenv._light", bases.EnvClient.__module__
with HarborEnvClient(url, orchestration_token=token) as env:
    env.reset(task_id="fork-me")
    env.write("answer.txt", "41")
    fixer, other = env.fork(2)
    with fixer, other:
        print("seen", fixer.read("answer.txt").observation.output,
              other.read("answer.txt").observation.output)
        fixer.write("answer.txt", "42")
        print("rewards", fixer.evaluate().reward, other.evaluate().reward)
    print("parent", env.read("answer.txt").observation.output)

async def main():
    async with HarborEnvClient(url, orchestration_token=token) as env:
        await env.reset(task_id="fork-me")
        await env.write("answer.txt", "42")
        (branch,) = await env.fork(1)
        print("async reward", (await branch.evaluate()).reward)
        await branch.close()

asyncio.run(main())
print("openenv loaded", "openenv" in {m.split(".")[0] for m, v in sys.modules.items() if v})
"""


def test_the_light_client_forks(docker_client, tmp_path):
    """HarborEnvClient.fork on the light client (the client extra, without openenv): the
    branches come back connected and reset, sync and async."""
    srv = Server(make_task(tmp_path), HARBOR_OPENENV_MAX_SESSIONS="4")
    try:
        result = subprocess.run(
            [sys.executable, "-c", LIGHT_FORK, srv.url, TOKEN],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines == [
            "seen 41 41",
            "rewards 1.0 0.0",
            "parent 41",
            "async reward 1.0",
            "openenv loaded False",
        ], result.stdout
    finally:
        srv.stop()


ENTRY_DOCKERFILE = textwrap.dedent(
    """\
    FROM debian:bookworm-slim
    RUN useradd -m -u 1234 worker && mkdir /app && chown worker /app \\
        && printf '#!/bin/sh\\necho started >> /app/.entry.log\\nexec "$@"\\n' > /entry.sh \\
        && chmod 755 /entry.sh
    USER worker
    WORKDIR /app
    ENTRYPOINT ["/entry.sh"]
    CMD ["sleep", "infinity"]
    """
)


def test_a_branch_starts_as_its_task_image_does(docker_client, tmp_path):
    """The committed image keeps the task image's ENTRYPOINT, CMD, USER and WORKDIR (not the
    keeper's): the branch's ENTRYPOINT runs again, as the image's user."""
    root = make_task(tmp_path)
    (root / TASK / "environment" / "Dockerfile").write_text(ENTRY_DOCKERFILE)
    srv = Server(root)
    try:
        with srv.client() as parent:
            parent.reset(task_id=TASK)
            assert parent.exec("id -un; wc -l < .entry.log").observation.output.split() == [
                "worker",
                "1",
            ]
            parent.exec("echo 42 > answer.txt")
            (branch,) = parent.fork(1)
            with branch:
                (image,) = fork_images(docker_client, srv)
                config = docker_client.api.inspect_image(image["Id"])["Config"]
                assert config["Entrypoint"] == ["/entry.sh"]
                assert config["Cmd"] == ["sleep", "infinity"]
                assert (config["User"], config["WorkingDir"]) == ("worker", "/app")
                seen = branch.exec("id -un; wc -l < .entry.log").observation.output.split()
                assert seen == ["worker", "2"]  # the parent's line, and its own start's
                assert branch.evaluate().reward == 1.0
    finally:
        srv.stop()


FORMAT_TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "format"


def test_a_multi_step_branch_goes_on_at_the_step_and_compose_is_refused(docker_client):
    """A fork after step one: the branch is at step two, its instruction and the step's files
    there, and its reward counts step one's result; a compose task's fork is refused (its
    sidecars are not forked) and its episode goes on."""
    srv = Server(FORMAT_TASKS, HOE_FORMAT_GREETING="hello", HARBOR_OPENENV_MAX_SESSIONS="4")
    try:
        with srv.client() as parent:
            parent.reset(task_id="multi-step")
            parent.solve()
            middle = parent.evaluate().observation
            assert middle.info["step"]["name"] == "two"
            (branch,) = parent.fork(1)
            with branch:
                started = branch.state()
                assert started.task_id == "multi-step"
                ls = branch.exec("id -un; cat seed.txt setup-note.txt").observation.output
                assert ls.split() == ["agent", "seeded", "from-setup"]
                branch.solve()
                last = branch.evaluate()
                assert last.done and last.reward == 1.0, last.observation
                info = last.observation.info
                assert [s["name"] for s in info["steps"]] == ["one", "two"]
                assert [s["reward"] for s in info["steps"]] == [1.0, 1.0]
            last = parent.evaluate()  # the parent, with step two not done
            assert last.done and last.reward is not None and last.reward < 1.0
        with srv.client() as env:
            env.reset(task_id="compose")
            refused = env.step(HarborAction(action_type="fork", n=1, token=TOKEN))
            assert "compose" in refused.observation.error and not refused.done
            assert env.exec("true").observation.error is None
        assert not fork_images(docker_client, srv)
    finally:
        srv.stop()


def test_a_dead_servers_fork_images_are_swept(docker_client, tmp_path):
    """A server killed with -9 leaves its fork image; the next server's start-up sweep removes
    it (it carries the dead server's owner label)."""
    root = make_task(tmp_path)
    srv = Server(root)
    try:
        with srv.client() as env:
            env.reset(task_id=TASK)
            assert env.step(HarborAction(action_type="fork", n=1, token=TOKEN)).observation.info
            assert len(fork_images(docker_client, srv)) == 1
            srv.stop(signal.SIGKILL)
        assert len(fork_images(docker_client, srv)) == 1
        with Server(root):
            assert wait_until(lambda: not fork_images(docker_client, srv), timeout=60)
    finally:
        srv.stop()


def test_a_branch_forks_too_and_every_image_goes(docker_client, tmp_path):
    """A fork of a branch (a child of the first fork's image) carries both episodes' files; when
    all have ended, both images are gone, child first."""
    srv = Server(make_task(tmp_path))
    try:
        with srv.client() as parent:
            parent.reset(task_id=TASK)
            parent.write("one.txt", "1")
            (branch,) = parent.fork(1)
            with branch:
                branch.write("two.txt", "2")
                (grandchild,) = branch.fork(1)
                with grandchild:
                    assert digest(grandchild) == digest(branch)
                    assert grandchild.exec("cat one.txt two.txt").observation.output == "12"
                    assert len(fork_images(docker_client, srv)) == 2
                    grandchild.write("answer.txt", "42")
                    assert grandchild.evaluate().reward == 1.0
                assert branch.evaluate().reward == 0.0
        assert wait_until(lambda: not fork_images(docker_client, srv), 60), fork_images(
            docker_client, srv
        )
    finally:
        srv.stop()


def test_fork_from_async_code(docker_client, tmp_path):
    """Inside an event loop ``fork`` is awaited, as every client method is."""
    srv = Server(make_task(tmp_path))

    async def main() -> list[str]:
        async with HarborEnvClient(srv.url, orchestration_token=TOKEN) as env:
            await env.reset(task_id=TASK)
            await env.write("answer.txt", "42")
            branches = await env.fork(2)
            seen = []
            for branch in branches:
                seen.append((await branch.read("answer.txt")).observation.output)
                await branch.close()
            return seen

    try:
        assert asyncio.run(main()) == ["42", "42"]
    finally:
        srv.stop()


PLANT = "echo 1 > /logs/verifier/reward.txt && echo '{\"reward\": 1}' > /logs/verifier/reward.json"
KEEP_PLANTING = (
    'nohup sh -c \'while :; do echo {\\"reward\\": 1} > /logs/verifier/reward.json;'
    " sleep 0.05; done' >/dev/null 2>&1 &"
)


def test_a_branch_inherits_no_planted_reward(docker_client, tmp_path):
    """A reward the parent's agent planted in /logs/verifier before the fork is in the branch's
    files, yet never scores: the branch's evaluate stops its processes (one that keeps planting
    too) and hands the verifier a fresh /logs/verifier, as for a fresh episode."""
    srv = Server(make_task(tmp_path))
    try:
        with srv.client() as parent:
            parent.reset(task_id=TASK)
            assert parent.exec(PLANT).observation.exit_code == 0
            (branch,) = parent.fork(1)
            with branch:
                planted = branch.exec("cat /logs/verifier/reward.txt").observation.output
                assert planted == "1\n"  # carried: the branch's files are the parent's
                assert branch.exec(KEEP_PLANTING).observation.exit_code == 0
                graded = branch.evaluate()
                assert (graded.done, graded.reward) == (True, 0.0), graded.observation
            assert parent.evaluate().reward == 0.0
    finally:
        srv.stop()
