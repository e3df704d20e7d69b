"""What ``/metadata`` says: the environment's own name, version and description.

OpenEnv's default ``Environment.get_metadata`` names the Python class and says version 1.0.0. An
environment repo rendered by the template has an ``openenv.yaml`` beside its ``tasks/`` folder
(the environment's name, version and description, the same answers as its ``pyproject.toml``);
those are what ``/metadata`` returns. ``HARBOR_OPENENV_ENV_NAME`` and ``HARBOR_OPENENV_ENV_VERSION``
(``Settings.env_name``, ``env_version``) override them (for ``harbor-openenv serve`` on a folder
without ``openenv.yaml``). OpenEnv's
``EnvironmentMetadata`` allows no extra field, so the runtime's own version goes at the end of the
description ("served by harbor-openenv X").
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harbor_openenv._version import __version__

if TYPE_CHECKING:
    from harbor_openenv._openenv import EnvironmentMetadata

log = logging.getLogger("harbor_openenv")

MANIFEST = "openenv.yaml"


def _read_manifest(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        import yaml  # openenv's own dependency: always there beside the server

        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception as exc:
        log.warning("%s: not read (%s); /metadata uses defaults", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


@functools.lru_cache(maxsize=8)
def environment_about(
    tasks_root: Path, name: str | None = None, version: str | None = None
) -> dict[str, Any]:
    """name, version, description and readme_content for the environment serving tasks_root;
    ``name`` and ``version``, when given, win over its ``openenv.yaml``."""
    home = Path(tasks_root).resolve().parent
    manifest = _read_manifest(home / MANIFEST)
    name = name or manifest.get("name") or home.name
    version = version or manifest.get("version")
    description = str(manifest.get("description") or f"Harbor tasks from {tasks_root}").rstrip()
    readme = home / "README.md"
    return {
        "name": str(name),
        "version": None if version is None else str(version),
        "description": f"{description} (served by harbor-openenv {__version__})",
        "readme_content": readme.read_text(encoding="utf-8") if readme.is_file() else None,
    }


def environment_metadata(
    tasks_root: Path, name: str | None = None, version: str | None = None
) -> EnvironmentMetadata:
    """OpenEnv's ``EnvironmentMetadata`` for the environment serving tasks_root."""
    from harbor_openenv._openenv import EnvironmentMetadata

    return EnvironmentMetadata(**environment_about(tasks_root, name, version))
