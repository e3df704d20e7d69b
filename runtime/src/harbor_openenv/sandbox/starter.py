"""The Docker engine as a :class:`.spec.Starter`: one container per episode
(:class:`.docker.DockerSandbox`) or a compose project (:class:`.compose.ComposeSandbox`), each with
the server's helper volume mounted read-only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import docker

from harbor_openenv.helper import HelperError, HelperVolume

from .base import Sandbox
from .compose import ComposeSandbox
from .docker import DockerSandbox
from .errors import SandboxError
from .owner import LABEL, LABEL_OWNER
from .spec import ComposeSpec, ContainerSpec


class DockerStarter:
    """Starts a server's environments on its engine (``client``, connected on first use), labelled
    with its ``owner``; makes the helper's volume once (with ``extras``' files: see
    :class:`.HelperVolume`). ``environ``: Docker's settings naming the engine for the compose CLI
    (one of several engines; None: this process's own)."""

    def __init__(
        self,
        client: Callable[[], docker.DockerClient],
        *,
        owner: str,
        environ: Mapping[str, str] | None = None,
        extras: Callable[[str], list[Path]] | None = None,
    ) -> None:
        self._client = client
        self.owner = owner
        self.environ = environ
        self._helper = HelperVolume({LABEL: "1", LABEL_OWNER: owner}, extras)

    def helper_volume(self, image: str) -> str:
        """The server's volume holding the in-container helper (made on first use)."""
        try:
            return self._helper.ensure(self._client(), image)
        except HelperError as exc:
            raise SandboxError(str(exc)) from None

    def start(
        self,
        spec: ContainerSpec,
        *,
        task_id: str | None,
        labels: Mapping[str, str] | None = None,
        compose: ComposeSpec | None = None,
    ) -> Sandbox:
        volume = self.helper_volume(spec.image)
        if compose is None:
            return DockerSandbox.start(
                self._client(),
                spec,
                task_id=task_id,
                owner=self.owner,
                labels=dict(labels or {}),
                helper_volume=volume,
            )
        assert task_id is not None, "a compose project is never pooled"
        return ComposeSandbox.start_project(
            self._client(),
            spec,
            compose,
            task_id=task_id,
            owner=self.owner,
            helper_volume=volume,
            engine_env=self.environ,
        )
