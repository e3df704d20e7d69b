"""Who owns what the runtime leaves on the engine and on disk, and the sweep of dead owners'.

Every container, network and volume the runtime makes carries :data:`LABEL` and its server's
identity (:data:`LABEL_OWNER`); every compose project's folder of merged files records it too. A
server removes its own at shutdown and, at startup, those of servers that died.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors

from .engine import is_local

LABEL = "harbor-openenv"
LABEL_OWNER = "harbor-openenv.owner"
LABEL_TASK = "harbor-openenv.task"
LABEL_FORK = "harbor-openenv.fork"  # an image a fork committed (with LABEL_OWNER: its server's)
SCRATCH_PREFIX = "harbor-openenv-compose-"  # a compose project's files, in the temporary folder
_SCRATCH_OWNER = "owner"  # inside it: the identity of the server that made it
_CONTAINER_ID = re.compile(r"/containers/([0-9a-f]{64})/hostname$")


def server_scope() -> str:
    """Where this process's PIDs mean something: ``c-<container id>`` inside a container, else
    ``h-<host name>``. (A container on the host network shares the host's name, not its PIDs.)"""
    try:
        mounts = Path("/proc/self/mountinfo").read_text()
    except OSError:
        mounts = ""
    container = own_container(mounts)
    return f"c-{container[:12]}" if container else f"h-{socket.gethostname()}"


def own_container(mountinfo: str) -> str | None:
    """The id of the Docker container whose ``/etc/hostname`` the engine mounted for this
    process, from its ``/proc/self/mountinfo``; None on a host, where the mounts of every running
    container may be listed too (at their paths under the engine's folder, never /etc)."""
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4 and fields[4] == "/etc/hostname":
            match = _CONTAINER_ID.search(fields[3])
            if match:
                return match[1]
    return None


def server_identity() -> str:
    """``scope:pid:start`` of this process, to tell a live owner from a dead one later."""
    return f"{server_scope()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "?"
    return stat.rsplit(")", 1)[1].split()[19]


def owner_alive(client: docker.DockerClient, owner: str) -> bool:
    """Whether the server process named by a container's owner label still runs.

    Certain only where this process sees the owner's PIDs (the same scope); a server in another
    container counts as alive while that container runs (a restarted one sweeps its own); a
    server elsewhere on a host, seen from a container, cannot be checked and is kept, and so is a
    server container a remote engine does not know (it runs on another host: see
    :func:`.engine.is_local`).
    """
    scope, _, rest = owner.partition(":")
    pid, _, start = rest.partition(":")
    if scope == server_scope():
        return pid.isdigit() and _start_time(int(pid)) == start
    if not scope.startswith("c-"):
        return True
    try:
        return bool(client.api.inspect_container(scope[2:])["State"]["Running"])
    except docker.errors.NotFound:
        return not is_local(client)
    except docker.errors.APIError:
        return True  # cannot tell: keep its containers


def remove_container(api: docker.APIClient, container: str, *, attempts: int = 5) -> bool:
    """Force-remove ``container`` and its anonymous volumes; False when it was already gone or
    its removal is in progress (409). The engine answers 500 "failed to remove root filesystem"
    when two removals of one container race (an episode's own and a shutdown's sweep): the
    container is left dead, and a later removal completes it, so that one is retried."""
    for attempt in range(attempts):
        try:
            api.remove_container(container, force=True, v=True)
            return True
        except docker.errors.NotFound:
            return False
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                return False
            racing = exc.status_code == 500 and "failed to remove root filesystem" in str(exc)
            if not racing or attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    return False


def remove_containers(client: docker.DockerClient, *, owner: str | None = None) -> int:
    """Remove this runtime's containers: ``owner``'s, or (None) those whose owner is dead.

    Networks and volumes carrying the labels (compose projects') go too, after their containers,
    and so do the images forks committed (:data:`LABEL_FORK`). Returns the number of containers
    removed.
    """
    filters = {"label": [LABEL] + ([f"{LABEL_OWNER}={owner}"] if owner else [])}
    alive: dict[str, bool] = {}

    def dead(labels: dict[str, str]) -> bool:
        label = labels.get(LABEL_OWNER, "")
        if owner is not None:
            return True
        if label not in alive:
            alive[label] = owner_alive(client, label)
        return not alive[label]

    removed = 0
    # The low-level list: the high-level one inspects each container and fails with NotFound
    # when one disappears (an episode ending) while the list is read.
    for info in client.api.containers(all=True, filters=filters):
        if not dead(info.get("Labels") or {}):
            continue
        if remove_container(client.api, info["Id"]):
            removed += 1
    for collection in (client.networks, client.volumes):
        for item in collection.list(filters=filters):
            if dead(item.attrs.get("Labels") or {}):
                try:
                    item.remove()
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as exc:  # still in use by a live container
                    if exc.status_code != 409:
                        raise
    remove_fork_images(client, dead, owner=owner)
    return removed


def remove_fork_images(
    client: docker.DockerClient, judge: Callable[[dict[str, str]], bool], *, owner: str | None
) -> int:
    """Remove the images forks committed (``owner``'s, or any) whose labels ``judge`` condemns;
    how many went. One still used by a container (409) is kept for a later sweep."""
    labels = [LABEL_FORK] + ([f"{LABEL_OWNER}={owner}"] if owner else [])
    found = client.api.images(all=True, filters={"label": labels})  # all: a parent fork too
    pending = [info["Id"] for info in found if judge(info.get("Labels") or {})]
    removed, progress = 0, True
    # A fork of a branch is a child of its parent fork's image, which waits for it (409): again
    # while a pass removed something.
    while pending and progress:
        waiting = []
        for image in pending:
            try:
                client.api.remove_image(image, force=False)
                removed += 1
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
                waiting.append(image)
        progress, pending = len(waiting) < len(pending), waiting
    return removed


def make_scratch(owner: str) -> str:
    """A new compose project folder, with ``owner`` recorded inside for the sweep of dead
    servers'."""
    scratch = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
    pending = Path(scratch) / f".{_SCRATCH_OWNER}"
    pending.write_text(owner, encoding="utf-8")
    os.replace(pending, Path(scratch) / _SCRATCH_OWNER)  # never seen half-written
    return scratch


def remove_dead_scratch(client: docker.DockerClient) -> int:
    """Remove the project folders left in the temporary folder by servers that died (a server
    killed with -9 never removes its own); returns how many. Only folders of this user that
    record their owner are judged, and a folder whose owner still runs is always kept."""
    removed, alive = 0, {}
    for folder in Path(tempfile.gettempdir()).glob(SCRATCH_PREFIX + "*"):
        try:
            if folder.is_symlink() or not folder.is_dir() or folder.stat().st_uid != os.getuid():
                continue
            owner = (folder / _SCRATCH_OWNER).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # being made, or not this runtime's to judge
            continue
        if owner not in alive:
            alive[owner] = owner_alive(client, owner)
        if not alive[owner]:
            shutil.rmtree(folder, ignore_errors=True)
            removed += not folder.exists()
    return removed
