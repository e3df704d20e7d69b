"""Compose environments: ``environment/docker-compose.yaml`` run with Docker Compose v2.

A project merges, in order, a base file giving ``main`` the task's image and limits (Harbor's
build/prebuilt file), the task's own compose file, and an override that labels every service,
network and volume for this runtime (so the orphan sweep finds them) and gives ``main`` the
runtime's keeper as PID 1 (root, its ENTRYPOINT and command, the task's or the image's, as the
keeper's child: see :class:`.docker.DockerSandbox`), the task's environment variables and workdir.
``no-network`` tasks get internal networks: sidecars stay reachable, nothing else is. Commands run
in ``main`` through the engine's exec API, exactly as in a single-container episode
(:class:`ComposeSandbox` holds the project and a :class:`DockerSandbox` of ``main``, and hands it
every primitive but removal); removal is ``down`` with volumes and orphans. The merged files live
in a folder under the temporary folder (``TMPDIR``) that records its server's identity
(:func:`.owner.make_scratch`), so a restarted server's startup sweep removes the folders of servers
that died.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import docker

from harbor_openenv import helper

from .base import KEEPER_ENTRYPOINT, Sandbox, keeper_command
from .channel import Channel
from .command import Command
from .compose_project import MAIN_SERVICE, ComposeProject, harbor_variables
from .docker import DockerSandbox, image_config
from .engine import DOCKER_VARIABLES, is_local
from .engine_files import Archive
from .errors import SandboxError
from .owner import LABEL, LABEL_OWNER, LABEL_TASK, make_scratch
from .result import ExecResult
from .spec import ComposeSpec, ContainerSpec

LABEL_PROJECT = "harbor-openenv.compose-project"
_NO_MAIN_BUILD = """\
services:
  main:
    build: !reset null
    pull_policy: !reset null
"""


def _without_engine(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without Docker's settings naming an engine."""
    return {k: v for k, v in environ.items() if k not in DOCKER_VARIABLES}


class ComposeSandbox(Sandbox):
    """The ``main`` service of a compose project; removing it tears the whole project down."""

    def __init__(self, project: ComposeProject, scratch: str, main: DockerSandbox) -> None:
        super().__init__()
        self.project: ComposeProject | None = project
        self.main = main  # the container the agent's commands run in
        self._scratch = scratch

    @classmethod
    def start_project(
        cls,
        client: docker.DockerClient,
        container: ContainerSpec,
        compose: ComposeSpec,
        *,
        task_id: str,
        owner: str,
        helper_volume: str,
        engine_env: Mapping[str, str] | None = None,
    ) -> ComposeSandbox:
        """Start the project (``up --wait``, sidecar healthchecks included) with main as
        ``container`` says, and attach to main.

        ``engine_env``: Docker's settings naming ``client``'s engine, when it is not the one this
        process's own settings name (one of several engines): the compose CLI gets them instead.

        Services the task's compose file builds (sidecars) build on ``compose.build_network``
        (the server's ``Settings.build_network``; None: the engine's default), as the task's own
        image does. ``compose.prebuilt``: the task's ``docker_image``, when main runs it
        (Harbor's ``PREBUILT_IMAGE_NAME``).
        """
        image, cpus, memory_mb = container.image, container.cpus, container.memory_mb
        workdir, pids_limit, env = container.workdir, container.pids_limit, dict(container.env)
        compose_file, no_network, compose_env = (
            compose.compose_file,
            compose.no_network,
            dict(compose.compose_env),
        )
        timeout_s, build_network, prebuilt = (
            compose.timeout_s,
            compose.build_network,
            compose.prebuilt,
        )
        host = (os.environ if engine_env is None else engine_env).get("DOCKER_HOST", "")
        if host.startswith("ssh://") and shutil.which("ssh") is None:
            raise SandboxError(
                f"{task_id}: a compose task on an ssh:// engine needs OpenSSH's ssh client on this"
                " server's PATH (the compose CLI dials the engine with it; install"
                " openssh-client in the server's image)"
            )
        name = f"harbor-openenv-{uuid.uuid4().hex[:12]}"
        scratch = make_scratch(owner)
        main: dict[str, Any] = {
            "image": image,
            "volumes": [
                {
                    "type": "volume",
                    "source": "harbor-openenv-helper",
                    "target": helper.MOUNT_DIR,
                    "read_only": True,
                }
            ],
        }
        if cpus:
            main["cpus"] = cpus
        if memory_mb:
            main["mem_limit"] = f"{memory_mb}m"
        base = Path(scratch) / "base.json"
        helper_spec = {"external": True, "name": helper_volume}
        base.write_text(
            json.dumps(
                {
                    "services": {MAIN_SERVICE: main},
                    "volumes": {"harbor-openenv-helper": helper_spec},
                }
            )
        )
        own = os.environ if engine_env is None else _without_engine(os.environ)
        environ = {
            **own,
            **(engine_env or {}),
            **(compose_env or {}),
            **harbor_variables(
                compose_file, image, cpus=cpus, memory_mb=memory_mb, prebuilt=prebuilt
            ),
        }
        project = ComposeProject(name, [base, compose_file], compose_file.parent, environ)
        try:
            model = json.loads(project.run("config", "--format", "json"))
        except (SandboxError, ValueError) as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            raise SandboxError(f"{task_id}/environment/docker-compose.yaml: {exc}") from None
        if MAIN_SERVICE not in (model.get("services") or {}):
            shutil.rmtree(scratch, ignore_errors=True)
            raise SandboxError(
                f"{task_id}/environment/docker-compose.yaml: no service named 'main'"
                " (Harbor runs the agent in the service called main)"
            )
        binds = [] if is_local(client) else _bind_mounts(model)
        if binds:
            shutil.rmtree(scratch, ignore_errors=True)
            raise SandboxError(
                f"{task_id}/environment/docker-compose.yaml binds paths of the server's host"
                f" ({', '.join(binds)}), which a remote Docker engine cannot mount: use a named"
                " volume, or COPY the files into the image"
            )
        labels = {LABEL: "1", LABEL_OWNER: owner, LABEL_TASK: task_id[:200], LABEL_PROJECT: name}
        spec = model["services"][MAIN_SERVICE] or {}
        image_user, image_entrypoint = image_config(client, spec.get("image") or image)
        user = str(spec.get("user") or image_user)
        override = compose_override(
            model,
            labels=labels,
            user=user,
            entrypoint=spec.get("entrypoint", image_entrypoint),
            env=env,
            pids_limit=pids_limit,
            workdir=workdir,
            no_network=no_network,
            build_network=build_network,
        )
        overrides = Path(scratch) / "override.json"
        overrides.write_text(json.dumps(override))
        project.files.append(overrides)
        # main runs the image the runtime built from main's own build (image.build_spec), so
        # compose never builds main itself (a task's `pull_policy: build` would rebuild it).
        main_build = Path(scratch) / "main-build.yaml"
        main_build.write_text(_NO_MAIN_BUILD)
        project.files.append(main_build)
        try:
            project.run("up", "--detach", "--wait", timeout_s=timeout_s)
            found = client.containers.list(
                filters={
                    "label": [
                        f"com.docker.compose.project={name}",
                        f"com.docker.compose.service={MAIN_SERVICE}",
                    ]
                }
            )
            if not found:
                raise SandboxError(f"{task_id}: the compose service main is not running")
            sandbox = cls(project, scratch, DockerSandbox(client, found[0]))
            sandbox.main.check_running()
            sandbox.default_user = sandbox.main.default_user = user
            sandbox.prepare(workdir)
        except BaseException:
            _down(project, scratch)
            raise
        return sandbox

    def remove(self) -> None:
        """Tear the whole project down: services, networks, volumes (idempotent)."""
        self.channel.close()
        project, self.project = self.project, None
        if project is not None:
            _down(project, self._scratch)

    # -- every other primitive is main's -------------------------------------------------------

    @property
    def name(self) -> str:
        return self.main.name

    def run(self, command: Command) -> ExecResult:
        return self.main.run(command)

    def open_channel(self, user: str) -> Channel:
        return self.main.open_channel(user)

    def relay(self, port: int, target: tuple[str, int]) -> contextlib.AbstractContextManager[None]:
        return self.main.relay(port, target)

    def ask_keeper(self, request: str, *, timeout_s: float) -> str:
        return self.main.ask_keeper(request, timeout_s=timeout_s)

    def changes(self) -> list[tuple[str, int]]:
        return self.main.changes()

    def logs_tail(self) -> str:
        return self.main.logs_tail()

    def upload(self, destination: str, archive: bytes | IO[bytes]) -> None:
        self.main.upload(destination, archive)

    def download(self, path: str) -> contextlib.AbstractContextManager[Archive | None]:
        return self.main.download(path)

    def is_running(self) -> bool:
        return self.main.is_running()

    def disk_usage(self) -> int:
        return self.main.disk_usage()


def compose_override(
    model: dict[str, Any],
    *,
    labels: dict[str, str],
    user: str,
    entrypoint: Any,
    env: dict[str, str],
    pids_limit: int | None,
    workdir: str | None,
    no_network: bool,
    build_network: str | None,
) -> dict[str, Any]:
    """The override file over a project's resolved ``model`` (``compose config``): ``labels``
    on every service and on its own networks and volumes (internal networks with
    ``no_network``), sidecar builds on ``build_network``, and main run by the keeper as PID 1 as
    root (``user`` and ``entrypoint``: the ones it then starts the task's command as), with
    ``env``, ``pids_limit`` and ``workdir``."""
    override: dict[str, Any] = {"services": {svc: {"labels": labels} for svc in model["services"]}}
    for svc, spec in model["services"].items():
        if build_network and isinstance((spec or {}).get("build"), dict):
            override["services"][svc]["build"] = {"network": build_network}
    main = model["services"][MAIN_SERVICE] or {}
    ours = override["services"][MAIN_SERVICE]
    ours.update(
        {  # the keeper as PID 1 (see DockerSandbox.start), whatever the task's file says
            "entrypoint": list(KEEPER_ENTRYPOINT),
            "command": [
                _escape(arg) for arg in keeper_command(user, entrypoint, main.get("command"))
            ],
            "user": "0",
            "stdin_open": True,
            "init": False,
            "environment": env or {},
        }
    )
    if pids_limit:
        # Where compose wants it: beside the task's own deploy limits (Harbor-converted
        # tasks limit main by `deploy.resources.limits` with ${CPUS}/${MEMORY}), since a
        # pids_limit that differs from a deploy limit (unset: 0) fails the whole project.
        limits = ((main.get("deploy") or {}).get("resources") or {}).get("limits")
        if isinstance(limits, dict):
            if not limits.get("pids"):
                ours["deploy"] = {"resources": {"limits": {"pids": pids_limit}}}
        elif not main.get("pids_limit"):
            ours["pids_limit"] = pids_limit
    if workdir:
        ours["working_dir"] = workdir
    for kind in ("networks", "volumes"):
        for key, spec in (model.get(kind) or {}).items():
            if (spec or {}).get("external"):
                continue
            entry: dict[str, Any] = {"labels": labels}
            override.setdefault(kind, {})[key] = entry
            if kind == "networks" and no_network:
                entry["internal"] = True
    return override


def _bind_mounts(model: dict[str, Any]) -> list[str]:
    """``service:source`` of every bind mount in a resolved compose model."""
    found = []
    for service, spec in (model.get("services") or {}).items():
        for volume in (spec or {}).get("volumes") or []:
            if isinstance(volume, dict) and volume.get("type") == "bind":
                found.append(f"{service}:{volume.get('source')}")
    return found


def _escape(value: str) -> str:
    """``value`` as a compose file holds it literally (``$`` would be interpolated)."""
    return value.replace("$", "$$")


def _down(project: ComposeProject, scratch: str | None) -> None:
    try:
        project.down()
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
