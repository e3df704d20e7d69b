"""The server's Prometheus metrics, served at ``/metrics`` (``prometheus_client``'s text format).

One :class:`Metrics` per server (``Runtime.metrics``), on a registry of its own, so several apps in
one process never share counts. Counted as things happen: episodes started and ended by outcome,
each action's seconds (reset, exec, evaluate ...), image builds and pulls with their seconds (from
the ``image ...`` events, see ``events.subscribe``). Read when scraped, from a :class:`Snapshot`:
sessions, running episodes, capacity, readiness, the warm pool and the engine's containers of this
server; with several engines, each one's up/down and episodes (label ``engine``).

**The one to autoscale on** is ``harbor_openenv_sessions_utilization``: the replica's busy session
slots over its capacity (0 to 1; busy is the larger of open sessions and running episodes, the
count ``/ready`` compares with ``HARBOR_OPENENV_MAX_SESSIONS``). Keep its average across replicas
near a target such as 0.75; at 1 a replica answers ``/ready`` with 503 and takes no new session.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from harbor_openenv import events
from harbor_openenv.backends.fleet import EngineStatus

log = logging.getLogger("harbor_openenv")

PREFIX = "harbor_openenv_"
OUTCOMES = ("reward", "error", "timeout", "reaped")
# Seconds buckets from a warm-pool reset (ms) to a long verifier or image build (minutes).
_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
_IMAGE_EVENTS = {
    "image pulled": ("pull", "ok"),
    "image pull failed": ("pull", "failed"),
    "image built": ("build", "ok"),
    "image build failed": ("build", "failed"),
}


@dataclass(frozen=True)
class Snapshot:
    """What the server holds at one moment (``Runtime.snapshot``)."""

    sessions: int  # open WebSocket sessions (/ws, /mcp)
    unreset: int  # of those, the ones that have not sent a reset yet
    episodes: int  # episodes holding a container (those being removed included)
    capacity: int  # HARBOR_OPENENV_MAX_SESSIONS
    draining: bool
    pool_idle: int  # warm-pool containers ready for a reset
    containers: int | None  # the engine's running containers of this server (None: unknown)
    engines: tuple[EngineStatus, ...] = ()  # HARBOR_OPENENV_DOCKER_HOSTS's (none: one engine)

    @property
    def busy(self) -> int:
        return max(self.sessions, self.episodes)


class _Live(Collector):
    """The gauges, read from a snapshot at each scrape."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterable[Metric]:
        now = self._snapshot()
        values: list[tuple[str, str, float | None]] = [
            ("sessions_active", "open WebSocket sessions", now.sessions),
            ("sessions_never_reset", "open /ws sessions that have sent no reset yet", now.unreset),
            ("episodes_running", "episodes holding a container", now.episodes),
            ("sessions_capacity", "session slots (HARBOR_OPENENV_MAX_SESSIONS)", now.capacity),
            (
                "sessions_utilization",
                "busy session slots / capacity: the autoscaling signal (1: full, not ready)",
                now.busy / now.capacity if now.capacity else 1.0,
            ),
            (
                "ready",
                "1 when /ready answers 200 (a free slot, not draining, an engine up)",
                _ready(now),
            ),
            ("draining", "1 once SIGTERM started the drain", float(now.draining)),
            ("pool_idle", "warm-pool containers ready for a reset", now.pool_idle),
            ("containers_running", "running containers of this server", now.containers),
        ]
        for name, doc, value in values:
            if value is not None:  # the engine was unreachable: no sample rather than a wrong one
                yield GaugeMetricFamily(PREFIX + name, doc, value=value)
        if now.engines:
            up = GaugeMetricFamily(
                PREFIX + "engine_up",
                "1 while the engine is up (HARBOR_OPENENV_DOCKER_HOSTS), 0 once taken out",
                labels=["engine"],
            )
            episodes = GaugeMetricFamily(
                PREFIX + "engine_episodes",
                "this server's live episodes on the engine",
                labels=["engine"],
            )
            for one in now.engines:
                up.add_metric([one.name], float(one.up))
                episodes.add_metric([one.name], one.episodes)
            yield up
            yield episodes


def _ready(now: Snapshot) -> float:
    engines = not now.engines or any(one.up for one in now.engines)
    return float(not now.draining and now.busy < now.capacity and engines)


class Metrics:
    """Counters and histograms of one server, and its scrape."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.episodes_started = Counter(
            PREFIX + "episodes_started",
            "episodes started (successful resets)",
            registry=self.registry,
        )
        self.episodes_ended = Counter(
            PREFIX + "episodes_ended",
            "episodes ended, by outcome: reward (the verifier gave one), error (no reward),"
            " timeout (the verifier timed out), reaped (ended without evaluate: disconnect,"
            " idle close, a new reset, shutdown)",
            ["outcome"],
            registry=self.registry,
        )
        self.tamper = Counter(
            PREFIX + "tamper_evaluates",
            "evaluates whose container had changes outside the working directory the verifier"
            " could run or import, by class (episode/tamper.py: installs are not suspect);"
            " CLASS_deleted: such a path deleted",
            ["kind"],
            registry=self.registry,
        )
        self.reset_errors = Counter(
            PREFIX + "reset_errors",
            "resets refused or failed (no episode started)",
            registry=self.registry,
        )
        self.action_seconds = Histogram(
            PREFIX + "action_seconds",
            "seconds of each reset and step, by action (reset, exec, read, write, list, evaluate,"
            " solve)",
            ["action"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.image_seconds = Histogram(
            PREFIX + "image_seconds",
            "image builds and pulls, by operation (build, pull) and outcome (ok, failed)",
            ["operation", "outcome"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        for outcome in OUTCOMES:  # every series exists from the start, at 0
            self.episodes_ended.labels(outcome)
        for action in ("reset", "exec", "evaluate"):
            self.action_seconds.labels(action)
        self.registry.register(_Live(snapshot))
        # A weak reference: a runtime that is never shut down (a test's, check's) does not keep
        # its metrics alive, counting, through the listener.
        ref = weakref.ref(self)

        def listener(name: str, fields: dict[str, Any]) -> None:
            metrics = ref()
            if metrics is not None:
                metrics._on_event(name, fields)

        self._unsubscribe = events.subscribe(listener)

    def _on_event(self, name: str, fields: dict[str, Any]) -> None:
        kind = _IMAGE_EVENTS.get(name)
        if kind is not None:
            seconds = fields.get("seconds")
            self.image_seconds.labels(*kind).observe(
                float(seconds) if isinstance(seconds, (int, float)) else 0.0
            )

    def ended(self, outcome: str) -> None:
        self.episodes_ended.labels(outcome).inc()

    def scrape(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)

    def close(self) -> None:
        """Stop counting image events (the server is shutting down)."""
        self._unsubscribe()
