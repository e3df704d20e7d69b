"""What every session of one server shares: the dataset, the backend, the warm pool, the disk
guard, forks, metrics and the record.

Environments start through :meth:`Runtime.launch` (one :class:`.EnvRequest`) on the server's
:class:`.Backend`, chosen once at start-up; episodes and verifiers never touch an engine.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harbor_openenv.backends.base import Backend
from harbor_openenv.backends.factory import chosen
from harbor_openenv.backends.request import EnvRequest
from harbor_openenv.config import Settings
from harbor_openenv.datasets.manifest import MANIFEST_NAME, verify_manifest
from harbor_openenv.episode.fork import Forks
from harbor_openenv.episode.record import Recorder
from harbor_openenv.harness.capture import CaptureProxy
from harbor_openenv.sandbox import Sandbox, server_identity
from harbor_openenv.serving.disk import DiskGuard
from harbor_openenv.serving.metrics import Metrics, Snapshot
from harbor_openenv.serving.pool import ContainerPool
from harbor_openenv.serving.sessions import SessionCount
from harbor_openenv.tasks.catalog import TaskCatalog
from harbor_openenv.tasks.dataset import Dataset
from harbor_openenv.tasks.env_vars import resolve_envs
from harbor_openenv.tasks.task import Task

log = logging.getLogger("harbor_openenv")
_REMOVERS = 4  # threads removing ended episodes' containers


class Runtime:
    """What every session of one server shares: the dataset, the backend, the warm pool (whose
    idle containers and the running episodes stay within ``max_sessions``)."""

    def __init__(
        self,
        tasks_root: Path,
        settings: Settings | None = None,
        *,
        max_sessions: int | None = None,
        backend: Backend | None = None,
    ) -> None:
        """``backend`` starts every environment (default: the one the settings choose)."""
        self.dataset = Dataset(tasks_root)
        self.catalog = TaskCatalog(self.dataset)  # Task API: splits and task specs, built once
        self.settings = settings or Settings()
        self.recorder = Recorder.from_settings(self.settings)  # None unless RECORD_DIR is set
        max_sessions = max_sessions or self.settings.max_sessions
        self.owner = server_identity()
        self.backend = backend or chosen(
            self.dataset, self.settings, owner=self.owner, sessions=max_sessions
        )
        self._lock = threading.Lock()
        self._checked: set[str] = set()
        self.pool = ContainerPool(self.backend, size=self.settings.pool_size, limit=max_sessions)
        self._removals = ThreadPoolExecutor(_REMOVERS, thread_name_prefix="harbor-openenv-remove")
        self.disk = DiskGuard(self.settings.disk_check_s)
        self.sessions = SessionCount()  # open WebSocket sessions (app's middleware counts them)
        self.draining = threading.Event()  # set by SIGTERM's drain: no new session or episode
        self.metrics = Metrics(self.snapshot)
        # The fork points, their committed images and their branches' containers started ahead.
        self.forks = Forks(
            self.backend.remove_image, self._discard_unused, ttl_s=self.settings.fork_ttl_s
        )
        self._capture: CaptureProxy | None = None  # started by the first rollout

    # -- readiness, drain ----------------------------------------------------------------------

    def snapshot(self, *, containers: bool = True) -> Snapshot:
        """Sessions, episodes, capacity and the pool now; ``containers``: ask the backend for
        this server's running environments (None when it cannot answer)."""
        sessions, unreset = self.sessions.now()
        return Snapshot(
            sessions=sessions,
            unreset=unreset,
            episodes=self.pool.active,
            capacity=self.pool.limit,
            draining=self.draining.is_set(),
            pool_idle=self.pool.idle,
            containers=self.backend.running() if containers else None,
            engines=self.backend.statuses(),
        )

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

    def launch(self, request: EnvRequest, *, pooled: bool = False, warm: bool = True) -> Sandbox:
        """Start the environment ``request`` asks for: one container, or the compose project
        around ``main``, on its engine.

        ``pooled``: an episode's own environment, which counts against the warm pool's limit
        until the pool is told it ended; a container (not a compose project) then comes from the
        pool if one is ready (``warm`` False: never, nor does the pool keep its image warm: a
        fork's branch).
        """
        spec, project = request.container(self.settings), request.project(self.settings)
        start = functools.partial(
            self.backend.start, spec, task_id=request.task.id, compose=project, on=request.on
        )
        if not pooled:
            return start()
        return self.pool.acquire(spec if warm and project is None else None, start)

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

    def prewarm(self) -> None:
        """Start filling the warm pool for the default task, if the pool is on and can serve it."""
        ids = self.dataset.ids
        if self.settings.pool_size <= 0 or not ids:
            return
        task = self.dataset[self.settings.default_task or ids[0]]
        if task.refusal or task.compose_file is not None or self.check_files(task):
            return
        image = self.backend.task_image(task)
        request = EnvRequest.of_task(task, image, resolve_envs(task).environment)
        self.pool.want(request.container(self.settings))

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

    def capture(self) -> CaptureProxy:
        """The server's one capture proxy (127.0.0.1, a free port), started on first use."""
        with self._lock:
            if self._capture is None:
                self._capture = CaptureProxy()
            proxy = self._capture
        proxy.start()
        return proxy

    def shutdown(self) -> int:
        """Finish pending removals, empty the warm pool and remove every environment this
        server started."""
        self._removals.shutdown(wait=True)
        if self.recorder is not None:
            self.recorder.close()
        self.metrics.close()
        self.disk.close()
        self.pool.close()
        self.forks.close()
        if self._capture is not None:
            self._capture.stop()
        return self.backend.close()
