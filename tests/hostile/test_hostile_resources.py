"""A hostile agent that fills a resource of its container before evaluate ("Hostile agents,
round four"): the stop before grading needs none of them, so a failing agent gets the 0.0 it
earned, never None.

A full process table turned a failing grade into None: the per-uid kill forked a child to drop to
the agent's uid, and that fork failed. The keeper now makes no process, allocates nothing and
opens nothing until the agent's processes are killed (helper/kill.c, stop.c). Each hog
(fixtures/hostile/attack.c ``hog``) holds its resource full until it is killed: pids (a sleeping
child in every slot that frees), memory (a child at the cgroup's limit, respawned as the OOM killer
ends it), fds (every descriptor RLIMIT_NOFILE allows, in eight processes), disk (/dev/shm, the
container's tmpfs, written full). Tried as root and as ``nobody`` beside the image's root service,
through a real server at its defaults (``scripts/test`` reruns it with the exec channel off)."""

from __future__ import annotations

import base64
import time

import pytest
from _processes import baseline_pids, build_attack, processes
from _server import Server

from harbor_openenv.sandbox import remove_containers
from harbor_openenv.sandbox.spec import ContainerSpec
from harbor_openenv.sandbox.starter import DockerStarter

pytestmark = pytest.mark.docker

SERVICE_DOCKERFILE = (
    "FROM debian:bookworm-slim\nWORKDIR /app\nRUN chmod 777 /app\n"
    'COPY service.sh /service.sh\nRUN chmod 755 /service.sh\nENTRYPOINT ["/service.sh"]\n'
)
# The image's root service: kept through an unprivileged agent's stop.
SERVICE = '#!/bin/sh\nsleep infinity </dev/null >/dev/null 2>&1 &\nexec "$@"\n'
LIMITS = "\n[environment]\nmemory_mb = 256\n"
HOGS = ["pids", "memory", "fds", "disk"]
TASKS = ["root", "nobody"]


@pytest.fixture(scope="module")
def attack(tmp_path_factory) -> bytes:
    return build_attack(tmp_path_factory.mktemp("attack"))


@pytest.fixture(scope="module")
def srv(docker_client, tmp_path_factory):
    from .test_hostile_verifier import make_task

    root = tmp_path_factory.mktemp("hostile-resources") / "tasks"
    files = {"environment/service.sh": SERVICE}
    make_task(root, "root", toml=LIMITS, files=files, dockerfile=SERVICE_DOCKERFILE)
    make_task(
        root,
        "nobody",
        toml=LIMITS + '\n[agent]\nuser = "nobody"\n',
        files=files,
        dockerfile=SERVICE_DOCKERFILE,
    )
    server = Server(root)
    yield server
    server.stop()


@pytest.mark.parametrize("hog", HOGS)
@pytest.mark.parametrize("task", TASKS)
def test_a_full_resource_still_grades(srv, attack, task, hog):
    """The hog is full when its launcher exits 0 (for pids: a fork of its failed); evaluate then
    scores the unsolved task 0.0 with no error."""
    with srv.client() as env:
        env.reset(task_id=task)
        env.write("attack.b64", base64.b64encode(attack).decode())
        started = env.exec(
            f"base64 -d attack.b64 > /tmp/attack && chmod 755 /tmp/attack && /tmp/attack hog {hog}"
        )
        assert started.observation.exit_code == 0, started.observation
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (0.0, None), result.observation


def test_a_full_process_table_keeps_the_root_service(docker_client, attack, tmp_path_factory):
    """The per-uid path under a full pids table: a ``nobody`` hog in every free slot, stopped
    without a free one; the image's root service is kept, nothing of the agent's is left."""
    from .test_hostile_processes import SERVICE_IMAGE, _tar, build_image

    image = build_image(
        docker_client, "harbor-openenv-test/service", SERVICE_IMAGE, tmp_path_factory.mktemp("s")
    )
    owner = f"test-hostile-resources-{time.monotonic_ns()}"
    backend = DockerStarter(lambda: docker_client, owner=owner)
    box = backend.start(
        ContainerSpec(image, workdir="/work", network="none", pids_limit=64), task_id="service"
    )
    try:
        box.upload("/tmp", _tar({"attack": attack}))
        box.mark_baseline()
        service = baseline_pids(box)
        assert service, "the ENTRYPOINT's service is in the baseline"
        hog = box.exec("/tmp/attack hog pids", timeout_s=30, max_output=100, user="nobody")
        assert hog.exit_code == 0, hog.output
        box.stop_processes()
        assert sorted(processes(box)) == sorted(service)
    finally:
        box.remove()
        remove_containers(docker_client, owner=owner)
