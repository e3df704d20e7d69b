"""Harbor task directories: discovery, task.toml parsing with Harbor 0.25's semantics, and kinds.

A dataset is a folder holding task directories (a folder with a ``task.toml``), nested folders
allowed; a task's id is its path relative to the root. Listing never parses; each task parses its
``task.toml`` on first use, so a 10,000-task dataset lists in milliseconds.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
import unicodedata
from enum import StrEnum
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

TASK_FILE = "task.toml"
_CANARY_LINE = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([GMK])\s*$", re.IGNORECASE)
_BAD_STEP_NAME = re.compile(r'[<>:"/\\|?*\x00-\x1f\x7f]')
_ENV_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")


class DatasetError(Exception):
    """A dataset or task cannot be used; the message names the file and, where known, the field."""


class TaskKind(StrEnum):
    RUNNABLE = "runnable"
    TEXT_ONLY = "text-only"
    INVALID = "invalid"
    UNSUPPORTED = "unsupported"


class _Table(BaseModel):
    # Harbor drops keys it does not know (pydantic's default); so do we.
    model_config = ConfigDict(extra="ignore")


_NETWORK_MODE = Literal["public", "no-network", "allowlist"]


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

    source: str
    destination: str | None = None
    exclude: list[str] = Field(default_factory=list)
    service: str | None = None

    @field_validator("source")
    @classmethod
    def _no_parent(cls, value: str) -> str:
        if ".." in PurePosixPath(value).parts:
            raise ValueError(f"must not contain '..' components (got {value!r})")
        return value


def _finite_positive(value: float | None) -> float | None:
    """Timeouts and sizes: a NaN, infinite or non-positive one is a task error, not a hang."""
    if value is not None and not math.isfinite(value):
        raise ValueError("must be a finite number")
    if value is not None and value <= 0:
        raise ValueError("must be greater than 0")
    return value


class AgentConfig(_Table):
    timeout_sec: float | None = None
    user: str | int | None = None
    network_mode: _NETWORK_MODE | None = None

    @field_validator("timeout_sec")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        return _finite_positive(value)


class SolutionConfig(_Table):
    env: dict[str, str] = Field(default_factory=dict)


class EnvironmentConfig(_Table):
    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: int | float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = None
    tpu: dict[str, Any] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    network_mode: _NETWORK_MODE = "public"
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

    @field_validator("cpus")
    @classmethod
    def _finite_cpus(cls, value: int | float | None) -> int | float | None:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("must be a finite number")
        if value is not None and value <= 0:
            raise ValueError("must be greater than 0")
        return value

    @field_validator("memory_mb", "build_timeout_sec")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        return _finite_positive(value)


class VerifierConfig(_Table):
    timeout_sec: float = 600.0
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    network_mode: _NETWORK_MODE | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: EnvironmentConfig | None = None
    collect: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("timeout_sec")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        return _finite_positive(value)

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
        if (
            not value.strip()
            or value in {".", ".."}
            or value.endswith((".", " "))
            or _BAD_STEP_NAME.search(value)
        ):
            raise ValueError(f"{value!r} is not a portable directory name")
        return value


class TaskConfig(_Table):
    """The parts of Harbor's ``TaskConfig`` this runtime reads; ``metadata`` is kept verbatim."""

    schema_version: str = "1.4"
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: list[StepConfig] | None = None
    artifacts: list[str | ArtifactConfig] = Field(default_factory=list)

    @field_validator("steps")
    @classmethod
    def _unique_steps(cls, steps: list[StepConfig] | None) -> list[StepConfig] | None:
        seen: set[str] = set()
        for step in steps or []:
            key = unicodedata.normalize("NFC", step.name).casefold()
            if key in seen:
                raise ValueError(f"step names must be unique (case-insensitively): {step.name!r}")
            seen.add(key)
        return steps

    @model_validator(mode="before")
    @classmethod
    def _version_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "version" in data:
            data = dict(data)
            version = data.pop("version")
            data.setdefault("schema_version", version)
        return data

    @field_validator("schema_version", mode="before")
    @classmethod
    def _version_as_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int | float) else value

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


def _field_path(model: type[BaseModel], loc: tuple) -> list[str]:
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


class ImageSource(BaseModel):
    """Where a runnable task's image comes from."""

    kind: Literal["registry", "docker_image", "dockerfile"]
    ref: str | None = None  # the image reference for registry / docker_image
    pullable: bool = True  # False for refs that may exist only where the task was generated


def strip_canary(text: str) -> str:
    """Drop leading canary comment lines and the blank lines after them, as Harbor does."""
    lines = text.split("\n")
    index = 0
    while index < len(lines) and _CANARY_LINE.match(lines[index].strip()):
        index += 1
    while index < len(lines) and not lines[index].strip():
        index += 1
    return "\n".join(lines[index:])


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


class Task:
    """One task directory; everything is read on first use."""

    def __init__(self, root: Path, task_id: str) -> None:
        self.id = task_id
        self.path = root / task_id

    def __repr__(self) -> str:
        return f"Task({self.id!r})"

    @cached_property
    def _parsed(self) -> tuple[TaskConfig | None, str | None]:
        source = f"{self.id}/{TASK_FILE}"
        try:
            text = (self.path / TASK_FILE).read_text(encoding="utf-8")
            return parse_task_config(text, source), None
        except (OSError, UnicodeDecodeError) as exc:
            return None, f"{source}: cannot be read: {exc}"
        except DatasetError as exc:
            return None, str(exc)

    @property
    def config(self) -> TaskConfig:
        config, error = self._parsed
        if config is None:
            raise DatasetError(error)
        return config

    @property
    def instruction(self) -> str:
        path = self.path / "instruction.md"
        try:
            return strip_canary(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{self.id}/instruction.md: cannot be read: {exc}") from None

    def step_path(self, step: StepConfig) -> Path:
        """The folder of a ``[[steps]]`` entry: ``steps/<name>``."""
        return self.path / "steps" / step.name

    def step_instruction(self, step: StepConfig) -> str:
        path = self.step_path(step) / "instruction.md"
        try:
            return strip_canary(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            where = f"{self.id}/steps/{step.name}/instruction.md"
            raise DatasetError(f"{where}: cannot be read: {exc}") from None

    @property
    def compose_file(self) -> Path | None:
        """``environment/docker-compose.yaml`` (the only name Harbor reads), if present."""
        path = self.path / "environment" / "docker-compose.yaml"
        return path if path.is_file() else None

    def verifier_image_dir(self, step: StepConfig | None = None) -> Path | None:
        """The folder a separate verifier's image is built from, Harbor's way, if any.

        ``steps/<name>/tests/`` then ``tests/``; a ``[verifier.environment].docker_image`` at that
        level wins over its folder's Dockerfile. None means the image is given by docker_image
        (see :meth:`verifier_image_ref`) or is the agent's own.
        """
        return self._verifier_image(step)[0]

    def verifier_image_ref(self, step: StepConfig | None = None) -> str | None:
        """The ``docker_image`` a separate verifier runs in, if task.toml names one."""
        return self._verifier_image(step)[1]

    def _verifier_image(self, step: StepConfig | None) -> tuple[Path | None, str | None]:
        config = self.config
        candidates = []
        if step is not None:
            candidates.append((step.verifier.environment, self.step_path(step) / "tests"))
        candidates.append((config.verifier.environment, self.path / "tests"))
        for environment, folder in candidates:
            if environment is not None and environment.docker_image:
                return None, environment.docker_image
            if (folder / "Dockerfile").is_file():
                return folder, None
        return None, None

    @cached_property
    def image(self) -> ImageSource | None:
        """The image source, or None when the task has neither image nor Dockerfile."""
        config, _ = self._parsed
        if config is None:
            return None
        repro = config.repo2env.get("reproducibility")
        if isinstance(repro, dict) and repro.get("mode") == "registry" and repro.get("image_ref"):
            return ImageSource(kind="registry", ref=str(repro["image_ref"]))
        if config.environment.docker_image:
            ref = config.environment.docker_image
            return ImageSource(kind="docker_image", ref=ref, pullable=_pullable(config, ref))
        if (self.path / "environment" / "Dockerfile").is_file():
            return ImageSource(kind="dockerfile")
        return None

    @property
    def problems(self) -> list[str]:
        """Why the task cannot run here (empty for runnable and text-only tasks)."""
        return self._classification[1]

    @property
    def kind(self) -> TaskKind:
        return self._classification[0]

    @cached_property
    def _classification(self) -> tuple[TaskKind, list[str]]:
        config, error = self._parsed
        if config is None:
            return TaskKind.INVALID, [error or f"{self.id}/{TASK_FILE}: unreadable"]
        invalid = []
        if not (self.path / "instruction.md").is_file() and not config.steps:
            invalid.append(f"{self.id}/instruction.md: missing")
        has_tests = (self.path / "tests").is_dir()
        if self.image is None and not has_tests:
            return (TaskKind.INVALID, invalid) if invalid else (TaskKind.TEXT_ONLY, [])
        if self.image is None:
            invalid.append(
                f"{self.id}: no environment/Dockerfile and no [environment].docker_image"
                " (tests/ exists, so the task needs an environment to run in)"
            )
        if config.steps:
            invalid += _step_problems(self, config)
        elif not self._bundled_tests(None) and not (self.path / "tests" / "test.sh").is_file():
            invalid.append(f"{self.id}/tests/test.sh: missing (the verifier Harbor runs)")
        if invalid:
            return TaskKind.INVALID, invalid
        unsupported = _unsupported(self.path, self.id, config)
        if unsupported:
            return TaskKind.UNSUPPORTED, unsupported
        return TaskKind.RUNNABLE, []

    def _bundled_tests(self, step: StepConfig | None) -> bool:
        """Whether a separate verifier image carries its own /tests (nothing is uploaded)."""
        if verifier_mode(self.config, step) != "separate":
            return False
        folder, ref = self._verifier_image(step)
        return folder is not None or ref is not None


def _step_problems(task: Task, config: TaskConfig) -> list[str]:
    problems = []
    for step in config.steps or []:
        where = f"{task.id}/steps/{step.name}"
        if not (task.step_path(step) / "instruction.md").is_file():
            problems.append(f"{where}/instruction.md: missing ([[steps]] name = {step.name!r})")
        tests = (task.step_path(step) / "tests" / "test.sh").is_file() or (
            task.path / "tests" / "test.sh"
        ).is_file()
        if not tests and not task._bundled_tests(step):
            problems.append(f"{where}/tests/test.sh: missing, and no shared tests/test.sh")
    return problems


def _pullable(config: TaskConfig, ref: str) -> bool:
    repro = config.repo2env.get("reproducibility")
    mode = repro.get("mode") if isinstance(repro, dict) else None
    return not (mode in ("local_only", "inline_dockerfile") and repro.get("image_ref") == ref)


def _unsupported(path: Path, task_id: str, config: TaskConfig) -> list[str]:
    """Features of the Harbor format this runtime refuses up front rather than half-running."""
    where = f"{task_id}/task.toml"
    found = []
    tables = [("[environment]", config.environment)]
    verifiers = [("[verifier]", config.verifier, None)]
    for index, step in enumerate(config.steps or []):
        verifiers.append((f"[[steps]][{index}].verifier", step.verifier, step))
    for name, verifier, step in verifiers:
        if verifier.environment is not None:
            tables.append((f"{name}.environment", verifier.environment))
        if verifier.collect:
            found.append(f"{where}: {name}.collect hooks are not supported")
        if verifier_mode(config, step) == "separate" and (
            (path / "tests" / "docker-compose.yaml").is_file()
            or (step and (path / "steps" / step.name / "tests" / "docker-compose.yaml").is_file())
        ):
            found.append(f"{task_id}: compose verifier environments (tests/docker-compose.yaml)")
    for name, env in tables:
        if env.os != "linux":
            found.append(f"{where}: {name}.os = {env.os!r}: only linux tasks run")
        if env.gpus:
            found.append(f"{where}: {name}.gpus = {env.gpus}: GPUs are not offered here")
        if env.tpu:
            found.append(f"{where}: {name}.tpu: TPUs are not offered here")
        if env.network_mode == "allowlist":
            found.append(
                f"{where}: {name}.network_mode = 'allowlist' is not supported"
                " (use 'public' or 'no-network')"
            )
    baseline = config.environment.network_mode
    phases = [("[agent]", config.agent.network_mode, None)]
    phases.append(("[verifier]", config.verifier.network_mode, None))
    for index, step in enumerate(config.steps or []):
        phases.append((f"[[steps]][{index}].agent", step.agent.network_mode, None))
        phases.append((f"[[steps]][{index}].verifier", step.verifier.network_mode, step))
    for name, mode, step in phases:
        separate = name.endswith("verifier") and verifier_mode(config, step) == "separate"
        if mode is not None and mode != baseline and not (separate and mode != "allowlist"):
            found.append(
                f"{where}: {name}.network_mode = {mode!r} differs from [environment].network_mode"
                f" = {baseline!r}: switching the network between phases is not supported"
            )
    for entry in [*config.artifacts, *_step_artifacts(config)]:
        if isinstance(entry, ArtifactConfig) and entry.service not in (None, "main"):
            found.append(
                f"{where}: artifacts entry {entry.source!r} with service = {entry.service!r}:"
                " artifacts are collected from the main service only"
            )
    return found


def _step_artifacts(config: TaskConfig) -> list[str | ArtifactConfig]:
    return [entry for step in config.steps or [] for entry in step.artifacts]


def find_tasks_root(path: Path) -> Path:
    """The folder holding a dataset's tasks: ``path/tasks`` when that holds tasks, else ``path``."""
    path = Path(path)
    if not path.is_dir():
        raise DatasetError(f"{path}: not a folder")
    for candidate in (path / "tasks", path):
        if candidate.is_dir() and next(_discover(candidate), None) is not None:
            return candidate
    raise DatasetError(f"{path}: no task directory (a folder with {TASK_FILE}) found under it")


def _discover(root: Path, prefix: str = ""):
    """Yield task ids below root, depth first, without reading any file."""
    try:
        entries = sorted(os.scandir(root / prefix if prefix else root), key=lambda e: e.name)
    except OSError:
        return
    if any(entry.name == TASK_FILE and entry.is_file() for entry in entries):
        if prefix:
            yield prefix
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and not entry.name.startswith((".", "__")):
            yield from _discover(root, f"{prefix}/{entry.name}" if prefix else entry.name)


class Dataset:
    """The tasks under one root, listed lazily and parsed one by one on demand."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise DatasetError(f"{self.root}: tasks folder does not exist")
        self._tasks: dict[str, Task] = {}

    @cached_property
    def ids(self) -> list[str]:
        if (self.root / TASK_FILE).is_file():
            raise DatasetError(f"{self.root}: is a single task, not a folder of tasks")
        return sorted(_discover(self.root))

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self):
        return (self[task_id] for task_id in self.ids)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._index

    @cached_property
    def _index(self) -> frozenset[str]:
        return frozenset(self.ids)

    def __getitem__(self, task_id: str) -> Task:
        if task_id not in self._index:
            raise DatasetError(f"unknown task id {task_id!r} (the dataset has {len(self)} tasks)")
        task = self._tasks.get(task_id)
        if task is None:
            task = self._tasks[task_id] = Task(self.root, task_id)
        return task
