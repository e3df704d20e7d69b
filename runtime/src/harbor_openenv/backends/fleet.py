"""Several Docker engines behind one server (``HARBOR_OPENENV_DOCKER_HOSTS``): which engine an
episode starts on, and which engines are up.

An episode goes to the least busy engine (the fewest of this server's live episodes), ties in the
listed order, among the engines that are up. An engine that fails (its ping or a connection
fails) is taken out: the episodes on it have ended (:meth:`Lease.lost` says why, naming it) and
new ones go to the others. A prober pings every engine each ``probe_s``, so an engine that dies
while idle is taken out too, and one that answers again comes back (its parts made anew).

Each engine holds its own client and the ``parts`` made for it once connected (the runtime's:
its image resolver and backend), so everything of an episode happens on its engine.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from harbor_openenv.events import event
from harbor_openenv.sandbox.errors import SandboxError

log = logging.getLogger("harbor_openenv")
T = TypeVar("T")
R = TypeVar("R")
_ERRNO = re.compile(r"\[Errno -?\d+\] [^\"'()]+")
_TIMEOUT = re.compile(r"(Read|Connect) timed out|timed out")


def engine_environ(url: str, environ: Mapping[str, str]) -> dict[str, str]:
    """Docker's own settings for the engine at ``url``: ``DOCKER_HOST``, and for ``tcp://`` the
    TLS settings of ``environ`` (every TLS engine is verified with the same certificates)."""
    variables = {"DOCKER_HOST": url}
    if url.startswith("tcp://"):
        for name in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
            if environ.get(name):
                variables[name] = environ[name]
    return variables


def display_name(url: str) -> str:
    """The engine's URL without a password (``ssh://user:secret@host`` shows no secret)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    user = f"{parts.username}@" if parts.username else ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{user}{host}{port}{parts.path}"


def short_reason(error: BaseException | str) -> str:
    """The gist of a connection failure (``[Errno 111] Connection refused``, not urllib3's whole
    chain), else its first line."""
    text = str(error) or repr(error)
    found = _ERRNO.search(text) or _TIMEOUT.search(text)
    if found:
        return found.group(0).strip()
    return (text.strip().splitlines() or [""])[0][:300]


class Engine(Generic[T]):
    """One engine of the set: its client and parts once connected, its live episodes, and why
    it is down (None: up, or not tried yet)."""

    def __init__(self, url: str, index: int) -> None:
        self.url, self.index, self.name = url, index, display_name(url)
        self.client: Any = None
        self.parts: T | None = None
        self.episodes = 0  # this server's live episodes on it
        self.down: str | None = None
        self.generation = 0  # times it was taken out: a lease of an older one has ended
        self.connecting = threading.Lock()


@dataclass(frozen=True)
class EngineStatus:
    """One engine as ``/ready`` and the metrics show it."""

    name: str
    up: bool
    episodes: int
    error: str | None


class Lease(Generic[T]):
    """One episode's place on an engine, counted there until :meth:`release`."""

    def __init__(self, engines: EngineSet[T], engine: Engine[T]) -> None:
        self.engines, self.engine, self.generation = engines, engine, engine.generation
        self._released = False

    def lost(self, *, check: bool = False) -> str | None:
        """Why the episode has ended with its engine (None: the engine still holds it);
        ``check``: ping the engine first."""
        if check:
            self.engines.check(self.engine)
        return self.engines.lost(self.engine, self.generation)

    def release(self) -> None:
        """The episode has ended (once; again does nothing)."""
        if not self._released:
            self._released = True
            self.engines.release(self.engine)


class EngineSet(Generic[T]):
    """The engines one server spreads its episodes over."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        connect: Callable[[str], Any],
        ping: Callable[[Any], None],
        make: Callable[[Engine[T]], T],
        probe_s: float,
    ) -> None:
        """``connect(url)`` makes a client (raises when the engine does not answer), ``ping``
        checks one quickly (raises), ``make`` builds an engine's parts from its client; every
        engine is pinged each ``probe_s`` once :meth:`start` ran."""
        self.engines = [Engine[T](url, index) for index, url in enumerate(urls)]
        self._connect, self._ping, self._make, self._probe_s = connect, ping, make, probe_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._prober: threading.Thread | None = None

    # -- placing episodes ----------------------------------------------------------------------

    def lease(self, engine: Engine[T] | None = None) -> Lease[T]:
        """A place for a new episode: on ``engine`` (a fork's branch: where its image is), else
        on the least busy engine that is up (ties: the listed order). SandboxError when none
        (or not ``engine``) is up."""
        tried: set[int] = set()
        while True:
            with self._lock:
                chosen = engine if engine is not None else self._least_busy(tried)
                if chosen is not None and chosen.down is None:
                    chosen.episodes += 1
            if chosen is None or chosen.down is not None:
                raise SandboxError(self._none_up(engine))
            try:
                self._connected(chosen)
            except Exception as exc:
                self.release(chosen)
                self.failed(chosen, exc)
                if engine is not None:
                    raise SandboxError(self._none_up(engine)) from None
                tried.add(chosen.index)
                continue
            return Lease(self, chosen)

    def run(self, work: Callable[[Engine[T]], R]) -> tuple[Lease[T], R]:
        """``work`` on the engine a new episode is placed on, and its lease; when ``work`` fails
        because its engine did (the engine no longer answers), again on the next engine that is
        up (SandboxError once none is). Any other failure is ``work``'s: raised as it is."""
        for _ in self.engines:
            lease = self.lease()
            try:
                return lease, work(lease.engine)
            except Exception as exc:
                lease.release()
                lost = lease.lost(check=True)
                if lost is None:
                    raise
                log.warning("starting on %s failed, trying another: %s", lease.engine.name, exc)
        raise SandboxError(self._none_up(None))

    def _least_busy(self, tried: set[int]) -> Engine[T] | None:
        up = [e for e in self.engines if e.down is None and e.index not in tried]
        return min(up, key=lambda e: (e.episodes, e.index), default=None)

    def _none_up(self, engine: Engine[T] | None) -> str:
        if engine is not None:
            return f"the Docker engine {engine.name} is down ({engine.down})"
        reasons = "; ".join(f"{e.name}: {e.down}" for e in self.engines)
        return f"no Docker engine is up (HARBOR_OPENENV_DOCKER_HOSTS): {reasons}"

    def release(self, engine: Engine[T]) -> None:
        with self._lock:
            engine.episodes -= 1

    def lost(self, engine: Engine[T], generation: int) -> str | None:
        """Why an episode placed on ``engine`` at ``generation`` has ended, or None."""
        with self._lock:
            if engine.down is None and engine.generation == generation:
                return None
            why = engine.down or "it failed and came back since"
        return (
            f"the Docker engine {engine.name} went down ({why}): this episode has ended with it"
            " and its container is lost; reset starts a new one on an engine that is up"
        )

    # -- failures and the prober ---------------------------------------------------------------

    def check(self, engine: Engine[T]) -> bool:
        """Ping ``engine`` (when connected) now, taking it out if it fails; whether it is up."""
        client = engine.client
        if engine.down is not None or client is None:
            return engine.down is None
        try:
            self._ping(client)
        except Exception as exc:
            self.failed(engine, exc)
            return False
        return True

    def failed(self, engine: Engine[T], error: BaseException | str) -> None:
        """Take ``engine`` out: its episodes have ended; the prober tries it again."""
        reason = short_reason(error)
        with self._lock:
            if engine.down is not None:
                return
            engine.down, engine.generation = reason, engine.generation + 1
        event("engine down", logging.WARNING, engine=engine.name, error=reason)

    def _connected(self, engine: Engine[T]) -> T:
        """The engine's parts, connecting it (and making them) on first use or after it came
        back."""
        with engine.connecting:
            if engine.parts is None:
                engine.parts = self._make_parts(engine, self._connect(engine.url))
            return engine.parts

    def _make_parts(self, engine: Engine[T], client: Any) -> T:
        engine.client = client
        return self._make(engine)

    def probe(self) -> None:
        """Ping each engine once: a connected one that fails is taken out, a down one that
        answers comes back with a new client and parts."""
        for engine in self.engines:
            if engine.down is None:
                self.check(engine)
                continue
            old = engine.client
            try:
                client = self._connect(engine.url)
                with engine.connecting:
                    engine.parts = self._make_parts(engine, client)
            except Exception as exc:
                log.debug("engine %s is still down: %s", engine.name, exc)
                continue
            if old is not None and old is not client:
                try:
                    old.close()
                except Exception as exc:  # a dead engine's connections may fail to close
                    log.debug("closing %s's old client: %s", engine.name, exc)
            with self._lock:
                engine.down = None
            event("engine up", engine=engine.name)

    def start(self) -> None:
        """Start the prober (once)."""
        with self._lock:
            if self._prober is not None or self._stop.is_set():
                return
            self._prober = threading.Thread(
                target=self._probe_loop, name="harbor-openenv-engines", daemon=True
            )
        self._prober.start()

    def _probe_loop(self) -> None:
        while not self._stop.wait(self._probe_s):
            try:
                self.probe()
            except Exception:  # the prober never dies
                log.exception("probing the Docker engines failed")

    def close(self) -> None:
        """Stop the prober."""
        self._stop.set()
        if self._prober is not None:
            self._prober.join(timeout=30)

    # -- what the server shows -----------------------------------------------------------------

    def statuses(self) -> list[EngineStatus]:
        with self._lock:
            return [EngineStatus(e.name, e.down is None, e.episodes, e.down) for e in self.engines]

    def connected(self) -> list[Engine[T]]:
        """The engines that are up and connected (whose client can be asked now)."""
        with self._lock:
            return [e for e in self.engines if e.down is None and e.parts is not None]

    def each(self, work: Callable[[Engine[T]], int], what: str) -> int:
        """Run ``work`` on every engine that is up (connecting it), summing what it returns; an
        engine that fails is taken out and logged with ``what``."""
        total = 0
        for engine in self.engines:
            if engine.down is not None:
                continue
            try:
                self._connected(engine)
                total += work(engine)
            except Exception as exc:
                log.warning("%s on the Docker engine %s failed: %s", what, engine.name, exc)
                if engine.client is None:
                    self.failed(engine, exc)
                else:
                    self.check(engine)
        return total
