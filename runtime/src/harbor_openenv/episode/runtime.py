"""What every session of one server shares: the dataset, the engine, images, the warm pool.

:class:`Runtime` also starts task environments (one container, or a compose project around
``main``); episodes and verifiers ask it for them and never touch the engine themselves.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import docker
import docker.errors

from harbor_openenv.config import Settings
from harbor_openenv.datasets.manifest import MANIFEST_NAME, verify_manifest
from harbor_openenv.episode.disk import DiskGuard
from harbor_openenv.episode.fork import Forks
from harbor_openenv.episode.metrics import Metrics, Snapshot
from harbor_openenv.episode.pool import ContainerPool
from harbor_openenv.episode.record import Recorder
from harbor_openenv.harness.base import HarnessError
from harbor_openenv.harness.capture import CaptureProxy
from harbor_openenv.images.lock import LOCK_NAME, LockedImage, read_lock, stale_pin
from harbor_openenv.images.resolver import ImageError, ImageResolver, verifier_source
from harbor_openenv.sandbox import (
    LABEL_OWNER,
    Sandbox,
    SandboxError,
    engine,
    remove_containers,
    remove_dead_scratch,
    server_identity,
)
from harbor_openenv.sandbox.backend import DockerBackend
from harbor_openenv.sandbox.engines import Engine, EngineSet, Lease, engine_environ, parse_hosts
from harbor_openenv.sandbox.spec import Backend, ComposeSpec, ContainerSpec
from harbor_openenv.tasks.catalog import TaskCatalog
from harbor_openenv.tasks.config import EnvironmentConfig, StepConfig, verifier_environment
from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.env_vars import resolve_envs
from harbor_openenv.tasks.task import Task

log = logging.getLogger("harbor_openenv")
_REMOVERS = 4  # threads removing ended episodes' containers
R = TypeVar("R")


@dataclass(frozen=True)
class OnEngine:
    """What one of several engines (``HARBOR_OPENENV_DOCKER_HOSTS``) holds for this server."""

    images: ImageResolver
    backend: DockerBackend


class _Placed:
    """The backend of a server with several engines: none by default, as each environment
    starts on the engine its episode was placed on (``Runtime.launch``'s ``on``)."""

    def start(self, *_: object, **__: object) -> Sandbox:
        raise SandboxError("with several engines an environment starts on its episode's engine")


class Runtime:
    """What every session of one server shares: the dataset, the engine, the image cache, the
    warm pool (whose idle containers and the running episodes stay within ``max_sessions``)."""

    def __init__(
        self,
        tasks_root: Path,
        settings: Settings | None = None,
        *,
        max_sessions: int | None = None,
        backend: Backend | None = None,
    ) -> None:
        """``backend`` starts every environment (default: this server's Docker engine's)."""
        self.dataset = Dataset(tasks_root)
        self.catalog = TaskCatalog(self.dataset)  # Task API: splits and task specs, built once
        self.settings = settings or Settings()
        self.recorder = Recorder.from_settings(self.settings)  # None unless RECORD_DIR is set
        # images.lock beside the tasks folder, where tasks.sha256 is: the tasks it pins start
        # from their pushed image, pulled by digest, never built. A malformed lock stops start-up.
        lock = self.dataset.root.parent / LOCK_NAME
        self.locked: dict[str, LockedImage] = read_lock(lock) if lock.is_file() else {}
        self._stale: dict[str, str | None] = {}  # per pinned task, checked once
        max_sessions = max_sessions or self.settings.max_sessions
        self.owner = server_identity()
        self._docker: docker.DockerClient | None = None
        self._resolver: ImageResolver | None = None
        self._lock = threading.Lock()
        self._checked: set[str] = set()
        self._tls_folder: Path | None = None  # the engine's certificates, given as contents
        # Harbor's environments (HARBOR_OPENENV_BACKEND=harbor:TYPE) build or pull each task's
        # image themselves and keep no warm pool.
        self.harbor = self.settings.backend.startswith("harbor:")
        if self.harbor and self.settings.pool_size:
            raise ValueError(
                f"{Settings.variable('pool_size')}={self.settings.pool_size}: Harbor's backends"
                f" ({Settings.variable('backend')}={self.settings.backend}) have no warm pool"
            )
        # What puts codex and the harness cache into each engine's helper volume: one, so their
        # archives are made once.
        self._extras = None if backend or self.harbor else self._volume_extras()
        # HARBOR_OPENENV_DOCKER_HOSTS: several engines, each episode placed on one of them.
        self.engines = (
            self._engine_set(max_sessions) if self.settings.docker_hosts and not backend else None
        )
        self.backend: Backend = backend or (
            self._harbor_backend()
            if self.harbor
            else DockerBackend(lambda: self.docker, owner=self.owner, extras=self._extras)
            if self.engines is None
            else _Placed()
        )
        self.pool = ContainerPool(self.backend, size=self.settings.pool_size, limit=max_sessions)
        self._removals = ThreadPoolExecutor(_REMOVERS, thread_name_prefix="harbor-openenv-remove")
        self.disk = DiskGuard(self.settings.disk_check_s)
        self._sessions = 0  # open WebSocket sessions (app.SessionCount keeps it)
        self._unreset = 0  # of those, the ones that have not sent a reset yet
        self.draining = threading.Event()  # set by SIGTERM's drain: no new session or episode
        self.metrics = Metrics(self.snapshot)
        # The fork points, their committed images and their branches' containers started ahead.
        self.forks = Forks(self._remove_image, self._discard_unused, ttl_s=self.settings.fork_ttl_s)
        self._capture: CaptureProxy | None = None  # started by the first rollout

    def _harbor_backend(self) -> Backend:
        """Harbor's environment backend the settings name (the harbor extra)."""
        variable = Settings.variable("backend")
        try:
            from harbor_openenv.sandbox.harbor import HarborBackend
        except ImportError as exc:
            raise ValueError(
                f"{variable}={self.settings.backend} needs Harbor ({exc}): pip install"
                " 'harbor-openenv[harbor]' (Python >= 3.12)"
            ) from None
        kwargs = json.loads(self.settings.harbor_env_kwargs or "{}")
        try:
            return HarborBackend(self.dataset.root, self.settings.backend[7:], kwargs=kwargs)
        except ValueError as exc:
            raise ValueError(f"{variable}={self.settings.backend}: {exc}") from None

    def _engine_set(self, max_sessions: int) -> EngineSet[OnEngine]:
        """The engines HARBOR_OPENENV_DOCKER_HOSTS names (connected on first use), each client
        keeping connections for ``max_sessions`` sessions and a few more."""
        variable, settings = Settings.variable("docker_hosts"), self.settings
        try:
            urls = parse_hosts(settings.docker_hosts or "")
        except ValueError as exc:
            raise ValueError(f"{variable}={settings.docker_hosts!r} {exc}") from None
        if self.harbor:
            raise ValueError(
                f"{variable} names Docker engines, which {Settings.variable('backend')}="
                f"{settings.backend} does not use: unset one of them"
            )
        if settings.pool_size:
            raise ValueError(
                f"{Settings.variable('pool_size')}={settings.pool_size}: the warm pool keeps one"
                f" engine's containers; with several ({variable}) set it to 0"
            )
        concurrency = max_sessions + 8

        def connect(url: str) -> docker.DockerClient:
            with self._lock:  # engines connect in parallel: the certificates are written once
                self._tls_contents()
            try:
                return engine.connect(
                    concurrency=concurrency, environ=engine_environ(url, os.environ)
                )
            except docker.errors.DockerException as exc:
                raise SandboxError(f"cannot reach the Docker engine {url}: {exc}") from None

        def make(one: Engine[OnEngine]) -> OnEngine:
            client = one.client
            if one.generation:  # it came back: the episodes it held have ended
                remove_containers(client, owner=self.owner)
            return OnEngine(
                ImageResolver(client, build_network=settings.build_network),
                DockerBackend(
                    lambda: client,
                    owner=self.owner,
                    environ=engine_environ(one.url, os.environ),
                    extras=self._extras,
                ),
            )

        return EngineSet(
            urls, connect=connect, ping=engine.ping, make=make, probe_s=settings.engine_probe_s
        )

    # -- sessions, readiness, drain ------------------------------------------------------------

    def session_opened(self) -> None:
        with self._lock:
            self._sessions += 1

    def session_closed(self) -> None:
        with self._lock:
            self._sessions -= 1

    def session_unreset(self, change: int) -> None:
        """A session opened without a reset yet (+1), or sent its first or closed without (-1)."""
        with self._lock:
            self._unreset += change

    def snapshot(self, *, containers: bool = True) -> Snapshot:
        """Sessions, episodes, capacity and the pool now; ``containers``: ask the engine for this
        server's running containers (only once connected; None when it cannot answer)."""
        with self._lock:
            sessions, unreset, client = self._sessions, self._unreset, self._docker
        running: int | None = None
        if self.engines is not None:
            if containers:
                clients = [one.client for one in self.engines.connected()]
                counts = [self._running(each) for each in clients]
                known = [count for count in counts if count is not None]
                running = sum(known) if known or not clients else None
        elif containers and client is not None:
            running = self._running(client)
        elif containers:
            running = 0  # never connected: this server has started nothing
        return Snapshot(
            sessions=sessions,
            unreset=unreset,
            episodes=self.pool.active,
            capacity=self.pool.limit,
            draining=self.draining.is_set(),
            pool_idle=self.pool.idle,
            containers=running,
            engines=tuple(self.engines.statuses()) if self.engines is not None else (),
        )

    def _running(self, client: docker.DockerClient) -> int | None:
        """This server's running containers on ``client``'s engine (None: it cannot answer)."""
        try:
            filters: dict[str, str | list[str] | bool] = {
                "label": f"{LABEL_OWNER}={self.owner}",
                "status": "running",
            }
            return len(client.containers.list(filters=filters, ignore_removed=True))
        except Exception as exc:  # the engine may be down: the gauge is left out
            log.debug("metrics: cannot list containers: %s", exc)
            return None

    def not_ready(self) -> str | None:
        """Why this replica cannot take a new session now (``/ready``'s 503), or None."""
        now = self.snapshot(containers=False)
        if now.draining:
            return "draining: the server is stopping and takes no new session"
        if now.busy >= now.capacity:
            return (
                f"full: {now.busy} of {now.capacity} session slots in use"
                f" ({now.sessions} sessions, {now.unreset} of them never reset,"
                f" {now.episodes} episodes; HARBOR_OPENENV_MAX_SESSIONS)"
            )
        if now.engines and not any(one.up for one in now.engines):
            down = "; ".join(f"{one.name}: {one.error}" for one in now.engines)
            return f"no Docker engine is up ({Settings.variable('docker_hosts')}): {down}"
        return None

    def drain(self, timeout_s: float) -> bool:
        """Take no new session or episode from now on, and wait at most ``timeout_s`` for the
        running episodes to end; whether they all did."""
        self.draining.set()
        return self.pool.wait_idle(timeout_s)

    @property
    def docker(self) -> docker.DockerClient:
        """The engine client, connected on first use so /health never touches Docker."""
        if self.engines is not None:
            raise SandboxError(
                f"this server uses several engines ({Settings.variable('docker_hosts')}): each"
                " episode's is its own"
            )
        with self._lock:
            if self._docker is None:
                self._tls_contents()
                try:
                    # Each session's thread, the warm pool and the disk guard share it.
                    client = engine.connect(concurrency=self.pool.limit + 8)
                except docker.errors.DockerException as exc:
                    raise SandboxError(f"cannot reach the Docker engine: {exc}") from None
                self._docker = client
                self._resolver = ImageResolver(client, build_network=self.settings.build_network)
            return self._docker

    def _tls_contents(self) -> None:
        """Write HARBOR_OPENENV_DOCKER_TLS_CA, _CERT and _KEY, if given, where Docker's own
        settings point (once)."""
        settings = self.settings
        tls = (settings.docker_tls_ca, settings.docker_tls_cert, settings.docker_tls_key)
        if any(tls):
            if not all(tls):
                raise SandboxError(
                    "HARBOR_OPENENV_DOCKER_TLS_CA, _CERT and _KEY go together: one is unset"
                )
            if self._tls_folder is None:
                self._tls_folder = engine.use_tls_contents(*cast(tuple[str, str, str], tls))

    def lease(self, on: Engine[OnEngine] | None = None) -> Lease[OnEngine] | None:
        """A new episode's place on one of several engines (``on``: that one), None with one
        engine."""
        if self.engines is None:
            return None
        self.engines.start()
        return self.engines.lease(on)

    def placed(
        self, work: Callable[[Engine[OnEngine] | None], R]
    ) -> tuple[Lease[OnEngine] | None, R]:
        """``work`` on the engine a new episode is placed on (None with one engine), again on
        another if that engine fails meanwhile; its lease and result."""
        if self.engines is None:
            return None, work(None)
        self.engines.start()
        return self.engines.run(work)

    def images_on(self, on: Engine[OnEngine] | None) -> ImageResolver:
        """The image cache of engine ``on`` (None: the one engine's)."""
        return self.images if on is None else _parts(on).images

    @property
    def images(self) -> ImageResolver:
        self.docker  # noqa: B018 - connects and creates the resolver
        assert self._resolver is not None
        return self._resolver

    def task_image(self, task: Task, on: Engine[OnEngine] | None = None) -> str:
        """The local image ``task``'s episodes start from: the one images.lock pins (pulled by
        digest if the engine lacks it, never built), else the task's own (pulled or built); on
        engine ``on`` of several."""
        if self.harbor:
            return task.id  # a name only: Harbor's environment builds or pulls the image
        locked = self.locked.get(task.id)
        images = self.images_on(on)
        if locked is None:
            return images.resolve(task)
        if task.id not in self._stale:
            self._stale[task.id] = stale_pin(task, locked)
        stale = self._stale[task.id]
        if stale:
            raise ImageError(stale)
        try:
            return images.use(task, locked.image)
        except ImageError as exc:
            raise ImageError(
                f"{exc} (the image {LOCK_NAME} pins for task {task.id}: push it again with"
                " `harbor-openenv images push`, or log the engine in to its registry)"
            ) from None

    def spec(
        self, image: str, table: EnvironmentConfig, env: dict[str, str], network_mode: str
    ) -> ContainerSpec:
        """How reset starts a task's container: everything but the task's label."""
        settings = self.settings
        return ContainerSpec(
            image,
            workdir=table.workdir,
            cpus=table.cpus or settings.default_cpus,
            memory_mb=table.memory_mb or settings.default_memory_mb,
            network="none" if network_mode == "no-network" else None,
            env=tuple(sorted(env.items())),
            pids_limit=settings.pids_limit or None,
            storage_mb=self.disk_limit(table),
        )

    def disk_limit(self, table: EnvironmentConfig) -> int | None:
        """An environment's disk limit in MB: its storage_mb, else the server's (None: none)."""
        return table.storage_mb or self.settings.disk_mb or None

    def launch(
        self,
        task: Task,
        image: str,
        table: EnvironmentConfig,
        *,
        env: dict[str, str],
        compose: bool,
        network_mode: str,
        pooled: bool = False,
        warm: bool = True,
        on: Engine[OnEngine] | None = None,
    ) -> Sandbox:
        """Start a task environment: one container, or the compose project around ``main``;
        on engine ``on`` of several.

        ``pooled``: an episode's own environment, which counts against the warm pool's limit
        until the pool is told it ended; a container (not a compose project) then comes from the
        pool if one is ready (``warm`` False: never, nor does the pool keep ``image`` warm: a
        fork's branch).
        """
        spec = self.spec(image, table, env, network_mode)
        backend = self.backend if on is None else _parts(on).backend
        if not compose:
            start = functools.partial(backend.start, spec, task_id=task.id)
            return self.pool.acquire(spec if warm else None, start) if pooled else start()
        assert task.compose_file is not None
        project = ComposeSpec(
            task.compose_file,
            no_network=network_mode == "no-network",
            compose_env=env,
            timeout_s=table.build_timeout_sec,
            build_network=self.settings.build_network,
            prebuilt=image if task.image is not None and task.image.kind != "dockerfile" else None,
        )
        start = functools.partial(backend.start, spec, task_id=task.id, compose=project)
        return self.pool.acquire(None, start) if pooled else start()

    def verifier_sandbox(
        self,
        task: Task,
        step: StepConfig | None,
        env: dict[str, str],
        on: Engine[OnEngine] | None = None,
    ) -> Sandbox:
        """Start a separate verifier's environment, on the image Harbor would choose (the one
        images.lock pins for it, pulled by digest, when there is one); on engine ``on``."""
        if self.harbor:
            raise SandboxError(
                f"task {task.id}: a separate verifier's environment is not supported on Harbor's"
                f" backends ({Settings.variable('backend')}={self.settings.backend})"
            )
        folder, ref = task.verifier_image_dir(step), task.verifier_image_ref(step)
        source = verifier_source(task, step)
        locked = self.locked.get(task.id)
        pinned = locked.verifiers.get(source) if locked is not None and source else None
        images = self.images_on(on)
        try:
            if pinned:
                image = images.use(task, pinned)
            elif ref:
                image = images.use(task, ref)
            elif folder:
                image = images.build(task, folder)
            else:
                image = self.task_image(task, on)
        except ImageError as exc:
            raise SandboxError(f"the separate verifier's image: {exc}") from None
        config = task.config
        table = verifier_environment(config, step)
        phase = (step.verifier.network_mode if step else None) or config.verifier.network_mode
        return self.launch(
            task,
            image,
            table,
            env=env,
            compose=not (ref or folder) and task.compose_file is not None,
            network_mode=phase or table.network_mode,
            on=on,
        )

    def check_files(self, task: Task) -> str | None:
        """Why the task's files differ from the tasks.sha256 beside the tasks folder, if they do.

        Each task is checked once per server, on its first reset; without a manifest, never.
        """
        manifest = self.dataset.root.parent / MANIFEST_NAME
        if task.id in self._checked or not manifest.is_file():
            return None
        problems = verify_manifest(manifest, under=f"{self.dataset.root.name}/{task.id}")
        if problems:
            shown = "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else "")
            return f"{task.id}: the task's files do not match {MANIFEST_NAME}: {shown}"
        self._checked.add(task.id)
        return None

    def remove_orphans(self) -> int:
        """Remove containers left behind by servers that are no longer running (on every engine
        that is up)."""
        if self.engines is None:
            return remove_containers(self.docker)
        self.engines.start()
        return self.engines.each(lambda one: remove_containers(one.client), "the sweep")

    def remove_dead_scratch(self) -> int:
        """Remove the compose project folders of servers that died."""
        if self.engines is None:
            return remove_dead_scratch(self.docker)
        clients = [one.client for one in self.engines.connected()]
        return remove_dead_scratch(clients[0]) if clients else 0

    def prewarm(self) -> None:
        """Start filling the warm pool for the default task, if the pool is on and can serve it."""
        ids = self.dataset.ids
        if self.settings.pool_size <= 0 or not ids:
            return
        task = self.dataset[self.settings.default_task or ids[0]]
        if task.refusal or task.compose_file is not None or self.check_files(task):
            return
        table = task.config.environment
        env = resolve_envs(task).environment
        image = self.task_image(task)
        self.pool.want(self.spec(image, table, env, table.network_mode))

    def _remove_image(self, image: str) -> None:
        """Remove a fork's committed image (gone already: nothing to do), on every engine that
        is up when there are several (only the fork's has it)."""
        clients = (
            [self.docker]
            if self.engines is None
            else [one.client for one in self.engines.connected()]
        )
        for client in clients:
            try:
                client.api.remove_image(image, force=False)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                raise SandboxError(f"removing the image {image[:19]} failed: {exc}") from None

    def _discard_unused(self, sandbox: Sandbox, then: Callable[[], None]) -> None:
        """Remove a container started for a fork's branch that no reset took (its ID expired
        or the server stops); it counted against the session limit until it is gone."""
        ending = self.pool.ending()

        def gone() -> None:
            ending()
            then()

        self.discard(sandbox, gone)

    def discard(self, sandbox: Sandbox, then: Callable[[], None]) -> None:
        """Remove an ended episode's container in the background, so the step that ended the
        episode answers first; ``then`` runs once it is gone. Shutdown waits for every removal."""

        def remove() -> None:
            try:
                sandbox.remove()
            except Exception as exc:  # the owner sweep at shutdown or restart tries again
                log.warning("removing %s failed: %s", sandbox.name, exc)
            finally:
                then()

        try:
            self._removals.submit(remove)
        except RuntimeError:  # shutting down: no new background work
            remove()

    def _volume_extras(self) -> Callable[[str], list[Path]] | None:
        """What goes into the helper's volume beside the helper (once per server, mounted
        read-only everywhere: a rollout of an inside harness uploads nothing): codex with
        ``HARBOR_OPENENV_CODEX_PACKAGE`` set, the harness cache's builds for the engine's
        architecture with ``HARBOR_OPENENV_HARNESS_CACHE``. What has no build for the engine
        is left out: a rollout of it then says why."""
        package, root = self.settings.codex_package, self.settings.harness_cache
        if package is None and root is None:
            return None
        from harbor_openenv.harness.cache import HarnessCache
        from harbor_openenv.harness.codex import Codex

        codex = Codex(package) if package is not None else None
        cache = HarnessCache(root) if root is not None else None

        def archives(machine: str) -> list[Path]:
            found = []
            try:
                if codex is not None:
                    found.append(codex.volume_archive(machine))
            except HarnessError as exc:
                log.warning("codex is not in the helper's volume: %s", exc)
            try:
                made = cache.volume_archive(machine) if cache is not None else None
                found.extend([made] if made is not None else [])
            except HarnessError as exc:
                log.warning("the harness cache is not in the helper's volume: %s", exc)
            return found

        return archives

    def capture(self) -> CaptureProxy:
        """The server's one capture proxy (127.0.0.1, a free port), started on first use."""
        with self._lock:
            if self._capture is None:
                self._capture = CaptureProxy()
            proxy = self._capture
        proxy.start()
        return proxy

    def shutdown(self) -> int:
        """Finish pending removals, empty the warm pool and remove every container this server
        started."""
        self._removals.shutdown(wait=True)
        if self.recorder is not None:
            self.recorder.close()
        self.metrics.close()
        self.disk.close()
        self.pool.close()
        self.forks.close()
        if self._capture is not None:
            self._capture.stop()
        try:
            if self.engines is not None:
                self.engines.close()
                own = functools.partial(remove_containers, owner=self.owner)
                return self.engines.each(lambda one: own(one.client), "the sweep")
            return 0 if self._docker is None else remove_containers(self._docker, owner=self.owner)
        finally:  # after the engine's last call: a new connection reads the files again
            if self._tls_folder is not None:
                shutil.rmtree(self._tls_folder, ignore_errors=True)


def _parts(on: Engine[OnEngine]) -> OnEngine:
    """What engine ``on`` holds for this server (it is connected once an episode is on it)."""
    assert on.parts is not None, f"{on.name} is not connected"
    return on.parts
