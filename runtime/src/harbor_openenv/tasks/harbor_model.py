"""Harbor 0.25's task models, mirrored from ``harbor/models/task/config.py`` field by field: a
difference from Harbor is easy to find here. Only what they reject differs from
:mod:`harbor_openenv.tasks.config`'s models (whose shared rules they use); they change nothing
about how a task runs, :mod:`.harbor_rules` reports what they refuse."""

from __future__ import annotations

import math
import re
from ipaddress import ip_address, ip_network
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from harbor_openenv.tasks.config import (
    ArtifactSource,
    HealthcheckConfig,
    NetworkMode,
    SolutionConfig,
    portable_name,
    unique_names,
    version_alias,
)

ORG_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_WINDOWS_DEVICE = re.compile(
    r"^(CON|PRN|AUX|NUL|CONIN\$|CONOUT\$|(?:COM|LPT)[1-9¹²³])$", re.IGNORECASE
)
_SERVICE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
_HOST_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_TOPOLOGY = re.compile(r"^[1-9]\d*(x[1-9]\d*)+$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")  # Harbor drops unknown keys


def _service(value: str | None) -> str | None:
    if value is None:
        return value
    value = value.strip()
    if not _SERVICE.match(value):
        raise ValueError(f"{value!r} is not a Docker Compose service name")
    return value


def _allowed_hosts(hosts: list[str] | None) -> list[str] | None:
    """Hostnames, wildcard hostnames, IP addresses or CIDR ranges; no URLs, ports or paths."""
    for raw in hosts or []:
        host = raw.strip().lower().rstrip(".")
        if not host:
            raise ValueError("entries must be non-empty hostnames")
        if "/" in host or ":" in host:
            try:
                (ip_network(host, strict=True) if "/" in host else ip_address(host))
            except ValueError:
                raise ValueError(f"{raw!r} is not a hostname, IP address or CIDR range") from None
            if "%" in host:
                raise ValueError(f"{raw!r}: zone ids are not allowed")
            continue
        if "[" in host or "]" in host or ("*" in host and not host.startswith("*.")):
            raise ValueError(f"{raw!r} is not a hostname or a leading '*.' wildcard")
        name = host[2:] if host.startswith("*.") else host
        if host.startswith("*."):
            try:
                ip_address(name)
            except ValueError:
                pass
            else:
                raise ValueError(f"{raw!r}: wildcards must target hostnames")
        if not name or not all(_HOST_LABEL.match(label) for label in name.split(".")):
            raise ValueError(f"{raw!r} is not a valid hostname")
    return hosts


class _Network(_Model):
    allowed_hosts: list[str] | None = None

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, value: list[str] | None) -> list[str] | None:
        return _allowed_hosts(value)

    @model_validator(mode="after")
    def _allowlist_only(self) -> _Network:
        mode = getattr(self, "network_mode", None)
        if self.allowed_hosts is not None and mode is None:
            raise ValueError("allowed_hosts is only valid when network_mode = 'allowlist'")
        if self.allowed_hosts and mode != "allowlist":
            raise ValueError("allowed_hosts is only valid when network_mode = 'allowlist'")
        return self


class _Author(_Model):
    name: str
    email: str | None = None


class _Package(_Model):
    """``[task]``: optional, but when present its name must be ``org/name``."""

    name: str
    version: str | None = Field(default=None, min_length=1)
    description: str = ""
    authors: list[_Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _org_name(cls, value: str) -> str:
        if not ORG_NAME.match(value) or ".." in value:
            raise ValueError("must be 'org/name' (letters, digits, '.', '_', '-'; no '..')")
        return value


class _Tpu(_Model):
    type: str = Field(min_length=1)
    topology: str

    @field_validator("topology")
    @classmethod
    def _topology(cls, value: str) -> str:
        if not _TOPOLOGY.match(value.strip()):
            raise ValueError("must be dimensions like '2x4' or '2x2x1'")
        return value


class _Mcp(_Model):
    name: str
    transport: Literal["stdio", "sse", "streamable-http"] = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("transport", mode="before")
    @classmethod
    def _http(cls, value: Any) -> Any:
        return "streamable-http" if value == "http" else value

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not _HEADER_NAME.fullmatch(name) or "\r" in value or "\n" in value:
                raise ValueError(f"header {name!r} is not a valid HTTP header")
        return headers

    @model_validator(mode="after")
    def _transport_fields(self) -> _Mcp:
        if self.transport in ("sse", "streamable-http") and not self.url:
            raise ValueError(f"'url' is required for transport {self.transport!r}")
        if self.transport == "stdio" and not self.command:
            raise ValueError("'command' is required for transport 'stdio'")
        if self.transport == "stdio" and self.headers:
            raise ValueError("'headers' is only supported for HTTP transports")
        return self


def _size_mb(text: str) -> int:
    text = text.strip().upper()
    for unit, scale in (("G", 1024.0), ("M", 1.0), ("K", 1 / 1024)):
        if text.endswith(unit):
            return int(float(text[:-1]) * scale)
    raise ValueError(f"{text!r} is not a size like '1G' or '512M'")  # Harbor's message


class _Environment(_Network):
    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: int | float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = None
    gpu_types: list[str] | None = None
    tpu: _Tpu | None = None
    mcp_servers: list[_Mcp] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = None
    healthcheck: HealthcheckConfig | None = None
    workdir: str | None = None
    network_mode: NetworkMode = "public"
    allow_internet: bool | None = None

    @field_validator("os", mode="before")
    @classmethod
    def _os(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, value: int | float | None) -> int | float | None:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for legacy, field in (("memory", "memory_mb"), ("storage", "storage_mb")):
            value = data.pop(legacy, None)
            if isinstance(value, str):
                try:
                    size = _size_mb(value)
                except ValueError:
                    raise ValueError(f"{legacy} = {value!r} is not a size like '4G'") from None
                if field in data and data[field] != size:
                    raise ValueError(f"{legacy} = {value!r} conflicts with {field}")
                data.setdefault(field, size)
        return data


class _Collect(_Model):
    command: str
    service: str = "main"
    timeout_sec: float = 60.0
    user: str | int | None = None

    @field_validator("service")
    @classmethod
    def _service(cls, value: str) -> str:
        return _service(value) or ""


class _Verifier(_Network):
    timeout_sec: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: _Environment | None = None
    collect: list[_Collect] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mode(self) -> _Verifier:
        if self.environment_mode == "shared" and self.environment is not None:
            raise ValueError("environment_mode = 'shared' conflicts with [verifier.environment]")
        return self


class _Agent(_Network):
    timeout_sec: float | None = None
    user: str | int | None = None
    network_mode: NetworkMode | None = None


class _Artifact(_Model):
    source: ArtifactSource
    destination: str | None = None
    exclude: list[str] = Field(default_factory=list)
    service: str | None = None

    @field_validator("service")
    @classmethod
    def _service(cls, value: str | None) -> str | None:
        return _service(value)

    @field_validator("destination")
    @classmethod
    def _destination(cls, value: str | None) -> str | None:
        if not value:
            return None
        path = PurePosixPath(value)
        if "\\" in value or path.is_absolute() or ".." in path.parts:
            raise ValueError("must be a relative path with '/' separators and no '..'")
        if value.rstrip("/") == "manifest.json":
            raise ValueError("'manifest.json' is reserved")
        return value

    @model_validator(mode="after")
    def _sidecar_absolute(self) -> _Artifact:
        if self.service not in (None, "main") and not (
            self.source.startswith("/") or re.match(r"^[A-Za-z]:[/\\]", self.source)
        ):
            raise ValueError(
                f"source {self.source!r} from service {self.service!r} must be absolute"
            )
        return self


class _Step(_Model):
    name: str
    agent: _Agent = Field(default_factory=_Agent)
    verifier: _Verifier = Field(default_factory=_Verifier)
    min_reward: float | dict[str, float] | None = None
    healthcheck: HealthcheckConfig | None = None
    artifacts: list[str | _Artifact] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _portable(cls, name: str) -> str:
        if not portable_name(name) or _WINDOWS_DEVICE.fullmatch(name.partition(".")[0].rstrip(" ")):
            raise ValueError("is not a portable directory name (Windows device names included)")
        if len(name.encode("utf-8")) > 255:
            raise ValueError("must be at most 255 UTF-8 bytes")
        return name


class HarborTaskConfig(_Model):
    schema_version: str = "1.4"  # a string: `version = 1.0` is a float, which Harbor refuses
    task: _Package | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: _Verifier = Field(default_factory=_Verifier)
    agent: _Agent = Field(default_factory=_Agent)
    environment: _Environment = Field(default_factory=_Environment)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    source: str | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: Annotated[list[_Step] | None, AfterValidator(unique_names)] = None
    artifacts: list[str | _Artifact] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _version(cls, data: object) -> object:
        return version_alias(data)
