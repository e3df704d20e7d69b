"""Every ``HARBOR_OPENENV_*`` server setting, in one frozen :class:`Settings`.

Each field is read from the variable named ``HARBOR_OPENENV_`` + its name in capitals (``pool_size``
from ``HARBOR_OPENENV_POOL_SIZE``) by :meth:`Settings.from_env`, the one place the runtime reads its
settings from the environment; ``build_app``, ``Runtime`` and the CLI pass the object down. An
unset or empty variable keeps the default. Each value is parsed once, into its type (a list, a JSON
object), and the rules across settings are checked when a :class:`Settings` is made, so a server
refuses a combination at start-up. The docs' settings reference
(docs/reference/settings.md) is generated from these fields when the site is built (docs/hooks.py).
OpenEnv's own ``ENABLE_WEB_INTERFACE`` stays OpenEnv's (see ``_openenv``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harbor_openenv.tasks.reward import reward_rule

PREFIX = "HARBOR_OPENENV_"
LOG_FORMATS = ("text", "json")
ENGINE_SCHEMES = ("unix", "tcp", "ssh")
# What HARBOR_OPENENV_PUBLIC_NETWORK and _VERIFIER_NETWORK refuse: the host's network namespace (its
# loopback services, this server and a TCP engine among them), and "none", which is a task's own
# network_mode = "no-network" to ask for. Docker's own rule for a network's name.
_NOT_NAMED_NETWORKS = ("host", "none", "default")
_NETWORK_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")


def _about(doc: str, kind: type = str, *, zero: bool = False) -> dict[str, Any]:
    """A field's metadata: one line of doc, how its variable parses (``zero``: 0 means off)."""
    return {"doc": doc, "kind": kind, "zero": zero}


@dataclass(frozen=True)
class Settings:
    """Server-wide limits and switches; ``Settings()`` is every default."""

    tasks: Path | None = field(
        default=None,
        metadata=_about(
            "the tasks folder (default: tasks/ beside the app; the CLI: the current folder)", Path
        ),
    )
    max_sessions: int = field(
        default=8,
        metadata=_about(
            "concurrent WebSocket sessions, and running episodes whichever route started them", int
        ),
    )
    session_timeout_s: float = field(
        default=1800.0,
        metadata=_about(
            "seconds a session may wait for its next message before it is closed", float
        ),
    )
    reset_within_s: float = field(
        default=60.0,
        metadata=_about(
            "seconds a new WebSocket session (/ws) may take to send its first reset before it"
            " is closed and its slot freed (0: no limit but the session timeout)",
            float,
        ),
    )
    drain_s: float = field(
        default=25.0,
        metadata=_about(
            "on SIGTERM, seconds running episodes get to finish before the server stops (0: stop"
            " at once)",
            float,
            zero=True,
        ),
    )
    exec_timeout_s: float = field(
        default=300.0, metadata=_about("default and cap of one exec", float)
    )
    max_output_bytes: int = field(
        default=1 << 20, metadata=_about("exec output kept per call", int)
    )
    max_write_bytes: int = field(
        default=8 << 20, metadata=_about("largest file content one write accepts", int)
    )
    max_read_bytes: int = field(
        default=8 << 20, metadata=_about("largest file content one read returns", int)
    )
    exec_channel: bool = field(
        default=True,
        metadata=_about(
            "1: the agent's actions run through one long-lived exec per episode (the exec"
            " channel); 0: an engine exec each",
            bool,
        ),
    )
    solve_timeout_s: float = field(
        default=1800.0,
        metadata=_about("solve.sh's and setup.sh's timeout when the task sets none", float),
    )
    rollout_timeout_s: float = field(
        default=1800.0,
        metadata=_about("default and cap of a rollout's time budget (the harness's run)", float),
    )
    rollout_max_turns: int = field(
        default=100, metadata=_about("default and cap of a rollout's model calls", int)
    )
    pids_limit: int = field(
        default=1024,
        metadata=_about("most processes in one task container (0: no limit)", int, zero=True),
    )
    default_cpus: float = field(
        default=1.0, metadata=_about("CPU quota of a task whose task.toml sets none", float)
    )
    default_memory_mb: int = field(
        default=2048, metadata=_about("memory limit of a task whose task.toml sets none", int)
    )
    disk_mb: int = field(
        default=10240,
        metadata=_about(
            "an episode's files, for tasks without storage_mb (0: unbounded)", int, zero=True
        ),
    )
    disk_check_s: float = field(
        default=2.0,
        metadata=_about("how often the disk guard measures every running episode", float),
    )
    max_reward_bytes: int = field(
        default=1 << 20,
        metadata=_about(
            "largest reward file evaluate reads (each of reward.json, .txt, details)", int
        ),
    )
    reward_key: str | None = field(
        default=None,
        metadata=_about(
            "which reward.json metric is the reward (KEY), or mean:K1,K2 (their mean), when the"
            " metrics hold them (default: the 'reward' key, else the only key, else None)"
        ),
    )
    pristine_verifier: tuple[str, ...] = field(
        default=(),
        metadata=_about(
            "task ids (comma-separated fnmatch patterns, * for all) whose verifier runs in a"
            " fresh container of the task's image with the agent's workdir copied in (a pristine"
            " toolchain); compose tasks keep the shared container",
            tuple,
        ),
    )
    max_artifact_bytes: int = field(
        default=1 << 30,
        metadata=_about("a separate verifier's artifacts together, on the server's disk", int),
    )
    orchestration_token: str | None = field(
        default=None,
        metadata=_about("enables evaluate/solve for callers that send it (unset: refused)"),
    )
    default_task: str | None = field(
        default=None, metadata=_about("what a reset without a choice starts (first task)")
    )
    build_network: str | None = field(
        default=None,
        metadata=_about("network for task image builds, sidecars' too (default: the engine's)"),
    )
    public_network: str | None = field(
        default=None,
        metadata=_about(
            "the engine network a public task's containers join (default: the engine's)"
        ),
    )
    verifier_network: str | None = field(
        default=None,
        metadata=_about(
            "the engine network a public task's separate verifier joins (default: the agent's)"
        ),
    )
    docker_tls_ca: str | None = field(
        default=None,
        metadata=_about("a remote engine's CA certificate, PEM contents (a ca.pem)"),
    )
    docker_tls_cert: str | None = field(
        default=None,
        metadata=_about("the client certificate for that engine, PEM contents (a cert.pem)"),
    )
    docker_tls_key: str | None = field(
        default=None,
        metadata=_about("its private key, PEM contents (a key.pem)"),
    )
    docker_hosts: tuple[str, ...] = field(
        default=(),
        metadata=_about(
            "several engines, comma-separated URLs (unix://, tcp://, ssh://): episodes go to the"
            " least busy one that is up (unset: the one DOCKER_HOST names)",
            tuple,
        ),
    )
    engine_probe_s: float = field(
        default=5.0,
        metadata=_about(
            "seconds between pings of each of HARBOR_OPENENV_DOCKER_HOSTS's engines (a failed"
            " one is taken out, a down one that answers comes back)",
            float,
        ),
    )
    backend: str = field(
        default="docker",
        metadata=_about(
            "where episodes run: docker (this server's engine), or harbor:TYPE (Harbor's"
            " environment TYPE, such as harbor:docker; the harbor extra, Python >= 3.12)"
        ),
    )
    harbor_env_kwargs: Mapping[str, Any] | None = field(
        default=None,
        metadata=_about(
            "a JSON object of keyword arguments for Harbor's environment (with"
            " HARBOR_OPENENV_BACKEND=harbor:TYPE)",
            dict,
        ),
    )
    pool_size: int = field(
        default=0,
        metadata=_about(
            "pre-started containers kept per container spec (0: no warm pool)", int, zero=True
        ),
    )
    fork_ttl_s: float = field(
        default=600.0,
        metadata=_about(
            "seconds a fork's branch IDs stay usable; then the unused ones expire", float
        ),
    )
    log_format: str = field(
        default="text", metadata=_about("the server's own log lines: text, or json (one a line)")
    )
    log_level: str = field(
        default="INFO", metadata=_about("level of logger harbor_openenv (WARNING: errors only)")
    )
    record_dir: Path | None = field(
        default=None,
        metadata=_about(
            "write every episode as a Harbor trial folder in a job folder here (unset: off)", Path
        ),
    )
    codex_package: Path | None = field(
        default=None,
        metadata=_about(
            "the Codex CLI the codex harness installs into task containers: a folder (or an npm"
            " pack .tgz) of its per-platform builds, as scripts/fetch-codex leaves it",
            Path,
        ),
    )
    harness_cache: Path | None = field(
        default=None,
        metadata=_about(
            "the harness cache the inside harnesses run from (claude-code, ...), with terminus-2's"
            " tmux: a folder that `harbor-openenv harnesses fill` fills, put read-only into every"
            " task container",
            Path,
        ),
    )
    env_name: str | None = field(
        default=None, metadata=_about("/metadata's name (default: from openenv.yaml)")
    )
    env_version: str | None = field(
        default=None, metadata=_about("/metadata's version (default: from openenv.yaml)")
    )

    def __post_init__(self) -> None:
        _cross_checked(self)

    @property
    def harbor_type(self) -> str | None:
        """The TYPE of ``HARBOR_OPENENV_BACKEND=harbor:TYPE`` (None: this server's engines)."""
        return self.backend.removeprefix("harbor:") if self.backend != "docker" else None

    def pristine(self, task_id: str) -> bool:
        """Whether ``HARBOR_OPENENV_PRISTINE_VERIFIER`` names task ``task_id``."""
        return any(fnmatch.fnmatchcase(task_id, pattern) for pattern in self.pristine_verifier)

    @staticmethod
    def variable(name: str) -> str:
        """The environment variable of field ``name``."""
        return PREFIX + name.upper()

    @classmethod
    def variables(cls) -> dict[str, dataclasses.Field[Any]]:
        """Every variable the settings read, with its field."""
        return {cls.variable(f.name): f for f in dataclasses.fields(cls)}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``environ`` (default ``os.environ``); ValueError names a bad variable."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for variable, f in cls.variables().items():
            raw = env.get(variable)
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(variable, raw, f.metadata["kind"], f.metadata["zero"])
        values = _checked(values)
        return cls(**values)


def _parse(variable: str, raw: str, kind: type, zero: bool) -> Any:
    if kind is str:
        return raw
    if kind is tuple:  # a comma-separated list
        parts = tuple(part.strip() for part in raw.split(",") if part.strip())
        if not parts:
            raise ValueError(f"{variable}={raw!r} names nothing")
        return parts
    if kind is dict:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ValueError(f"{variable} must be a JSON object ({raw[:100]!r})")
        return parsed
    if kind is Path:
        return Path(raw)
    if kind is bool:
        if raw.strip() not in ("0", "1"):
            raise ValueError(f"{variable}={raw!r} must be 0 or 1")
        return raw.strip() == "1"
    try:
        value = kind(raw)
    except ValueError:
        raise ValueError(f"{variable}={raw!r} is not a number") from None
    if not value == value or value in (float("inf"), float("-inf")):  # nan, inf
        raise ValueError(f"{variable}={raw!r} is not a finite number")
    if value < 0 or (value == 0 and not zero):
        raise ValueError(f"{variable}={raw!r} must be {'0 or more' if zero else 'greater than 0'}")
    return value


def _checked(values: dict[str, Any]) -> dict[str, Any]:
    """Normalise and check each variable's own value: the log settings, the backend, the engine
    list and the reward key."""
    if "log_format" in values:
        fmt = values["log_format"].strip().lower()
        if fmt not in LOG_FORMATS:
            raise ValueError(
                f"{Settings.variable('log_format')}={values['log_format']!r} must be"
                f" {' or '.join(LOG_FORMATS)}"
            )
        values["log_format"] = fmt
    if "log_level" in values:
        level = values["log_level"].strip().upper()
        if level and not isinstance(logging.getLevelName(level), int):
            raise ValueError(
                f"{Settings.variable('log_level')}={values['log_level']!r} is not a log level"
                " (DEBUG, INFO, WARNING, ERROR, CRITICAL)"
            )
        values["log_level"] = level or "INFO"
    if "backend" in values:
        values["backend"] = values["backend"].strip()
    if "reward_key" in values:
        try:
            reward_rule(values["reward_key"])
        except ValueError as exc:
            raise ValueError(f"{Settings.variable('reward_key')}={exc}") from None
        values["reward_key"] = values["reward_key"].strip()
    return values


def _check_hosts(urls: tuple[str, ...]) -> None:
    """ValueError for a list of engine URLs that names a bad one or one twice."""
    for url in urls:
        if urlsplit(url).scheme not in ENGINE_SCHEMES:
            raise ValueError(f"{url!r} is not a unix://, tcp:// or ssh:// engine URL")
    repeated = sorted({url for url in urls if urls.count(url) > 1})
    if repeated:
        raise ValueError(f"names {', '.join(repeated)} more than once")


def _cross_checked(settings: Settings) -> None:
    """The rules across settings: ValueError naming the variables that do not go together."""
    backend, pool, hosts = (Settings.variable(n) for n in ("backend", "pool_size", "docker_hosts"))
    if settings.backend != "docker" and not (
        settings.backend.startswith("harbor:") and settings.backend[7:]
    ):
        raise ValueError(f"{backend}={settings.backend!r} must be docker or harbor:TYPE")
    if settings.docker_hosts:
        try:
            _check_hosts(settings.docker_hosts)
        except ValueError as exc:
            raise ValueError(f"{hosts}={','.join(settings.docker_hosts)!r} {exc}") from None
    if settings.harbor_type and settings.pool_size:
        raise ValueError(
            f"{pool}={settings.pool_size}: Harbor's backends ({backend}={settings.backend})"
            " have no warm pool"
        )
    if settings.docker_hosts and settings.harbor_type:
        raise ValueError(
            f"{hosts} names Docker engines, which {backend}={settings.backend} does not use:"
            " unset one of them"
        )
    if settings.docker_hosts and settings.pool_size:
        raise ValueError(
            f"{pool}={settings.pool_size}: the warm pool keeps one engine's containers; with"
            f" several ({hosts}) set it to 0"
        )
    for name in ("public_network", "verifier_network"):
        network = getattr(settings, name)
        if network is None:
            continue
        variable = Settings.variable(name)
        if network in _NOT_NAMED_NETWORKS or network.startswith("container:"):
            raise ValueError(
                f"{variable}={network!r} is not a network a public task may be given: name an"
                " engine network (docker network create NAME)"
                + (", never the host's" if network == "host" else "")
            )
        if not _NETWORK_NAME.fullmatch(network):
            raise ValueError(f"{variable}={network!r} is not a Docker network name")
        if settings.harbor_type:
            raise ValueError(
                f"{variable} names a network of this server's engines, which"
                f" {backend}={settings.backend} does not use: unset one of them"
            )
    tls = (settings.docker_tls_ca, settings.docker_tls_cert, settings.docker_tls_key)
    if any(tls) and not all(tls):
        raise ValueError("HARBOR_OPENENV_DOCKER_TLS_CA, _CERT and _KEY go together: one is unset")
