"""The remote-engines guide's "A second engine on one machine", walked as written: its blocks
(marked ``<!-- harbor-openenv:road:engine-* -->``) make the certificates with openssl, start a
second ``dockerd`` beside the machine's own and stop it by its pidfile.

What the test substitutes is what the guide leaves to the user: the engine's folder
(``/srv/docker-2``, here a short folder in /tmp: a unix socket path holds 108 bytes) and its port
(2377, here a free one). The machine's engine at /var/run/docker.sock is only read (its base image
saved into the second engine, and its containers listed)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _engines import processes_naming, remove_engine_folder
from _remote import remote_env
from _server import BASE_IMAGES, Server, runtime_containers, wait_until
from _template_helpers import REPO, readme_block, shell

from harbor_openenv.client.launch import free_port
from harbor_openenv.sandbox.engine import connect

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

GUIDE = REPO / "docs" / "guides" / "remote-engines.md"
FOLDER, PORT = "/srv/docker-2", "2377"


@pytest.fixture
def engine_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="hoe-d2-", dir="/tmp"))
    try:
        yield folder
    finally:
        remove_engine_folder(folder)


def test_a_second_engine_as_the_guide_starts_it(tmp_path, engine_folder, docker_client):
    guide = GUIDE.read_text()
    port = str(free_port())

    def block(name: str) -> str:
        text = readme_block(guide, name)
        return text.replace(FOLDER, str(engine_folder)).replace(f":{PORT}", f":{port}")

    shell(block("engine-certs"), cwd=tmp_path, timeout=300)
    certs = tmp_path / "certs"
    assert {p.name for p in certs.glob("*.pem")} == {
        "ca.pem",
        "ca-key.pem",
        "server.pem",
        "server-key.pem",
        "cert.pem",
        "key.pem",
    }

    # the start block's last line: the engine's own data root, reached by TLS
    out = shell(block("engine-start"), cwd=tmp_path, timeout=180)
    assert out.strip().splitlines()[-1] == f"{engine_folder}/data", out
    tcp = f"tcp://127.0.0.1:{port}"
    tls = {"DOCKER_HOST": tcp, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(certs)}

    # without the client certificate the engine answers nothing
    bare = subprocess.run(
        ["docker", "-H", tcp, "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert bare.returncode != 0, bare.stdout

    # the guide's way to give it a base image, then a server by the block's settings
    source = BASE_IMAGES[0]
    shell(f"docker -H unix:///var/run/docker.sock save {source} | docker load", tmp_path, **tls)
    tasks = tmp_path / "tasks"
    shutil.copytree(REPO / "examples" / "dataset" / "tasks" / "hello-world", tasks / "hello-world")
    second = connect(environ=tls)  # verified against certs/ca.pem alone
    server = Server(tasks, TMPDIR=str(tmp_path), **remote_env(tls))
    try:
        with server.client() as env:
            env.reset(task_id="hello-world")
            assert len(runtime_containers(second)) == 1
            assert runtime_containers(docker_client, server.owner_prefix) == []
            assert env.write("/app/hello.txt", "Hello, world!\n").observation.error is None
            result = env.evaluate()
            assert (result.reward, result.observation.error) == (1.0, None), result.observation
    finally:
        server.stop()
    assert runtime_containers(second) == [], server.output
    second.close()

    shell(block("engine-stop"), cwd=tmp_path, timeout=120)
    assert wait_until(lambda: processes_naming(engine_folder) == [], timeout=30)
    assert not (engine_folder / "dockerd.pid").exists()
