"""task.toml: the models of the parts this runtime reads, parsed with Harbor 0.25's semantics.

Parsing is lenient where Harbor's is (unknown keys are dropped, legacy spellings are read) and
strict where running a task needs it: a timeout or size must be a positive, finite number.
Errors name the file and the field (``tasks/x/task.toml: [environment].cpus: ...``).
"""

from __future__ import annotations

import math
import re
import tomllib
import unicodedata
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from harbor_openenv.errors import HarborOpenEnvError

TASK_FILE = "task.toml"
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([GMK])\s*$", re.IGNORECASE)
_BAD_STEP_NAME = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_ENV_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")

NetworkMode = Literal["public", "no-network", "allowlist"]


class DatasetError(HarborOpenEnvError):
    """A dataset or task cannot be used; the message names the file and, where known, the field."""


_Number = TypeVar("_Number", bound=float)


def _positive_finite(value: _Number) -> _Number:
    """Timeouts and sizes: a NaN, infinite or non-positive one is a task error, not a hang."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


PositiveFinite = Annotated[_Number, AfterValidator(_positive_finite)]
"""A number the runtime waits or allocates by: ``PositiveFinite[float]``, ``[int]``, ..."""


def _number_as_text(value: object) -> object:
    return str(value) if isinstance(value, int | float) else value


SchemaVersion = Annotated[str, BeforeValidator(_number_as_text)]
"""``schema_version``: a string; the runtime also takes a number (``version = 1.0``), Harbor not."""


def _no_parent(value: str) -> str:
    if ".." in PurePosixPath(value).parts:
        raise ValueError("must not contain '..' components")
    return value


ArtifactSource = Annotated[str, AfterValidator(_no_parent)]
"""An artifact's ``source`` (Harbor's rule too): a path without ``..`` components."""


def portable_name(name: str) -> bool:
    """Whether ``name`` is a directory name on every system (a ``[[steps]]`` entry's name)."""
    return not (
        not name.strip()
        or name in {".", ".."}
        or name.endswith((".", " "))
        or _BAD_STEP_NAME.search(name)
    )


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_Step = TypeVar("_Step", bound=_Named)


def unique_names(steps: list[_Step] | None) -> list[_Step] | None:
    """``[[steps]]``: names unique case-insensitively (and up to Unicode normalization)."""
    seen: set[str] = set()
    for step in steps or []:
        key = unicodedata.normalize("NFC", step.name).casefold()
        if key in seen:
            raise ValueError(f"step names must be unique (case-insensitively): {step.name!r}")
        seen.add(key)
    return steps


def version_alias(data: object) -> object:
    """``version``, the old name of ``schema_version`` (which wins when both are given)."""
    if isinstance(data, dict) and "version" in data:
        data = dict(data)
        data.setdefault("schema_version", data.pop("version"))
    return data


class _Table(BaseModel):
    # Harbor drops keys it does not know (pydantic's default); so do we.
    model_config = ConfigDict(extra="ignore")


class HealthcheckConfig(_Table):
    """``[environment.healthcheck]``: run in the main container until it passes, as Harbor does."""

    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


class ArtifactConfig(_Table):
    """An ``artifacts`` entry given as a table (a bare string is its ``source``)."""

    source: ArtifactSource
    destination: str | None = None
    exclude: list[str] = Field(default_factory=list)
    service: str | None = None


class AgentConfig(_Table):
    timeout_sec: PositiveFinite[float] | None = None
    user: str | int | None = None
    network_mode: NetworkMode | None = None


class SolutionConfig(_Table):
    env: dict[str, str] = Field(default_factory=dict)


class EnvironmentConfig(_Table):
    build_timeout_sec: PositiveFinite[float] = 600.0
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: PositiveFinite[int | float] | None = None
    memory_mb: PositiveFinite[int] | None = None
    storage_mb: int | None = None
    gpus: int | None = None
    tpu: dict[str, Any] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    network_mode: NetworkMode = "public"
    allowed_hosts: list[str] | None = None
    healthcheck: HealthcheckConfig | None = None
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _legacy_fields(cls, data: Any) -> Any:
        """``memory``/``storage`` size strings and ``allow_internet``, as Harbor 0.25 reads them."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for legacy, field in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if legacy in data:
                value = data.pop(legacy)
                if isinstance(value, str):  # Harbor silently drops non-string values
                    data.setdefault(field, _size_to_mb(value, legacy))
        allow_internet = data.pop("allow_internet", None)
        if allow_internet is not None and "network_mode" not in data:
            data["network_mode"] = "public" if allow_internet else "no-network"
        if isinstance(data.get("os"), str):
            data["os"] = data["os"].lower()
        return data


class VerifierConfig(_Table):
    timeout_sec: PositiveFinite[float] = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: EnvironmentConfig | None = None
    collect: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mode_consistent(self) -> VerifierConfig:
        if self.environment_mode == "shared" and self.environment is not None:
            raise ValueError(
                "environment_mode = 'shared' conflicts with [verifier.environment]; omit one"
            )
        return self

    @property
    def mode(self) -> Literal["shared", "separate"] | None:
        """The mode this table asks for: explicit, else separate when it has an environment."""
        if self.environment_mode is not None:
            return self.environment_mode
        return "separate" if self.environment is not None else None


class StepConfig(_Table):
    """One ``[[steps]]`` entry: ``steps/<name>/`` holds its instruction, tests and solution."""

    name: str
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    min_reward: float | dict[str, float] | None = None
    healthcheck: HealthcheckConfig | None = None
    artifacts: list[str | ArtifactConfig] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _portable_name(cls, value: str) -> str:
        if not portable_name(value):
            raise ValueError(f"{value!r} is not a portable directory name")
        return value


class TaskConfig(_Table):
    """The parts of Harbor's ``TaskConfig`` this runtime reads; ``metadata`` is kept verbatim."""

    schema_version: SchemaVersion = "1.4"
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: Annotated[list[StepConfig] | None, AfterValidator(unique_names)] = None
    artifacts: list[str | ArtifactConfig] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _version_alias(cls, data: object) -> object:
        return version_alias(data)

    @property
    def repo2env(self) -> dict[str, Any]:
        value = self.metadata.get("repo2env")
        return value if isinstance(value, dict) else {}


def _size_to_mb(text: str, field: str) -> int:
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{field} = {text!r} is not a size like '4G' or '512M'")
    number, unit = float(match[1]), match[2].upper()
    if not math.isfinite(number):
        raise ValueError(f"{field} = {text[:40]!r}... is too large")
    return int(number * {"G": 1024, "M": 1, "K": 1 / 1024}[unit])


def parse_task_config(text: str, source: str = TASK_FILE) -> TaskConfig:
    """Parse task.toml text; errors name ``source`` and the offending field."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DatasetError(f"{source}: not valid TOML: {exc}") from None
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        raise DatasetError(f"{source}: {_describe(exc)}") from None


def _describe(exc: ValidationError) -> str:
    """One ``[table].field: message`` per field; union alternatives collapse into one."""
    problems: dict[str, str] = {}
    for error in exc.errors():
        parts = _field_path(TaskConfig, error["loc"])
        if not parts:
            field = "(top level)"
        elif len(parts) == 1:
            table = isinstance(error["input"], dict)
            field = f"[{parts[0]}]" if table else parts[0]
        else:
            field = f"[{parts[0]}]" + "".join(f".{part}" for part in parts[1:])
        message = error["msg"].removeprefix("Value error, ")
        if not isinstance(error["input"], dict):
            message += f" (got {error['input']!r})"
        problems.setdefault(field, message)
    return "; ".join(f"{field}: {message}" for field, message in problems.items())


def _field_path(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The part of a pydantic error location that names fields (not union member tags)."""
    parts: list[str] = []
    current: Any = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                break
            parts.append(str(part))
            current = field.annotation
        else:
            if isinstance(part, int):
                parts[-1] += f"[{part}]"
            break
    return parts


def resolve_env(values: dict[str, str], field: str, environ: dict[str, str]) -> dict[str, str]:
    """Resolve ``${VAR}`` / ``${VAR:-default}`` values from ``environ`` as Harbor does.

    Only whole-value templates are resolved; anything else is literal. An unset variable without
    a default raises :class:`DatasetError` naming ``field``, the key and the variable.
    """
    resolved = {}
    for key, value in values.items():
        match = _ENV_TEMPLATE.fullmatch(value)
        if not match:
            resolved[key] = value
        elif match[1] in environ:
            resolved[key] = environ[match[1]]
        elif match[2] is not None:
            resolved[key] = match[2]
        else:
            raise DatasetError(
                f"{field}.{key} = {value!r}: the variable {match[1]} is not set on the server"
                " and has no default"
            )
    return resolved


def serve_time_variables(config: TaskConfig) -> dict[str, list[str]]:
    """Variables the server must have set (``${VAR}`` without a default), each with the fields
    that name it: reset refuses the task on a server where one is unset."""
    tables = [
        ("[environment].env", config.environment.env),
        ("[solution].env", config.solution.env),
        ("[verifier].env", config.verifier.env),
    ]
    if config.verifier.environment is not None:
        tables.append(("[verifier.environment].env", config.verifier.environment.env))
    for index, step in enumerate(config.steps or []):
        tables.append((f"[[steps]][{index}].verifier.env", step.verifier.env))
        if step.verifier.environment is not None:
            where = f"[[steps]][{index}].verifier.environment.env"
            tables.append((where, step.verifier.environment.env))
    needed: dict[str, list[str]] = {}
    for field_name, values in tables:
        for key, value in values.items():
            match = _ENV_TEMPLATE.fullmatch(value)
            if match and match[2] is None:
                needed.setdefault(match[1], []).append(f"{field_name}.{key}")
    return needed


def verifier_mode(config: TaskConfig, step: StepConfig | None = None) -> str:
    """``shared`` or ``separate``: the step's own mode, else the task's, else shared."""
    return (step.verifier.mode if step else None) or config.verifier.mode or "shared"


def verifier_environment(config: TaskConfig, step: StepConfig | None = None) -> EnvironmentConfig:
    """The ``[verifier.environment]`` a separate verifier runs with (else ``[environment]``)."""
    if step is not None and step.verifier.environment is not None:
        return step.verifier.environment
    return config.verifier.environment or config.environment


def artifact_entries(config: TaskConfig, step: StepConfig | None = None) -> list[ArtifactConfig]:
    """``/logs/artifacts`` plus the task's and the step's ``artifacts``, strings as sources."""
    entries = [ArtifactConfig(source="/logs/artifacts")]
    for entry in [*config.artifacts, *(step.artifacts if step else [])]:
        entries.append(ArtifactConfig(source=entry) if isinstance(entry, str) else entry)
    return entries
