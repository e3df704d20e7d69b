"""What Harbor 0.25 would refuse: the rules its task model enforces when it loads a task.

This runtime parses ``task.toml`` leniently (it can serve a task Harbor would not load), so
``validate`` reports each rule Harbor's ``TaskConfig`` and ``Task.is_valid_dir`` enforce as a
Harbor-compatibility warning naming the field: ``harbor run`` skips such a task, or fails it.
Harbor's models are mirrored in :mod:`.harbor_model`; nothing here changes how a task runs.
Also reported: a task nested below the dataset's top folder (``harbor run -p`` loads immediate
subfolders only), no ``environment/`` and no image, inputs linking outside the task. Not mirrored:
the credential rules of MCP servers' HTTP headers, and ``.harborignore`` hiding a test script.
"""

from __future__ import annotations

import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

from harbor_openenv.tasks.config import TASK_FILE
from harbor_openenv.tasks.harbor_model import HarborTaskConfig
from harbor_openenv.tasks.task import Task


def config_warnings(data: dict[str, Any]) -> list[tuple[str, str]]:
    """What Harbor's ``TaskConfig`` refuses in parsed task.toml ``data``: (field, why) pairs."""
    try:
        HarborTaskConfig.model_validate(data)
    except ValidationError as exc:
        return _describe(exc)
    return []


def _config(data: dict[str, Any]) -> HarborTaskConfig | None:
    try:
        return HarborTaskConfig.model_validate(data)
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
    current: Any = HarborTaskConfig
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
    annotation = HarborTaskConfig.model_fields[name].annotation
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
