"""One error root: every exception class the runtime defines derives from HarborOpenEnvError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import harbor_openenv
from harbor_openenv import HarborOpenEnvError

# the modules the unit layer can import (the rest need tools the engine layers install)
_OPTIONAL = ("docker", "openenv", "fastapi", "uvicorn", "websockets", "harbor")


def _modules():
    for info in pkgutil.walk_packages(harbor_openenv.__path__, "harbor_openenv."):
        if info.name.endswith(".__main__"):
            continue  # it runs the CLI
        try:
            yield importlib.import_module(info.name)
        except ModuleNotFoundError as exc:  # only an optional extra may be missing
            assert (exc.name or "").split(".")[0] in _OPTIONAL, (info.name, exc)


def test_every_runtime_exception_derives_from_the_root():
    defined = {
        cls
        for module in _modules()
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__.startswith("harbor_openenv.")
    }
    assert len(defined) >= 29  # the classes of today; new ones count too
    assert [cls for cls in defined if not issubclass(cls, HarborOpenEnvError)] == []


def test_the_root_keeps_the_bases_callers_catch():
    from harbor_openenv.tasks.catalog import TaskIndexError, UnknownSplitError

    assert issubclass(UnknownSplitError, LookupError) and issubclass(TaskIndexError, IndexError)
