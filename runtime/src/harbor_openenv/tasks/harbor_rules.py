"""What Harbor 0.25 would refuse: the rules its task model enforces when it loads a task.

Longer than ~400 lines: it mirrors Harbor's task models field by field, which is what makes a
difference from Harbor easy to find; the rules shared with our own models come from task_config.

This runtime parses ``task.toml`` leniently (it can serve a task Harbor would not load), so
``validate`` reports each rule Harbor's ``TaskConfig`` and ``Task.is_valid_dir`` enforce as a
Harbor-compatibility warning naming the field: ``harbor run`` skips such a task, or fails it.
The models below mirror ``harbor/models/task/config.py`` (0.25) field by field; only what they
reject differs from :mod:`harbor_openenv.tasks.config`'s models, nothing here changes how a
task runs.
Also reported: a task nested below the dataset's top folder (``harbor run -p`` loads immediate
subfolders only), no ``environment/`` and no image, inputs linking outside the task. Not mirrored:
the credential rules of MCP servers' HTTP headers, and ``.harborignore`` hiding a test script.
"""

from __future__ import annotations

import math
import re
import tomllib
import types
import typing
from ipaddress import ip_address, ip_network
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from harbor_openenv.tasks.config import (
    TASK_FILE,
    ArtifactSource,
    HealthcheckConfig,
    NetworkMode,
    SolutionConfig,
    portable_name,
    unique_names,
    version_alias,
)
from harbor_openenv.tasks.task import Task

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


class _TaskConfig(_Model):
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


def config_warnings(data: dict[str, Any]) -> list[tuple[str, str]]:
    """What Harbor's ``TaskConfig`` refuses in parsed task.toml ``data``: (field, why) pairs."""
    try:
        _TaskConfig.model_validate(data)
    except ValidationError as exc:
        return _describe(exc)
    return []


def _config(data: dict[str, Any]) -> _TaskConfig | None:
    try:
        return _TaskConfig.model_validate(data)
    except ValidationError:
        return None


def harbor_warnings(task: Task) -> list[dict[str, str]]:
    """Why Harbor 0.25 would not load ``task`` (empty: it would): one ``{"field", "warning"}``
    per field, ``warning`` a whole line naming the task, its file and the field."""
    source = f"{task.id}/{TASK_FILE}"
    try:
        data = tomllib.loads((task.path / TASK_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return [_warning(TASK_FILE, f"{source}: Harbor cannot read it: {exc}")]
    found = [_warning(f, f"{source}: {f}: {why}") for f, why in config_warnings(data)]
    config = _config(data)
    if "/" in task.id:
        found.append(
            _warning(
                "task folder",
                f"{task.id}: nested below the dataset's top folder; `harbor run -p DATASET`"
                " loads only its immediate subfolders",
            )
        )
    docker_image = (data.get("environment") or {}).get("docker_image")
    if not docker_image and not task.environment_dir.is_dir():
        found.append(
            _warning(
                "environment/",
                f"{task.id}/environment/: missing and no [environment].docker_image; Harbor"
                " skips the task",
            )
        )
    if task.compose_file is not None:
        found += _legacy_mounts(task, task.compose_file)
    inputs = [task.tests_dir(), task.solution_dir()]
    inputs += [task.step_path(step.name) for step in (config.steps or [])] if config else []
    for folder in inputs:
        escape = _escaping_link(folder, task.path)
        if escape:
            found.append(_warning(escape[0], f"{task.id}/{escape[0]}: {escape[1]}"))
    return found


# Harbor's legacy log-mount variables (environments/docker/compose_env.py): Harbor 0.25 sets them
# only for mounts it makes, and it makes none by default (``auto_mounting`` is off).
_LEGACY_MOUNT = re.compile(r"\$\{?((?:HOST|ENV)_(?:VERIFIER_LOGS|AGENT_LOGS|ARTIFACTS)_PATH)\b")


def _legacy_mounts(task: Task, compose_file: Path) -> list[dict[str, str]]:
    """A compose file that mounts Harbor's legacy log paths: left empty, compose refuses it."""
    try:
        text = compose_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    names = sorted(set(_LEGACY_MOUNT.findall(text)))
    if not names:
        return []
    where = compose_file.relative_to(task.path).as_posix()
    return [
        _warning(
            where,
            f"{task.id}/{where}: uses {', '.join(names)}, which Harbor 0.25 sets only with"
            " `--ek auto_mounting=true` (this runtime mounts no server path): left empty, compose"
            " refuses the mount (`invalid mount path: ':'`)",
        )
    ]


def _warning(field: str, line: str) -> dict[str, str]:
    return {"field": field, "warning": line}


def _escaping_link(folder: Path, root: Path) -> tuple[str, str] | None:
    """A path under ``folder`` that resolves outside ``root`` or loops, as Harbor refuses."""
    inside = root.resolve()

    def visit(path: Path, ancestors: frozenset[Path]) -> tuple[str, str] | None:
        where = path.relative_to(root).as_posix()
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):
            return where, "a link that cannot be resolved"
        if not resolved.is_relative_to(inside):
            return where, "links outside the task; Harbor refuses inputs that leave the task"
        if not path.is_dir():
            return None
        if resolved in ancestors:
            return where, "directory links form a cycle"
        for child in sorted(path.iterdir()):
            found = visit(child, ancestors | {resolved})
            if found:
                return found
        return None

    if not folder.exists() and not folder.is_symlink():
        return None
    return visit(folder, frozenset())


def _describe(exc: ValidationError) -> list[tuple[str, str]]:
    """``[table].field: message (got value)`` per field; of a union's alternatives, the error of
    a table alternative wins (``source ... must be absolute`` over ``not a valid string``)."""
    found: dict[str, tuple[int, str]] = {}
    for error in exc.errors():
        field, plain = _field_name(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        value = error.get("input")
        if not isinstance(value, dict | list):
            text = repr(value)
            message += f" (got {text[:80]}{'...' if len(text) > 80 else ''})"
        rank = 1 if plain else 0
        if field not in found or rank < found[field][0]:
            found[field] = (rank, message)
    return [(field, message) for field, (_, message) in found.items()]


_PLAIN_TAGS = {"str", "int", "float", "bool", "none", "dict[str,float]", "dict[str,str]"}


def _field_name(loc: tuple[int | str, ...]) -> tuple[str, bool]:
    """The TOML spelling of a pydantic error location (``[environment].tpu.topology``), and
    whether it is the error of a plain (non-table) alternative of a union."""
    parts: list[str] = []
    plain = False
    current: Any = _TaskConfig
    for part in loc:
        if isinstance(part, int):
            if parts:
                parts[-1] += f"[{part}]"
            continue
        model = _model_in(current)
        if model is not None and part in model.model_fields:
            parts.append(str(part))
            current = model.model_fields[part].annotation
        elif typing.get_origin(current) is dict:
            parts.append(str(part))  # a key of an env table
            current = None
        elif str(part) in _PLAIN_TAGS:
            plain = True
    if not parts:
        return "(top level)", plain
    name, _, index = parts[0].partition("[")
    annotation = _TaskConfig.model_fields[name].annotation
    if name == "steps":
        head = f"[[steps]][{index}" if index else "[[steps]]"
    elif _model_in(annotation) is not None and typing.get_origin(annotation) is not list:
        head = f"[{parts[0]}]"  # a table
    else:
        head = parts[0]  # a root key
    return head + "".join(f".{part}" for part in parts[1:]), plain


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field's annotation holds (through Optional, list and unions), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) in (
        typing.Union,
        list,
    ):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
