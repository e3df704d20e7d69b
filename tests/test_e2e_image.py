"""The decisive end-to-end test: render the example, build its image offline, drive the container.

Render the bundled example dataset with a wheel pin, put every dependency's wheel into the
rendered wheels/, `docker build` with no network at all, run the image with the Docker socket
mounted on the host network, and play episodes over the WebSocket API with the runtime's client.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    ROOT,
    TOKEN,
    add_wheels,
    build_offline,
    runtime_containers,
    serve_image,
    wait_until,
)

from harbor_openenv.launch import free_port

pytestmark = pytest.mark.docker


@pytest.fixture(scope="session")
def rendered_env(tmp_path_factory, runtime_wheel, dependency_wheels) -> tuple[Path, int]:
    port = free_port()
    destination = tmp_path_factory.mktemp("rendered") / "example-env"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "copier",
            "copy",
            "--trust",
            "--defaults",
            "--quiet",
            "--vcs-ref",
            "HEAD",
            "-d",
            f"runtime_pin={runtime_wheel}",
            "-d",
            f"port={port}",
            str(ROOT),
            str(destination),
        ],
        check=True,
    )
    wheels = destination / "wheels"
    assert (wheels / runtime_wheel.name).is_file()  # copied by the copy task for a wheel pin
    add_wheels(dependency_wheels, wheels)
    return destination, port


@pytest.fixture(scope="session")
def env_image(docker_client, rendered_env) -> str:
    """The rendered Dockerfile, built with network "none": only wheels/ can provide packages."""
    path, _ = rendered_env
    tag, log = build_offline(path)
    assert "from wheels/ only" in log
    yield tag
    docker_client.images.remove(tag, force=True)


@pytest.fixture(scope="session")
def env_server(docker_client, env_image, rendered_env):
    _, port = rendered_env
    with serve_image(docker_client, env_image, port) as served:
        yield served


def test_rendered_image_serves_the_example_over_websocket(env_server, docker_client):
    from harbor_openenv.client import HarborEnvClient

    url, server = env_server
    server_id = f"c-{server.id[:12]}:"  # the owner label of a server running in a container
    with HarborEnvClient(url, orchestration_token=TOKEN) as env:
        start = time.monotonic()
        first = env.reset(task_id="repo2env-style")
        obs = first.observation
        assert obs.error is None, obs.error
        assert len(runtime_containers(docker_client, server_id)) == 1  # labelled as its own
        assert obs.workdir == "/workspace"  # the image's WORKDIR
        assert "slugify" in obs.instruction
        assert env.exec("pwd").observation.output.strip() == "/workspace"
        nop = env.evaluate()
        assert nop.reward == 0.0, nop.observation
        assert nop.observation.info["reward_details"]["resolved"] is False

        env.reset(task_id="repo2env-style")
        source = env.read("textkit/slug.py").observation.output
        fixed = source.replace(
            'return re.sub(r"[^a-z0-9]", "-", text.lower())',
            'return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")',
        )
        assert fixed != source
        assert env.write("textkit/slug.py", fixed).observation.error is None
        assert "slug.py" in env.exec("git status --short").observation.output
        result = env.evaluate()
        assert result.reward == 1.0, result.observation
        assert result.observation.info["reward_details"]["resolved"] is True
        print(f"two episodes through the built image: {time.monotonic() - start:.1f} s")

    assert wait_until(lambda: not runtime_containers(docker_client, server_id), timeout=30), (
        "the server's task containers outlived their episodes"
    )


def test_rendered_image_refuses_the_text_only_task(env_server):
    from harbor_openenv.client import HarborEnvClient

    url, _ = env_server
    with HarborEnvClient(url, orchestration_token=TOKEN) as env:
        result = env.reset(task_id="text-only-pr-diff")
        assert "text-only" in result.observation.error
