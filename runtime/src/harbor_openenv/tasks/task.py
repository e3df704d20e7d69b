"""One Harbor task directory: its paths, its image, its kind and why it cannot run.

A task parses its ``task.toml`` on first use; every path into the task (``tests/``,
``solution/``, ``steps/<name>/...``) is built here, by the methods of :class:`Task`.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from harbor_openenv.tasks.config import (
    TASK_FILE,
    ArtifactConfig,
    DatasetError,
    EnvironmentConfig,
    NetworkMode,
    StepConfig,
    TaskConfig,
    VerifierConfig,
    parse_task_config,
    verifier_mode,
)

_CANARY_LINE = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


class TaskKind(StrEnum):
    RUNNABLE = "runnable"
    TEXT_ONLY = "text-only"
    INVALID = "invalid"
    UNSUPPORTED = "unsupported"


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


class Task:
    """One task directory; everything is read on first use."""

    def __init__(self, root: Path, task_id: str) -> None:
        self.id = task_id
        self.path = root / task_id

    def __repr__(self) -> str:
        return f"Task({self.id!r})"

    # -- paths -----------------------------------------------------------------------------------

    def where(self, path: Path) -> str:
        """``path`` as messages name it: ``<task id>/<path inside the task>``."""
        return f"{self.id}/{path.relative_to(self.path).as_posix()}"

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def compose_file(self) -> Path | None:
        """``environment/docker-compose.yaml`` (the only name Harbor reads), if present."""
        path = self.environment_dir / "docker-compose.yaml"
        return path if path.is_file() else None

    def step_path(self, name: str) -> Path:
        """The folder of the ``[[steps]]`` entry named ``name``: ``steps/<name>``."""
        return self.path / "steps" / name

    def _folder(self, step: StepConfig | None) -> Path:
        return self.path if step is None else self.step_path(step.name)

    def instruction_file(self, step: StepConfig | None = None) -> Path:
        """``instruction.md``, or ``steps/<name>/instruction.md`` for a step."""
        return self._folder(step) / "instruction.md"

    def tests_dir(self, step: StepConfig | None = None) -> Path:
        """``tests/``, or ``steps/<name>/tests/`` for a step."""
        return self._folder(step) / "tests"

    def solution_dir(self, step: StepConfig | None = None) -> Path:
        """``solution/``, or ``steps/<name>/solution/`` for a step."""
        return self._folder(step) / "solution"

    def oracle_dir(self, step: StepConfig | None = None) -> Path:
        """The solution the oracle runs: the step's own ``solution/`` if any, else the task's."""
        if step is not None and self.solution_dir(step).is_dir():
            return self.solution_dir(step)
        return self.solution_dir()

    def step_workdir(self, step: StepConfig) -> Path:
        """``steps/<name>/workdir/``: files uploaded into the workdir before the step."""
        return self.step_path(step.name) / "workdir"

    # -- contents --------------------------------------------------------------------------------

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
        return self._read_instruction(None)

    def step_instruction(self, step: StepConfig) -> str:
        return self._read_instruction(step)

    def _read_instruction(self, step: StepConfig | None) -> str:
        path = self.instruction_file(step)
        try:
            return strip_canary(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{self.where(path)}: cannot be read: {exc}") from None

    # -- images ----------------------------------------------------------------------------------

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
        if (self.environment_dir / "Dockerfile").is_file():
            return ImageSource(kind="dockerfile")
        return None

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
            candidates.append((step.verifier.environment, self.tests_dir(step)))
        candidates.append((config.verifier.environment, self.tests_dir()))
        for environment, folder in candidates:
            if environment is not None and environment.docker_image:
                return None, environment.docker_image
            if (folder / "Dockerfile").is_file():
                return folder, None
        return None, None

    def _bundled_tests(self, step: StepConfig | None) -> bool:
        """Whether a separate verifier image carries its own /tests (nothing is uploaded)."""
        if verifier_mode(self.config, step) != "separate":
            return False
        folder, ref = self._verifier_image(step)
        return folder is not None or ref is not None

    # -- classification --------------------------------------------------------------------------

    @property
    def kind(self) -> TaskKind:
        return self._classification[0]

    @property
    def problems(self) -> list[str]:
        """Why the task cannot run here (empty for runnable and text-only tasks)."""
        return self._classification[1]

    @property
    def refusal(self) -> str | None:
        """Why reset refuses the task, naming it (None for a runnable task)."""
        if self.kind is TaskKind.RUNNABLE:
            return None
        if self.kind is TaskKind.TEXT_ONLY:
            return (
                f"{self.id} is a text-only task (no environment/ and no tests/): there is no"
                " container to run; score it client-side against solution/patch.diff"
            )
        return f"{self.id} cannot run ({self.kind}): " + "; ".join(self.problems)

    @cached_property
    def _classification(self) -> tuple[TaskKind, list[str]]:
        config, error = self._parsed
        if config is None:
            return TaskKind.INVALID, [error or f"{self.id}/{TASK_FILE}: unreadable"]
        invalid = []
        if not self.instruction_file().is_file() and not config.steps:
            invalid.append(f"{self.id}/instruction.md: missing")
        has_tests = self.tests_dir().is_dir()
        if self.image is None and not has_tests:
            return (TaskKind.INVALID, invalid) if invalid else (TaskKind.TEXT_ONLY, [])
        if self.image is None:
            invalid.append(
                f"{self.id}: no environment/Dockerfile and no [environment].docker_image"
                " (tests/ exists, so the task needs an environment to run in)"
            )
        if config.steps:
            invalid += self._step_problems(config)
        elif not self._bundled_tests(None) and not (self.tests_dir() / "test.sh").is_file():
            invalid.append(f"{self.id}/tests/test.sh: missing (the verifier Harbor runs)")
        if invalid:
            return TaskKind.INVALID, invalid
        unsupported = _unsupported(self, config)
        if unsupported:
            return TaskKind.UNSUPPORTED, unsupported
        return TaskKind.RUNNABLE, []

    def _step_problems(self, config: TaskConfig) -> list[str]:
        problems = []
        shared_tests = (self.tests_dir() / "test.sh").is_file()
        for step in config.steps or []:
            where = self.where(self.step_path(step.name))
            if not self.instruction_file(step).is_file():
                problems.append(f"{where}/instruction.md: missing ([[steps]] name = {step.name!r})")
            tests = (self.tests_dir(step) / "test.sh").is_file() or shared_tests
            if not tests and not self._bundled_tests(step):
                problems.append(f"{where}/tests/test.sh: missing, and no shared tests/test.sh")
        return problems


def _unsupported(task: Task, config: TaskConfig) -> list[str]:
    """Features of the Harbor format this runtime refuses up front rather than half-running."""
    where = f"{task.id}/{TASK_FILE}"
    found: list[str] = []
    tables: list[tuple[str, EnvironmentConfig]] = [("[environment]", config.environment)]
    verifiers: list[tuple[str, VerifierConfig, StepConfig | None]] = [
        ("[verifier]", config.verifier, None)
    ]
    for index, entry in enumerate(config.steps or []):
        verifiers.append((f"[[steps]][{index}].verifier", entry.verifier, entry))
    for name, verifier, step in verifiers:
        if verifier.environment is not None:
            tables.append((f"{name}.environment", verifier.environment))
        if verifier.collect:
            found.append(f"{where}: {name}.collect hooks are not supported")
        if verifier_mode(config, step) == "separate" and (
            (task.tests_dir() / "docker-compose.yaml").is_file()
            or (step is not None and (task.tests_dir(step) / "docker-compose.yaml").is_file())
        ):
            found.append(f"{task.id}: compose verifier environments (tests/docker-compose.yaml)")
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
    phases: list[tuple[str, NetworkMode | None, StepConfig | None]] = [
        ("[agent]", config.agent.network_mode, None)
    ]
    phases.append(("[verifier]", config.verifier.network_mode, None))
    for index, entry in enumerate(config.steps or []):
        phases.append((f"[[steps]][{index}].agent", entry.agent.network_mode, None))
        phases.append((f"[[steps]][{index}].verifier", entry.verifier.network_mode, entry))
    for name, mode, step in phases:
        separate = name.endswith("verifier") and verifier_mode(config, step) == "separate"
        if mode is not None and mode != baseline and not (separate and mode != "allowlist"):
            found.append(
                f"{where}: {name}.network_mode = {mode!r} differs from"
                f" [environment].network_mode = {baseline!r}: switching the network between"
                " phases is not supported"
            )
    step_artifacts = [item for entry in config.steps or [] for item in entry.artifacts]
    for item in [*config.artifacts, *step_artifacts]:
        if isinstance(item, ArtifactConfig) and item.service not in (None, "main"):
            found.append(
                f"{where}: artifacts entry {item.source!r} with service = {item.service!r}:"
                " artifacts are collected from the main service only"
            )
    return found


def _pullable(config: TaskConfig, ref: str) -> bool:
    repro = config.repo2env.get("reproducibility")
    if not isinstance(repro, dict):
        return True
    local = repro.get("mode") in ("local_only", "inline_dockerfile")
    return not (local and repro.get("image_ref") == ref)
