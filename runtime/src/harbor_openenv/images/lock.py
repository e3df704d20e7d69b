"""Task images pushed once to a registry, and ``images.lock``, which pins each task to one.

``harbor-openenv images push DATASET --registry HOST/PREFIX`` builds (or pulls) every runnable
task's image once, tags it ``HOST/PREFIX/task:<image id>``, pushes it and writes ``images.lock``
in the environment repo root, beside ``tasks/`` where ``tasks.sha256`` is. A server whose repo has
the lock starts those tasks from the locked ``HOST/PREFIX/task@sha256:...`` reference: pulled by
digest when the engine lacks it, never built.

The lock is JSON, written with sorted keys and a fixed indent, so the same push writes the same
bytes and a change shows as one line per task in a diff; JSON because the standard library both
reads and writes it (``tomllib`` only reads TOML). Each task's entry keeps the local image it was
pushed from (``source``): the content-hash tag of its ``environment/`` build, or its
``docker_image``. A task whose source has changed since the push is refused at reset rather than
served from the stale image.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from harbor_openenv.errors import HarborOpenEnvError
from harbor_openenv.images.resolver import ImageError, build_spec
from harbor_openenv.tasks.task import Task

LOCK_NAME = "images.lock"
LOCK_VERSION = 1
REPOSITORY = "task"  # the registry repository under the prefix: HOST/PREFIX/task
_DIGEST_REF = re.compile(r"^[^@\s]+/[^@\s]+@sha256:[0-9a-f]{64}$")
# HOST[:PORT]/PREFIX: a host Docker does not take for a Docker Hub user (it has a dot or a port, or
# is localhost), then lower-case path components.
_REGISTRY = re.compile(
    r"^(?P<host>(localhost|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+|[A-Za-z0-9.-]+:[0-9]+|\[[0-9a-fA-F:]+\](:[0-9]+)?))"
    r"/(?P<prefix>[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*)$"
)


class LockError(HarborOpenEnvError):
    """``images.lock`` cannot be read or is malformed; the message names the file and why."""


@dataclass(frozen=True)
class LockedImage:
    """One task's locked image: the digest reference, and the local image it was pushed from;
    ``verifiers``: its separate verifiers' images, each local source to its digest reference."""

    image: str  # HOST/PREFIX/task@sha256:<64 hex>
    source: str  # harbor-openenv/task:<environment hash>, or the task's docker_image
    verifiers: Mapping[str, str] = field(default_factory=dict)


def parse_registry(value: str) -> str:
    """``HOST[:PORT]/PREFIX`` without a trailing slash, or ValueError saying what is wrong."""
    registry = value.strip().rstrip("/")
    if not _REGISTRY.match(registry):
        raise ValueError(
            f"--registry {value!r} is not HOST/PREFIX: a registry host with a dot, a port or"
            " 'localhost' (e.g. 127.0.0.1:5000), then a lower-case path (e.g. envs/my-env)"
        )
    return registry


def lock_source(task: Task) -> str | None:
    """The local image a task's episodes start from, as ``images push`` records it."""
    source = task.image
    if source is None:
        return None
    if source.kind == "dockerfile":
        return build_spec(task).tag
    return source.ref or None


def stale_pin(task: Task, locked: LockedImage) -> str | None:
    """Why ``locked`` no longer fits ``task`` (its image source changed since the push), if so."""
    source = lock_source(task)
    if source == locked.source:
        return None
    return (
        f"{task.id}: {LOCK_NAME} pins {locked.image}, pushed from {locked.source}, but the task's"
        f" image is now {source or 'none'}: run `harbor-openenv images push` again (or remove the"
        f" task from {LOCK_NAME})"
    )


def push_image(client: docker.DockerClient, local: str, registry: str) -> str:
    """Tag the local image ``local`` under ``registry`` and push it; its digest reference.

    The tag is the image's own id, so pushing the same image again pushes nothing new. Errors
    arrive in the push's stream, not as exceptions; both become ImageError naming the image.
    """
    try:
        image = client.images.get(local)
        tag = str(image.id).split(":", 1)[-1][:32]
        repository = f"{registry}/{REPOSITORY}"
        image.tag(repository, tag)
        digest = None
        for chunk in client.api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise ImageError(f"pushing {local} to {repository}:{tag} failed: {chunk['error']}")
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("Digest"):
                digest = str(aux["Digest"])
    except docker.errors.APIError as exc:
        reason = exc.explanation or exc
        raise ImageError(f"pushing {local} to {registry} failed: {reason}") from None
    if digest is None:
        raise ImageError(f"pushing {local} to {repository}:{tag}: the registry sent no digest")
    return f"{repository}@{digest}"


def write_lock(path: Path, registry: str, entries: Mapping[str, LockedImage]) -> None:
    """Write ``images.lock``: sorted, indented JSON, the same bytes for the same images."""
    document = {
        "version": LOCK_VERSION,
        "registry": registry,
        "tasks": {
            task_id: {
                "image": entry.image,
                "source": entry.source,
                **({"verifiers": dict(entry.verifiers)} if entry.verifiers else {}),
            }
            for task_id, entry in entries.items()
        },
    }
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


def read_lock(path: Path) -> dict[str, LockedImage]:
    """The tasks ``images.lock`` pins, by task id; LockError when it is malformed."""
    try:
        document: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LockError(f"{path}: cannot read it: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != LOCK_VERSION:
        raise LockError(f"{path}: not an images.lock of version {LOCK_VERSION}")
    tasks = document.get("tasks")
    if not isinstance(tasks, dict):
        raise LockError(f"{path}: has no 'tasks' table")
    locked = {}
    for task_id, entry in tasks.items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("image"), str)
            and isinstance(entry.get("source"), str)
        ):
            raise LockError(f"{path}: task {task_id!r}: needs string 'image' and 'source'")
        verifiers = entry.get("verifiers", {})
        if not (
            isinstance(verifiers, dict)
            and all(isinstance(v, str) for pair in verifiers.items() for v in pair)
        ):
            raise LockError(f"{path}: task {task_id!r}: 'verifiers' maps image names to strings")
        for image in (entry["image"], *verifiers.values()):
            if not _DIGEST_REF.match(image):
                raise LockError(
                    f"{path}: task {task_id!r}: {image!r} is not a digest reference"
                    " (HOST/PREFIX/NAME@sha256:<64 hex>)"
                )
        locked[task_id] = LockedImage(entry["image"], entry["source"], verifiers)
    return locked
