"""A fork's branches' containers: what starts one (the fork's committed image, as the task's
would start), taking the one a fork started, and removing one no branch can take."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from concurrent.futures import Future

from harbor_openenv.backends.request import EnvRequest
from harbor_openenv.episode.fork import ForkPoint
from harbor_openenv.episode.runtime import Runtime
from harbor_openenv.sandbox import Sandbox
from harbor_openenv.tasks.env_vars import resolve_envs

log = logging.getLogger("harbor_openenv")


def branch_start(runtime: Runtime, point: ForkPoint) -> Callable[[], Sandbox]:
    """What starts a branch's container: the committed image, as the task's would start,
    counted against the session limit, never pooled."""
    env = resolve_envs(point.task).environment
    request = EnvRequest.of_task(point.task, point.image, env, on=point.engine, alone=True)
    return functools.partial(runtime.launch, request, pooled=True, warm=False)


def started(runtime: Runtime, ready: Future[Sandbox] | None) -> Sandbox | None:
    """The container a fork started for a branch, None if it did not (or has stopped since:
    it is removed and its place in the session limit freed)."""
    if ready is None:
        return None
    try:
        sandbox = ready.result()
    except Exception as exc:  # e.g. the server was full at the fork: the reset tries again
        log.info("a branch's container did not start at its fork (%s): starting it now", exc)
        return None
    if sandbox.is_running():
        return sandbox
    log.warning("a branch's container %s had stopped: starting another", sandbox.name)
    runtime.discard(sandbox, runtime.pool.release)
    return None


def unused(runtime: Runtime, ready: Future[Sandbox]) -> None:
    """Remove a container a fork started for a branch that cannot take it."""
    if not ready.cancelled() and ready.exception() is None:
        runtime.discard(ready.result(), runtime.pool.release)
