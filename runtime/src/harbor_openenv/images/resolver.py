"""Task images: resolve a task to an image reference, pulling or building it at most once.

Registry images (``[metadata.repo2env.reproducibility] mode = "registry"``) are pulled, never built.
``[environment].docker_image`` is used as is and pulled only when absent, unless it may exist only
where the task was generated (``local_only`` / ``inline_dockerfile``). Otherwise
``environment/Dockerfile`` is built and tagged by a content hash of ``environment/``, so identical
environments build once and the tag survives restarts.

Pulls and builds log their start, a build its progress (each Dockerfile step), and their end with
the seconds taken, on the ``harbor_openenv`` logger (see ``events``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.events import Timer, event
from harbor_openenv.images.reach import Reach, Reaches
from harbor_openenv.tasks.config import StepConfig, verifier_mode
from harbor_openenv.tasks.task import Task, TaskKind

IMAGE_REPOSITORY = "harbor-openenv/task"
_IGNORED = {".git", ".DS_Store", "__pycache__"}
_LOG_TAIL = 30
_STEP = re.compile(r"^Step (\d+/\d+) : (.*)$")


class ImageError(HarborOpenEnvError):
    """An image could not be pulled or built; the message says which task and why."""


def environment_hash(environment_dir: Path) -> str:
    """Harbor's content hash of ``environment/``: sorted relative paths, sizes and contents."""
    digest = hashlib.sha256()
    files = sorted(
        path
        for path in environment_dir.rglob("*")
        if path.is_file() and not _IGNORED.intersection(path.relative_to(environment_dir).parts)
    )
    for path in files:
        digest.update(path.relative_to(environment_dir).as_posix().encode())
        digest.update(str(path.stat().st_size).encode())
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class BuildSpec:
    """How an image is built: its context folder, its Dockerfile (relative to the context, or
    absolute), build args and target, as ``services.main.build`` gives them."""

    context: Path
    dockerfile: str = "Dockerfile"
    args: tuple[tuple[str, str], ...] = ()
    target: str | None = None

    @property
    def plain(self) -> bool:
        """``context/Dockerfile`` with no args or target: the image a folder alone gives."""
        return self.dockerfile == "Dockerfile" and not self.args and self.target is None

    @property
    def tag(self) -> str:
        """``harbor-openenv/task:<hash>``: Harbor's content hash of the context for a plain
        build (so the tag is the one it always was), else a hash of that, the Dockerfile's path
        and bytes, the args and the target."""
        content = environment_hash(self.context)
        if self.plain:
            return f"{IMAGE_REPOSITORY}:{content}"
        dockerfile = self.context / self.dockerfile
        digest = hashlib.sha256(
            json.dumps(
                [content, self.dockerfile, list(self.args), self.target], separators=(",", ":")
            ).encode()
        )
        if dockerfile.is_file() and self.context not in dockerfile.resolve().parents:
            digest.update(dockerfile.read_bytes())  # outside the context: not in its hash
        return f"{IMAGE_REPOSITORY}:{digest.hexdigest()[:32]}"


_BUILDS: dict[tuple[str, int, int], BuildSpec] = {}


def build_spec(task: Task) -> BuildSpec:
    """How the task's own image is built, as Harbor builds it: ``environment/Dockerfile`` in
    ``environment/``, unless its ``docker-compose.yaml`` gives ``main`` a ``build`` of its own
    (``context: ${CONTEXT_DIR}/..``, ``dockerfile: environment/Dockerfile``, ``args``,
    ``target``), which Harbor's compose merge lets win over its ``context: ${CONTEXT_DIR}``.

    Compose resolves that ``build`` (``compose config``, once per version of the file), with
    Harbor's variables; ``CPUS``/``MEMORY`` there are the task's limits or 1 and 2048M (the
    build does not use them; the file must only resolve).
    """
    environment = task.environment_dir
    plain = BuildSpec(environment)
    compose_file = task.compose_file
    if compose_file is None:
        return plain
    stat = compose_file.stat()
    key = (str(compose_file), stat.st_mtime_ns, stat.st_size)
    cached = _BUILDS.get(key)
    if cached is not None:
        return cached
    if b"build" not in compose_file.read_bytes():
        spec = plain  # no build anywhere in the file: no compose run needed
    else:
        from harbor_openenv.sandbox import SandboxError
        from harbor_openenv.sandbox.compose_project import harbor_variables, main_build

        table = task.config.environment
        variables = harbor_variables(
            compose_file,
            f"{IMAGE_REPOSITORY}:build",
            cpus=table.cpus or 1,
            memory_mb=table.memory_mb or 2048,
        )
        try:
            build = main_build(compose_file, variables)
        except SandboxError as exc:
            raise ImageError(f"{task.where(compose_file)}: {exc}") from None
        context = Path(os.path.normpath(str(build.get("context") or environment)))
        args = build.get("args") or {}
        spec = BuildSpec(
            context,
            str(build.get("dockerfile") or "Dockerfile"),
            tuple(sorted((str(k), "" if v is None else str(v)) for k, v in args.items())),
            build.get("target") or None,
        )
    _BUILDS[key] = spec
    return spec


class ImageResolver:
    """Turns tasks into local image references; concurrent requests for one image share the work."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        build_network: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self._client = client
        self._reaches = Reaches(client, labels or {})
        self._build_network = build_network  # None: the engine's default
        self._lock = threading.Lock()
        self._pending: dict[str, threading.Event] = {}
        self._failures: dict[str, str] = {}

    def resolve(self, task: Task) -> str:
        """A local image reference for ``task``, pulled or built if needed."""
        source = task.image
        if source is None:
            raise ImageError(
                f"{task.id}: the task has no environment/Dockerfile and no image, so there is"
                " nothing to run it in"
                + (
                    "; it is text-only: score it client-side against solution/patch.diff"
                    if task.kind is TaskKind.TEXT_ONLY
                    else ""
                )
            )
        if source.kind == "dockerfile":
            spec = build_spec(task)
            return self.build(task, spec.context, spec)
        return self.use(task, source.ref or "", pullable=source.pullable)

    def build(self, task: Task, folder: Path, spec: BuildSpec | None = None) -> str:
        """The image built from ``folder/Dockerfile`` (a task's ``environment/`` or ``tests/``),
        or as ``spec`` says (a compose task's ``services.main.build``)."""
        spec = spec or BuildSpec(folder)
        tag = spec.tag
        return self._once(tag, lambda: self._build(task, spec, tag))

    def use(self, task: Task, ref: str, *, pullable: bool = True) -> str:
        """``ref`` if the engine has it, else pulled (unless ``pullable`` is False)."""
        if self._exists(ref):
            return ref
        if not pullable:
            raise ImageError(
                f"{task.id}: image {ref!r} is not on this Docker engine and task.toml marks it"
                " as local to the machine that generated the task (repo2env reproducibility"
                " local_only/inline_dockerfile), so it is never pulled; build or load it first"
            )
        return self._once(ref, lambda: self._pull(task, ref))

    def reach(self, ref: str, *, wait: bool = True) -> Reach:
        """What the verifier of image ``ref`` reaches and what it shipped (:mod:`.reach`),
        probed once (``wait`` False: in the background, the guess meanwhile)."""
        return self._reaches.of(ref, wait=wait)

    def has(self, ref: str) -> bool:
        """Whether the engine has the image ``ref``."""
        return self._exists(ref)

    def _exists(self, ref: str) -> bool:
        try:
            self._client.images.get(ref)
        except docker.errors.ImageNotFound:
            return False
        return True

    def _once(self, ref: str, make: Callable[[], object]) -> str:
        """Run ``make`` for ``ref`` unless the image exists; callers for the same ref wait."""
        while True:
            with self._lock:
                event = self._pending.get(ref)
                if event is None:
                    if self._exists(ref):
                        return ref
                    event = self._pending[ref] = threading.Event()
                    self._failures.pop(ref, None)
                    owner = True
                else:
                    owner = False
            if owner:
                try:
                    make()
                except ImageError as exc:
                    self._failures[ref] = str(exc)
                    raise
                finally:
                    with self._lock:
                        del self._pending[ref]
                    event.set()
                return ref
            event.wait()
            if ref in self._failures:
                raise ImageError(self._failures[ref])

    def _pull(self, task: Task, ref: str) -> None:
        event("image pull", task=task.id, image=ref)
        timer = Timer()
        try:
            self._client.images.pull(ref)
        except docker.errors.APIError as exc:
            error = f"{task.id}: pulling {ref!r} failed: {exc.explanation or exc}"
            event("image pull failed", logging.WARNING, task=task.id, image=ref, error=error)
            raise ImageError(error) from None
        event("image pulled", task=task.id, image=ref, seconds=timer.seconds)

    def _build(self, task: Task, spec: BuildSpec, tag: str) -> None:
        timeout = task.config.environment.build_timeout_sec
        dockerfile = Path(os.path.normpath(spec.context / spec.dockerfile))
        if dockerfile.is_relative_to(task.path):
            where = dockerfile.relative_to(task.path).as_posix()
        else:
            where = str(dockerfile)
        event("image build", task=task.id, image=tag, dockerfile=where)
        timer = Timer()
        log: deque[str] = deque(maxlen=_LOG_TAIL)

        def progress(line: str) -> None:
            step = _STEP.match(line)
            if step:
                event("image build step", task=task.id, step=step[1], instruction=step[2][:200])

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="image-build")
        future = pool.submit(self._stream_build, spec, tag, log, progress)
        try:
            error = future.result(timeout=timeout)
        except FutureTimeout:
            # The engine keeps building on its own; the tag is only set when it succeeds.
            error = f"timed out after {timeout:g} s ([environment].build_timeout_sec)"
        finally:
            pool.shutdown(wait=False)
        if error:
            tail = "\n".join(log)
            event(
                "image build failed",
                logging.WARNING,
                task=task.id,
                image=tag,
                seconds=timer.seconds,
                error=error,
            )
            raise ImageError(f"{task.id}: building {where} failed: {error}\n{tail}")
        event("image built", task=task.id, image=tag, seconds=timer.seconds)

    def _stream_build(
        self,
        spec: BuildSpec,
        tag: str,
        log: deque[str],
        progress: Callable[[str], None] | None = None,
    ) -> str | None:
        try:
            for chunk in self._client.api.build(
                path=str(spec.context),
                dockerfile=None if spec.plain else spec.dockerfile,
                buildargs=dict(spec.args) or None,
                target=spec.target,
                tag=tag,
                rm=True,
                forcerm=True,
                decode=True,
                network_mode=self._build_network,
                labels={"harbor-openenv.image": "task"},
            ):
                if "stream" in chunk:
                    for line in chunk["stream"].splitlines():
                        if line.strip():
                            log.append(line)
                            if progress is not None:
                                progress(line)
                if "error" in chunk:
                    return str(chunk["error"]).strip()
        except docker.errors.APIError as exc:
            return str(exc.explanation or exc)
        return None


def verifier_steps(task: Task) -> list[StepConfig | None]:
    """The steps (None: the task itself) whose verifier runs in an environment of its own."""
    config = task.config
    steps: list[StepConfig | None] = list(config.steps or []) or [None]
    return [step for step in steps if verifier_mode(config, step) == "separate"]


def verifier_source(task: Task, step: StepConfig | None) -> str | None:
    """The image a separate verifier's environment starts from: its ``docker_image``, or the tag
    its ``tests/Dockerfile`` builds; None when it uses the task's own image."""
    ref, folder = task.verifier_image_ref(step), task.verifier_image_dir(step)
    if ref:
        return ref
    return f"{IMAGE_REPOSITORY}:{environment_hash(folder)}" if folder else None
