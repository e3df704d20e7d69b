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
from _images import add_wheels, build_offline, serve_image
from _server import ROOT, TOKEN, runtime_containers, wait_until

from harbor_openenv.client.launch import free_port

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


# Every pattern the template's .gitignore and .dockerignore name, as a dataset may ship it: build
# outputs, caches, bytecode, virtualenvs, a .env (Harbor's compose reads one beside the compose
# file), wheels. Under tasks/ each is data, so git and the image must keep them byte for byte.
IGNORED_LOOKALIKES = (
    "environment/build/out.txt",
    "environment/dist/pkg.tar",
    "environment/__pycache__/mod.cpython-312.pyc",
    "environment/mod.pyc",
    "environment/mod.pyo",
    "environment/.venv/bin/tool",
    "environment/pkg.egg-info/PKG-INFO",
    "environment/.env",
    "environment/wheels/dep-1.0-py3-none-any.whl",
    "tests/.pytest_cache/v/cache/lastfailed",
    "tests/.ruff_cache/CACHEDIR.TAG",
    "tests/__pycache__/test_x.cpython-312.pyc",
    ".github/workflows/task.yml",
    ".git-keep",
)


def test_ignored_lookalikes_in_tasks_survive_git_and_the_image(
    tmp_path, docker_client, runtime_wheel, dependency_wheels
):
    """A task holding a file for every ignore rule of the template: committed as the copy's
    "Next:" says, a clone passes `sha256sum -c tasks.sha256` (the rendered CI's first step), also
    with core.autocrlf on; the image built from the repo holds them, so its server resets the
    task (it checks tasks.sha256 first) and the task's own build and verifier find them."""
    from _template_helpers import commit_all, git, run_copier, write_task

    from harbor_openenv.client import HarborEnvClient

    dataset = tmp_path / "dataset"
    task = write_task(dataset / "keeps-ignored")
    (task / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY build/ /app/build/\n"
    )
    (task / "tests" / "test.sh").write_bytes(
        b"#!/bin/bash\nmkdir -p /logs/verifier\n"
        b"if grep -qx built /app/build/out.txt; then echo 1; else echo 0; fi"
        b" > /logs/verifier/reward.txt\n"
    )
    for name in IGNORED_LOOKALIKES:
        path = task / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"built\n" if name.endswith("out.txt") else b"data\r\n" + name.encode())
    port = free_port()
    project = tmp_path / "env"
    rendered = run_copier(
        project, f"dataset_path={dataset}", f"runtime_pin={runtime_wheel}", f"port={port}"
    )
    assert rendered.returncode == 0, rendered.stderr
    for name in IGNORED_LOOKALIKES:
        assert (project / "tasks" / "keeps-ignored" / name).is_file(), name

    git("init", "-q", cwd=project)
    commit_all(project, "Initial commit")
    committed = set(git("ls-files", "tasks", cwd=project).splitlines())
    missing = [n for n in IGNORED_LOOKALIKES if f"tasks/keeps-ignored/{n}" not in committed]
    assert not missing, f"git add -A left out {missing}"
    for autocrlf in ("false", "true"):
        clone = tmp_path / f"clone-{autocrlf}"
        option = f"core.autocrlf={autocrlf}"
        git("-c", option, "clone", "-q", str(project), str(clone), cwd=tmp_path)
        check = subprocess.run(
            ["sha256sum", "--strict", "-c", "--quiet", "tasks.sha256"],
            cwd=clone,
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, f"core.autocrlf={autocrlf}: {check.stdout}{check.stderr}"

    add_wheels(dependency_wheels, project / "wheels")
    tag, _ = build_offline(project)
    try:
        with (
            serve_image(docker_client, tag, port) as (url, _container),
            HarborEnvClient(url, orchestration_token=TOKEN) as env,
        ):
            reset = env.reset(task_id="keeps-ignored")
            assert reset.observation.error is None, reset.observation.error
            assert env.evaluate().reward == 1.0  # environment/build/ reached the task image
    finally:
        docker_client.images.remove(tag, force=True)
