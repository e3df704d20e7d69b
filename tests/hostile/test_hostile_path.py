"""The orchestrator's own root scripts in the agent's container (the sweep after a command timed
out, the verifier's folders and uploads, a step's clearing, a rollout's probes) never run what an
unprivileged agent planted earlier on the image's PATH. The image leaves /usr/local/bin (first on
its PATH) writable, as images do; a ``nobody`` agent shadows there every program those scripts
and a shell may call with a shim that marks who ran it, then the episode goes through them
(before the pristine verifier's copy and after it). The marks are read through the engine's
archive API, no exec: a shim ran as the agent (its own commands), never as root."""

from __future__ import annotations

import io
import tarfile

import pytest
from _server import Server, runtime_containers

from .test_hostile_verifier import make_task

pytestmark = pytest.mark.docker

DOCKERFILE = """\
FROM debian:bookworm-slim
WORKDIR /app
RUN chmod 777 /app && chmod 1777 /usr/local/bin
"""
# What a root script or a shell may run: the shells, coreutils and procps the runtime's scripts
# call, and what a login shell or bash itself might look up.
PROGRAMS = " ".join(
    ("sh bash dash rm mkdir rmdir cat cp mv ln chmod chown touch ls stat find xargs kill ps",
     "sleep tar gzip sed grep awk head tail tr sort uniq wc env id uname test timeout base64",
     "readlink dirname basename mktemp printf echo true false nohup setsid nice")
)  # fmt: skip
# Each shim: note "ran-<uid>-<name>" in /tmp, then run the real program (found before planting).
PLANT = (
    "for p in " + PROGRAMS + "; do real=$(type -P $p) || continue;"  # the file, not a builtin
    """ printf '#!/bin/dash\\n: > /tmp/ran-$(/usr/bin/id -u)-%s\\nexec %s "$@"\\n' $p "$real\""""
    " > /usr/local/bin/$p.new && chmod 755 /usr/local/bin/$p.new"
    " && /usr/bin/mv /usr/local/bin/$p.new /usr/local/bin/$p; done; /usr/bin/ls /usr/local/bin"
)


@pytest.fixture(scope="module")
def srv(docker_client, tmp_path_factory):
    tasks = tmp_path_factory.mktemp("path-tasks")
    make_task(tasks, "nobody", toml='\n[agent]\nuser = "nobody"\n', dockerfile=DOCKERFILE)
    with Server(
        tasks, HARBOR_OPENENV_PRISTINE_VERIFIER="*", HARBOR_OPENENV_POOL_SIZE="0"
    ) as server:
        yield server


def marks(docker_client, container_id: str) -> set[str]:
    """The ``ran-*`` marks in the container's /tmp, read as a tar from the engine."""
    stream, _ = docker_client.api.get_archive(container_id, "/tmp")
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        return {name.rsplit("/", 1)[-1] for name in tar.getnames() if "/ran-" in name}


def test_no_root_script_runs_a_program_the_agent_planted_on_path(srv, docker_client):
    with srv.client() as env:
        env.reset(task_id="nobody")
        host = env.exec("cat /etc/hostname").observation.output.strip()  # the container's id
        (container,) = [c["Id"] for c in runtime_containers(docker_client, srv.owner_prefix)
                        if c["Id"].startswith(host)]  # fmt: skip
        planted = env.exec(PLANT).observation
        assert planted.exit_code == 0 and planted.output.split() == sorted(PROGRAMS.split())
        assert env.exec("sleep 30", timeout_s=2).observation.exit_code is None  # the sweep
        env.write("answer.txt", "41")
        assert env.read("answer.txt").observation.output == "41"
        env.list(".")
        before = marks(docker_client, container)
        result = env.evaluate()
        assert (result.reward, result.observation.error) == (0.0, None), result.observation
        after = marks(docker_client, container)
    print(sorted(after))
    assert "ran-65534-bash" in before  # the shims are on PATH: the agent's own commands ran them
    assert not {mark for mark in after if mark.startswith("ran-0-")}, sorted(after)
