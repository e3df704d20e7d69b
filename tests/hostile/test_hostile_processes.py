"""A hostile agent's process tricks against the stop before grading ("Hostile agents, round
three"): nothing the agent started runs when grading starts, by construction.

The keeper (PID 1, root, not dumpable) ends every process of the agent's uids with one
``kill(-1, SIGKILL)`` per uid, or every process but itself when a root's code ran: threads whose
leader exited, orphaned groups the kernel continues, setsid and double forks, fork chains,
ptrace-stopped tracees. Tried as root, as ``nobody`` and as the image's own ``USER`` (no
``[agent].user``), against bare sandboxes (hypothesis) and through a real server."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import time
from pathlib import Path

import pytest
from _processes import baseline_pids, build_attack, processes
from _server import Server, exec_channel_on, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harbor_openenv.sandbox import remove_containers
from harbor_openenv.sandbox.spec import ContainerSpec
from harbor_openenv.sandbox.starter import DockerStarter

pytestmark = pytest.mark.docker

# An image whose USER is the agent (no [agent].user) and whose ENTRYPOINT starts a process of that
# user before the keepalive: the baseline shares the agent's uid, so the stop ends it too.
USER_IMAGE = """\
FROM debian:bookworm-slim
RUN echo 'app:x:1000:1000::/home/app:/bin/sh' >> /etc/passwd && echo 'app:x:1000:' >> /etc/group \\
    && mkdir -p /home/app /work && chown app /home/app /work && chmod 777 /work
COPY entrypoint.sh /entrypoint.sh
RUN chmod 755 /entrypoint.sh
USER app
WORKDIR /work
ENTRYPOINT ["/entrypoint.sh"]
"""
# An image whose ENTRYPOINT starts a root service: with an unprivileged agent it is kept.
SERVICE_IMAGE = """\
FROM debian:bookworm-slim
RUN mkdir -p /work && chmod 777 /work
COPY entrypoint.sh /entrypoint.sh
RUN chmod 755 /entrypoint.sh
WORKDIR /work
ENTRYPOINT ["/entrypoint.sh"]
"""
ENTRYPOINT = """\
#!/bin/sh
sleep infinity </dev/null >/dev/null 2>&1 &
exec "$@"
"""
FLAGS = ["setsid", "double", "leader", "orphan", "forks", "traced", "chain", "ptrace", "hup"]


def build_image(client, name: str, dockerfile: str, tmp: Path) -> str:
    """``name``:<content hash>, built with no network unless the engine has it already."""
    digest = hashlib.sha256((dockerfile + ENTRYPOINT).encode()).hexdigest()[:12]
    tag = f"{name}:{digest}"
    if not client.images.list(name=tag):
        (tmp / "Dockerfile").write_text(dockerfile)
        (tmp / "entrypoint.sh").write_text(ENTRYPOINT)
        subprocess.run(
            ["docker", "build", "-q", "--network", "none", "-t", tag, str(tmp)], check=True
        )
    return tag


@pytest.fixture(scope="module")
def attack(tmp_path_factory) -> bytes:
    return build_attack(tmp_path_factory.mktemp("attack"))


@pytest.fixture(scope="module")
def boxes(docker_client, tmp_path_factory, attack):
    """Three running sandboxes: debian (root default), the USER image, the root-service image."""
    owner = f"test-hostile-processes-{time.monotonic_ns()}"
    backend = DockerStarter(lambda: docker_client, owner=owner)
    images = {
        "debian": "debian:bookworm-slim",
        "user": build_image(
            docker_client, "harbor-openenv-test/user", USER_IMAGE, tmp_path_factory.mktemp("u")
        ),
        "service": build_image(
            docker_client,
            "harbor-openenv-test/service",
            SERVICE_IMAGE,
            tmp_path_factory.mktemp("s"),
        ),
    }
    started = {}
    try:
        for kind, image in images.items():
            box = backend.start(ContainerSpec(image, workdir="/work", network="none"), task_id=kind)
            started[kind] = box
            box.upload("/tmp", _tar({"attack": attack}))
        yield started
    finally:
        for box in started.values():
            box.remove()
        remove_containers(docker_client, owner=owner)


def _tar(files: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_the_keeper_is_root_and_out_of_every_agents_reach(boxes):
    """Item 1: PID 1 runs as root, whatever the image's USER, and no agent can ptrace it or
    open its memory: before, PID 1 ran as the image's user and was dumpable."""
    for kind, users in (("debian", ["root", "nobody"]), ("user", [None]), ("service", ["nobody"])):
        box = boxes[kind]
        status = box.exec_root("grep -E '^(Uid|Name):' /proc/1/status").output.split()
        assert status[:3] == ["Name:", "helper", "Uid:"] and status[3:7] == ["0"] * 4, status
        for user in users:
            tried = box.exec("/tmp/attack ptrace", timeout_s=10, max_output=1000, user=user)
            assert tried.output.strip() == "seize EPERM mem EACCES", (kind, user, tried.output)
            who = box.exec("id -un", timeout_s=10, max_output=100, user=user).output.strip()
            assert who == (user or "app"), (kind, who)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    case=st.sampled_from(
        [("debian", "root"), ("debian", "nobody"), ("user", None), ("service", "nobody")]
    ),
    flags=st.lists(st.sampled_from(FLAGS), min_size=1, max_size=4, unique=True),
)
def test_no_process_topology_survives_the_stop(boxes, tmp_path_factory, case, flags):
    """Items 1 and 2, generated: whatever shape the planter hides in, after the stop only the
    keeper and the baseline's safe processes run, nothing is planted in /logs/verifier and a
    /solution staged afterwards is not copied."""
    kind, user = case
    box = boxes[kind]
    box.ran_as.add("root" if kind != "service" else "nobody")
    box.stop_processes()  # what earlier examples left (the root service stays)
    box.mark_baseline()
    kept = sorted(baseline_pids(box))
    assert (
        box.exec_root(
            "rm -rf /tmp/stolen /solution /logs/verifier && mkdir -p -m 777 /logs/verifier"
        ).exit_code
        == 0
    )
    started = box.exec(
        "/tmp/attack plant " + " ".join(flags),
        timeout_s=10,
        max_output=1000,
        user=user,
        channel=exec_channel_on(),
    )
    assert started.exit_code == 0, started.output
    assert wait_until(lambda: len(processes(box)) > len(kept), 5), (case, flags)  # it runs

    box.stop_processes(prepare=(user or "", "/logs/verifier", "/tests", "stage"))
    solution = tmp_path_factory.mktemp("solution")
    (solution / "solve.sh").write_text("echo the answer\n")
    box.put_dir(solution, "/solution", executable="solve.sh")  # as solve stages it
    time.sleep(0.3)  # a survivor would have planted or copied by now

    # A survivor runs on; a file action of the runtime's own (the upload above, as root) may
    # still be ending when the engine answers.
    assert wait_until(lambda: sorted(processes(box)) == kept, 5), (case, flags, processes(box))
    for name in ("reward.txt", "reward.json"):
        assert box.read_engine_file(f"/logs/verifier/{name}", limit=100) is None, (case, flags)
    assert box.read_engine_file("/tmp/stolen", limit=100) is None, (case, flags)
    if "ptrace" in flags:
        result = box.read_engine_file("/tmp/ptrace-result", limit=100) or b""
        assert b"ok" not in result, (case, flags, result)


def test_the_root_service_outlives_an_unprivileged_agents_stop_and_a_root_one_ends_it(boxes):
    """The baseline is kept only where the agent cannot reach it: the service image's root
    loop survives a ``nobody`` agent's stop, and every process ends once root code ran."""
    box = boxes["service"]
    box.mark_baseline()
    service = baseline_pids(box)
    assert service, "the ENTRYPOINT's service is in the baseline"
    box.exec("/tmp/attack plant setsid leader", timeout_s=10, max_output=100, user="nobody")
    box.stop_processes()
    assert set(service) <= set(processes(box))
    box.exec("true", timeout_s=10, max_output=100, user="root")
    box.stop_processes()
    assert processes(box) == []


# -- through a real server at its defaults ---------------------------------------------------------

USER_DOCKERFILE = (
    "FROM debian:bookworm-slim\n"
    "RUN echo 'app:x:1000:1000::/app:/bin/sh' >> /etc/passwd && echo 'app:x:1000:' >> /etc/group\n"
    "WORKDIR /app\nRUN chown app /app\nUSER app\n"
)
NOBODY = '\n[agent]\nuser = "nobody"\n'
SOLUTION = {"solution/solve.sh": "#!/bin/bash\necho 42 > /app/answer.txt\n"}


@pytest.fixture(scope="module")
def srv(docker_client, tmp_path_factory):
    from .test_hostile_verifier import make_task

    root = tmp_path_factory.mktemp("hostile-processes") / "tasks"
    make_task(root, "root", files=SOLUTION)
    # the verifier runs as the agent's user too: the planter's uid can write /logs/verifier
    make_task(root, "nobody", toml='user = "nobody"\n' + NOBODY, files=SOLUTION)
    make_task(root, "image-user", dockerfile=USER_DOCKERFILE, files=SOLUTION)
    server = Server(root)
    yield server
    server.stop()


def _plant(env, attack: bytes, flags: str) -> None:
    env.write("attack.b64", base64.b64encode(attack).decode())
    started = env.exec(
        f"base64 -d attack.b64 > /tmp/attack && chmod 755 /tmp/attack && /tmp/attack plant {flags}"
    )
    assert started.observation.exit_code == 0, started.observation
    running = env.exec("sleep 0.2; ls /tmp")
    assert running.observation.exit_code == 0


TASKS = ["root", "nobody", "image-user"]


@pytest.mark.parametrize("task", TASKS)
def test_a_thread_whose_leader_exited_plants_nothing(srv, attack, task):
    """Item 2: a planter thread of a process whose main thread exited (state Z) outlived the
    stop, stopped; the agent's code that the verifier runs (hook.sh, as a test that imports the
    agent's module does) continued it, and it scored 1.0 unsolved, for root and for nobody."""
    with srv.client() as env:
        env.reset(task_id=task)
        env.write("hook.sh", "kill -CONT -1 2>/dev/null; sleep 0.2\n")
        _plant(env, attack, "leader orphan hup")
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (0.0, None), result.observation


@pytest.mark.parametrize("task", TASKS)
def test_the_keeper_cannot_be_taken_over(srv, attack, task):
    """Item 1: PID 1 ran as the image's user and was dumpable: an agent of that uid could ptrace
    it and write its memory. Now no agent can, whoever it runs as."""
    with srv.client() as env:
        env.reset(task_id=task)
        env.write("attack.b64", base64.b64encode(attack).decode())
        tried = env.exec(
            "base64 -d attack.b64 > /tmp/attack && chmod 755 /tmp/attack && /tmp/attack ptrace"
        )
        assert tried.observation.output.strip() == "seize EPERM mem EACCES", tried.observation
        uid = env.exec("awk '/^Uid:/ {print $2}' /proc/1/status || grep Uid /proc/1/status")
        assert uid.observation.output.split()[:1] == ["0"], uid.observation


@pytest.mark.parametrize("task", TASKS)
def test_solve_stages_its_solution_where_no_agent_process_reads_it(srv, attack, task):
    """Items 1 and 2: a planter that copies /solution/solve.sh while solve has it staged."""
    with srv.client() as env:
        env.reset(task_id=task)
        _plant(env, attack, "leader orphan hup setsid double")
        env.write("hook.sh", "kill -CONT -1 2>/dev/null; sleep 0.2\n")
        solved = env.solve()
        assert solved.observation.exit_code == 0, solved.observation
        stolen = env.exec("cat /tmp/stolen")
        assert stolen.observation.exit_code != 0, stolen.observation
        result = env.evaluate()
        assert result.reward == 1.0, result.observation
