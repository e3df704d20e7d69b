"""The runtime against a real Docker engine, driven over the WebSocket API by the real client."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import FIXTURE_TASKS, Server, runtime_containers, wait_until
from websockets.sync.client import connect

pytestmark = pytest.mark.docker


def test_noop_scores_zero_and_oracle_scores_one(server):
    with server.client() as env:
        env.reset(task_id="edit-file")
        nop = env.evaluate()
        assert (nop.reward, nop.done, nop.observation.error) == (0.0, True, None)

        env.reset(task_id="edit-file")
        solved = env.solve()
        assert solved.observation.exit_code == 0 and not solved.done
        oracle = env.evaluate()
        assert (oracle.reward, oracle.done) == (1.0, True)


def test_agent_edit_through_write_scores_one(server):
    with server.client() as env:
        reset = env.reset(task_id="edit-file")
        assert reset.observation.workdir == "/work"  # the image's WORKDIR
        assert "42" in reset.observation.instruction
        written = env.write("answer.txt", "42\n")
        assert written.observation.error is None
        assert env.read("answer.txt").observation.output == "42\n"
        assert env.evaluate().reward == 1.0


def test_reward_planted_by_the_agent_never_counts(server):
    with server.client() as env:
        env.reset(task_id="edit-file")
        env.write(
            "plant.sh",
            "while true; do\n"
            "  echo 1 > /logs/verifier/reward.txt\n"
            "  echo '{\"reward\": 1}' > /logs/verifier/reward.json\n"
            "done\n",
        )
        planted = env.exec("nohup bash plant.sh >/dev/null 2>&1 &")
        assert planted.observation.exit_code == 0
        running = env.exec("sleep 0.5; grep -l plant.sh /proc/[0-9]*/cmdline | wc -l")
        assert int(running.observation.output) >= 1  # the planter is still at work
        result = env.evaluate()
        assert result.reward == 0.0, result.observation


def test_missing_reward_gives_none_and_an_error(server):
    with server.client() as env:
        env.reset(task_id="no-reward")
        result = env.evaluate()
        assert result.reward is None
        assert result.done
        assert "no reward" in result.observation.error
        assert "forgets to write a reward" in result.observation.output


def test_reward_json_with_several_keys(server):
    with server.client() as env:
        env.reset(task_id="multi-metric")
        result = env.evaluate()
        # reward.json wins over reward.txt (which says 1); its 'reward' key is the scalar.
        assert result.reward == 0.75
        info = result.observation.info
        assert info["metrics"] == {"score": 0.25, "reward": 0.75, "passed": 3.0}
        assert info["reward_details"] == {"resolved": False, "failing": ["test_b"]}


def test_the_reward_key_setting_picks_among_metrics_without_a_reward_key(tmp_path, docker_client):
    """A reward.json of several metrics and no 'reward' key: None with an error by default
    (Harbor reports the metrics without a reward), the named key or mean with the setting."""
    task = tmp_path / "tasks" / "metrics-only"
    shutil.copytree(FIXTURE_TASKS / "multi-metric", task)
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\necho \'{"f2p": 1, "p2p": 0.5}\' > /logs/verifier/reward.json\n'
    )
    for rule, expected in ((None, None), ("p2p", 0.5), ("mean:f2p,p2p", 0.75)):
        srv = Server(tmp_path / "tasks", **({"HARBOR_OPENENV_REWARD_KEY": rule} if rule else {}))
        try:
            with srv.client() as env:
                env.reset(task_id="metrics-only")
                result = env.evaluate()
        finally:
            srv.stop()
        assert result.reward == expected, (rule, result.observation.error)
        assert result.observation.info["metrics"] == {"f2p": 1.0, "p2p": 0.5}
        assert (result.observation.error is None) == (rule is not None), result.observation.error


def test_verifier_timeout_gives_none(server):
    with server.client() as env:
        env.reset(task_id="slow-verifier")
        result = env.evaluate()
        assert result.reward is None
        assert "timed out after 2 s" in result.observation.error


@pytest.mark.parametrize(
    ("setup", "path"),
    [
        (None, "../etc/passwd"),
        (None, "/tests/test.sh"),
        (None, "/etc/passwd"),
        ("mkdir -p /solution && echo secret > /solution/solve.sh && ln -s /solution sol", "sol"),
        ("ln -s /solution/solve.sh answer", "answer"),
        ("mkdir -p deep && ln -s ../.. deep/up", "deep/up/etc/passwd"),
    ],
)
def test_path_escapes_are_refused(server, setup, path):
    with server.client() as env:
        env.reset(task_id="edit-file")
        if setup:
            assert env.exec(setup).observation.exit_code == 0
        for result in (env.read(path), env.write(path, "x"), env.list(path)):
            assert result.observation.error is not None
            assert "refused" in result.observation.error, result.observation.error
        if setup and "secret" in setup:
            # The agent's own shell can read what the agent itself put there, nothing more:
            # /tests and /solution do not exist until the orchestrator stages them.
            assert env.exec("ls /tests").observation.exit_code != 0


def test_tests_and_solution_are_absent_until_staged(server):
    with server.client() as env:
        env.reset(task_id="edit-file")
        look = env.exec("ls -d /tests /solution 2>&1; true")
        assert "No such file" in look.observation.output
        env.solve()
        # The oracle has run; its files are gone again.
        assert env.exec("test -e /solution").observation.exit_code == 1


def test_text_only_task_is_refused_with_the_explanation(server):
    with server.client() as env:
        result = env.reset(task_id="text-only")
        assert result.done
        assert "text-only" in result.observation.error
        assert "solution/patch.diff" in result.observation.error


def test_invalid_task_names_the_file_and_field(server):
    with server.client() as env:
        result = env.reset(task_id="broken/nested-invalid")
        error = result.observation.error
        assert "broken/nested-invalid/task.toml" in error
        assert "[environment].cpus" in error


def test_unknown_task_id(server):
    with server.client() as env:
        assert "unknown task id 'nope'" in env.reset(task_id="nope").observation.error


def test_exec_timeout_kills_the_process(server):
    with server.client() as env:
        env.reset(task_id="edit-file")
        result = env.exec("sleep 1000 & sleep 1001; echo never", timeout_s=1)
        assert result.observation.timed_out
        assert result.observation.exit_code is None
        assert "never" not in result.observation.output
        left = env.exec("grep -l 'sleep 100[01]' /proc/[0-9]*/cmdline 2>/dev/null | wc -l")
        assert left.observation.output.strip() == "0"


def test_huge_output_is_capped(server):
    with server.client() as env:
        env.reset(task_id="edit-file")
        result = env.exec("head -c 100000000 /dev/zero | tr '\\0' a; echo; echo done >&2")
        assert result.observation.truncated
        assert result.observation.exit_code == 0
        assert len(result.observation.output) == 1 << 20  # the default cap
        assert set(result.observation.output) == {"a"}


def test_orchestration_needs_the_token(server):
    from harbor_openenv.client import HarborEnvClient

    with HarborEnvClient(server.url) as env:  # no token
        env.reset(task_id="edit-file")
        for result in (env.evaluate(), env.solve()):
            assert result.reward is None and not result.done
            assert "orchestration" in result.observation.error
        assert env.exec("true").observation.exit_code == 0  # the episode goes on


def test_task_limits_workdir_and_network(server, docker_client):
    with server.client() as env:
        reset = env.reset(task_id="limits")
        assert reset.observation.workdir == "/srv/project"  # task.toml overrides WORKDIR
        nets = env.exec("ls /sys/class/net").observation.output.split()
        assert nets == ["lo"]
        (info,) = [
            c
            for c in runtime_containers(docker_client, server.owner_prefix)
            if c["Labels"]["harbor-openenv.task"] == "limits"
        ]
        host = docker_client.api.inspect_container(info["Id"])["HostConfig"]
        assert host["NanoCpus"] == 500_000_000
        assert host["Memory"] == 256 * 1024 * 1024  # legacy memory = "256M"
        assert host["NetworkMode"] == "none"  # allow_internet = false
        assert env.evaluate().reward == 1.0  # the verifier ran in /srv/project too


def test_episode_end_and_disconnect_leave_no_container(server, docker_client):
    mine = lambda: runtime_containers(docker_client, server.owner_prefix)  # noqa: E731
    assert wait_until(lambda: not mine())
    with server.client() as env:
        env.reset(task_id="edit-file")
        assert len(mine()) == 1
        env.evaluate()
        assert wait_until(lambda: not mine())  # removed in the background after the answer
        env.reset(task_id="edit-file")
        assert len(mine()) == 1
        env.reset(task_id="edit-file")  # a new reset replaces the old container
        assert wait_until(lambda: len(mine()) == 1)
    assert wait_until(lambda: not mine())  # a clean close

    # A client that vanishes without a close frame (a crashed trainer): drop the TCP socket.
    with contextlib.suppress(Exception), connect(server.url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"task_id": "edit-file"}}))
        assert json.loads(ws.recv(timeout=120))["type"] == "observation"
        assert len(mine()) == 1
        ws.socket.close()
    assert wait_until(lambda: not mine()), "a dropped connection left its container behind"


def test_server_killed_and_restarted_leaves_no_container(docker_client):
    first = Server(FIXTURE_TASKS)
    try:
        with first.client() as env:
            env.reset(task_id="edit-file")
            orphans = runtime_containers(docker_client, first.owner_prefix)
            assert len(orphans) == 1
            first.stop(signal.SIGKILL)
        assert len(runtime_containers(docker_client, first.owner_prefix)) == 1
    finally:
        first.stop(signal.SIGKILL)
    second = Server(FIXTURE_TASKS)
    try:
        assert runtime_containers(docker_client, first.owner_prefix) == []
        with second.client() as env:
            env.reset(task_id="edit-file")
            assert len(runtime_containers(docker_client, second.owner_prefix)) == 1
    finally:
        second.stop(signal.SIGTERM)  # a clean shutdown removes what it started
    assert runtime_containers(docker_client, second.owner_prefix) == []


def test_concurrent_sessions_each_get_their_own_container(server, docker_client):
    barrier = threading.Barrier(8)

    def episode(i: int) -> tuple[float | None, str]:
        with server.client() as env:
            env.reset(task_id="edit-file")
            if i % 2 == 0:
                env.write("answer.txt", "42")
            else:
                env.write("answer.txt", str(i))
            marker = env.exec(f"echo {i} > /tmp/session; hostname").observation.output.strip()
            barrier.wait(timeout=120)  # all eight containers exist at once
            mine = env.exec("cat /tmp/session").observation
            assert mine.output.strip() == str(i), mine  # the whole observation, if it fails
            return env.evaluate().reward, marker

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(episode, range(8)))
    assert [reward for reward, _ in results] == [1.0 if i % 2 == 0 else 0.0 for i in range(8)]
    assert len({host for _, host in results}) == 8
    assert wait_until(lambda: not runtime_containers(docker_client, server.owner_prefix))


def test_build_failure_and_build_timeout_are_clear(tmp_path, docker_client):
    tasks = tmp_path / "tasks"
    for name, dockerfile, build_timeout in (
        ("fails", "FROM debian:bookworm-slim\nRUN echo about-to-fail && exit 3\n", 60),
        ("slow", "FROM debian:bookworm-slim\nRUN sleep 20\n", 2),
    ):
        task = tasks / name
        shutil.copytree(FIXTURE_TASKS / "edit-file", task)
        (task / "environment" / "Dockerfile").write_text(dockerfile + f"# {tmp_path}\n")
        toml = (
            (task / "task.toml")
            .read_text()
            .replace("build_timeout_sec = 120", f"build_timeout_sec = {build_timeout}")
        )
        (task / "task.toml").write_text(toml)
    srv = Server(tasks)
    try:
        with srv.client() as env:
            failed = env.reset(task_id="fails").observation.error
            assert "fails: building environment/Dockerfile failed" in failed
            assert "about-to-fail" in failed  # the build log's tail
            slow = env.reset(task_id="slow").observation.error
            assert "timed out after 2 s ([environment].build_timeout_sec)" in slow
    finally:
        srv.stop()


def test_identical_environments_build_once(tmp_path, docker_client):
    from harbor_openenv.images.resolver import ImageResolver
    from harbor_openenv.tasks.dataset import Dataset

    tasks = tmp_path / "tasks"
    for name in ("a", "b"):
        shutil.copytree(FIXTURE_TASKS / "edit-file", tasks / name)
        (tasks / name / "environment" / "Dockerfile").write_text(
            f"FROM debian:bookworm-slim\nRUN sleep 1\n# unique to this test run: {tmp_path}\n"
        )
    resolver = ImageResolver(docker_client)
    builds = []
    real = resolver._stream_build
    resolver._stream_build = lambda *args: builds.append(args) or real(*args)
    dataset = Dataset(tasks)
    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            refs = list(pool.map(resolver.resolve, [dataset["a"], dataset["b"]] * 3))
        assert len(set(refs)) == 1 and len(builds) == 1
        assert ImageResolver(docker_client).resolve(dataset["a"]) == refs[0]  # survives restart
        assert len(builds) == 1
    finally:
        docker_client.images.remove(refs[0], force=True)


def test_local_only_image_is_never_pulled(tmp_path, docker_client):
    from harbor_openenv.images.resolver import ImageError, ImageResolver
    from harbor_openenv.tasks.dataset import Dataset

    task = tmp_path / "tasks" / "local"
    shutil.copytree(FIXTURE_TASKS / "edit-file", task)
    shutil.rmtree(task / "environment")
    ref = "harbor-openenv-test/generated-elsewhere:missing"
    (task / "task.toml").write_text(
        f'[environment]\ndocker_image = "{ref}"\n\n'
        f'[metadata.repo2env.reproducibility]\nmode = "local_only"\nimage_ref = "{ref}"\n'
    )
    resolver = ImageResolver(docker_client)
    resolver._pull = lambda *a: pytest.fail("a local_only image must never be pulled")
    with pytest.raises(ImageError, match="never pulled"):
        resolver.resolve(Dataset(tmp_path / "tasks")["local"])


def test_registry_and_docker_image_use_the_local_image_without_building(tmp_path, docker_client):
    from harbor_openenv.images.resolver import ImageResolver
    from harbor_openenv.tasks.dataset import Dataset

    root = tmp_path / "tasks"
    for name, toml in (
        ("prebuilt", '[environment]\ndocker_image = "debian:bookworm-slim"\n'),
        (
            "registry",
            '[metadata.repo2env.reproducibility]\nmode = "registry"\n'
            'image_ref = "debian:bookworm-slim"\n',
        ),
    ):
        shutil.copytree(FIXTURE_TASKS / "edit-file", root / name)
        (root / name / "task.toml").write_text(toml)
    resolver = ImageResolver(docker_client)
    resolver._stream_build = lambda *a: pytest.fail("nothing should be built")
    resolver._pull = lambda *a: pytest.fail("a present image is not pulled")
    dataset = Dataset(root)
    assert resolver.resolve(dataset["prebuilt"]) == "debian:bookworm-slim"
    assert resolver.resolve(dataset["registry"]) == "debian:bookworm-slim"


def test_health_answers_without_docker(tmp_path):
    """/health must not touch the engine: point the server at an engine that does not exist."""
    srv = Server(FIXTURE_TASKS, DOCKER_HOST=f"unix://{tmp_path}/no-such-docker.sock")
    try:
        import httpx

        assert httpx.get(f"{srv.url}/health").json() == {"status": "healthy"}
        with srv.client() as env:
            assert "docker" in env.reset(task_id="edit-file").observation.error.lower()
    finally:
        srv.stop()


def test_tasks_that_differ_from_the_manifest_are_refused(tmp_path, docker_client):
    from harbor_openenv.datasets.manifest import MANIFEST_NAME, write_manifest

    tasks = tmp_path / "tasks"
    for name in ("edit-file", "no-reward"):
        shutil.copytree(FIXTURE_TASKS / name, tasks / name)
    write_manifest(tasks, tmp_path / MANIFEST_NAME)
    (tasks / "no-reward" / "tests" / "test.sh").write_text(
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
    )
    srv = Server(tasks)
    try:
        with srv.client() as env:
            error = env.reset(task_id="no-reward").observation.error
            assert "do not match tasks.sha256" in error
            assert "changed: tasks/no-reward/tests/test.sh" in error
            assert env.reset(task_id="edit-file").observation.error is None
    finally:
        srv.stop()


def test_owner_liveness(docker_client):
    """Whose containers the startup sweep may remove: only those of servers known to be dead."""
    import os

    from harbor_openenv.sandbox import owner_alive, server_identity, server_scope

    assert server_scope().startswith("h-")  # these tests run on the host
    assert owner_alive(docker_client, server_identity())
    assert not owner_alive(docker_client, f"{server_scope()}:{os.getpid()}:0")  # PID reused
    # A server in a container is alive while that container runs; an unknown container is gone.
    running = docker_client.containers.run(
        "debian:bookworm-slim", ["sleep", "60"], detach=True, network_mode="none"
    )
    try:
        assert owner_alive(docker_client, f"c-{running.id[:12]}:1:123")
        running.kill()
        running.wait()
        assert not owner_alive(docker_client, f"c-{running.id[:12]}:1:123")
    finally:
        running.remove(force=True)
    assert not owner_alive(docker_client, "c-0123456789ab:1:123")
    # A server on another host (or seen from inside a container) cannot be checked: kept.
    assert owner_alive(docker_client, "h-some-other-host:1:123")
