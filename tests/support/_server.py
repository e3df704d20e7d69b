"""What every layer's tests share: the checkout's paths, the tests' token, a runtime server in
its own process, and the runtime's containers on the engine. (tests/support is on sys.path:
pyproject's pytest ``pythonpath``.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

from harbor_openenv.client import launch
from harbor_openenv.images.reach import LABEL_PROBE

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
CODEX_VERSION = "0.171.0"  # @openai/codex, whose per-platform builds the codex tests fetch
CODEX_PLATFORMS = {"x86_64": "linux-x64", "aarch64": "linux-arm64"}  # npm's name per engine arch
FIXTURE_TASKS = ROOT / "tests" / "fixtures" / "tasks"
TOKEN = "test-orchestration-token"
# The stand-in base images the fixture Dockerfiles start FROM; .ci/standin-images.sh builds them
# from debootstrap and tags them with these names where the real images are missing.
BASE_IMAGES = ("debian:bookworm-slim", "python:3.12-slim", "ubuntu:22.04")

CHANNEL_VARIABLE = "HARBOR_OPENENV_EXEC_CHANNEL"
AGENT_ACTIONS = ("exec", "read_file", "write_file", "list_dir")


def exec_channel_on() -> bool:
    return os.environ.get(CHANNEL_VARIABLE, "1") == "1"


class Server(launch.Server):
    """A runtime server in its own process, on 127.0.0.1, with the tests' token."""

    def __init__(self, tasks: Path, *, python: str | None = None, **env: str) -> None:
        super().__init__(tasks, token=TOKEN, python=python, **env)

    def rollout(self, task: str, harness: str, *, base_url: str, model: str, **fields):
        """The observation of one episode of ``task``: a reset, then ``harness``'s rollout
        against the model at ``base_url``."""
        with self.client() as env:
            env.reset(task_id=task)
            return env.rollout(harness, base_url=base_url, model=model, **fields).observation


def runtime_containers(client, owner_prefix: str | None = None, *, probes: bool = False) -> list:
    """This runtime's containers, optionally only those of one server process; an image's reach
    probe (a throwaway container the tamper report's first use of an image starts in the
    background) only with ``probes``."""
    # The low-level list, which does not inspect (and 404 on) containers removed meanwhile.
    containers = client.api.containers(all=True, filters={"label": "harbor-openenv"})
    if not probes:
        containers = [c for c in containers if LABEL_PROBE not in c["Labels"]]
    if owner_prefix is None:
        return containers
    return [
        c
        for c in containers
        if c["Labels"].get("harbor-openenv.owner", "").startswith(owner_prefix)
    ]


def wait_until(predicate, timeout: float = 20, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
