"""``wheels`` and ``harnesses fill``: fetch what an offline build or an inside harness needs into a
folder, ahead of time."""

from __future__ import annotations

import argparse
import sys

from harbor_openenv.cli.common import EXIT_OK, UsageError


def cmd_wheels(args: argparse.Namespace) -> int:
    from harbor_openenv.images.wheels import WheelsError, fill_wheels

    try:
        fill_wheels(
            args.repo.resolve(),
            args.python,
            args.platform,
            say=lambda line: print(line, file=sys.stderr),
        )
    except WheelsError as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


def cmd_harnesses_fill(args: argparse.Namespace) -> int:
    import platform

    from harbor_openenv.harness.base import HarnessError
    from harbor_openenv.harness.cache import BUILDS, RUNTIMES, fill, host_platforms

    # all: a runtime (node) before the harnesses on it, which then find it filled
    names = args.names or sorted(
        [*BUILDS, *RUNTIMES], key=lambda name: (name in BUILDS and bool(BUILDS[name].runtime), name)
    )
    try:
        platforms = tuple(args.platform or host_platforms(platform.machine()))
        for name in names:
            sizes = fill(args.folder, name, platforms)
            for where, size in sizes.items():
                version = BUILDS[name].version if name in BUILDS else "from Debian"
                print(f"{name} {version} {where}: {size / 1e6:.1f} MB")
    except HarnessError as exc:
        raise UsageError(str(exc)) from None
    print(f"point HARBOR_OPENENV_HARNESS_CACHE at {args.folder.resolve()}")
    return EXIT_OK
