"""``serve``: the environment server on a local dataset, with uvicorn."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from harbor_openenv.cli.common import (
    EXIT_OK,
    SERVER_EXTRA,
    UsageError,
    open_dataset,
    server_settings,
)


def cmd_serve(args: argparse.Namespace) -> int:
    settings = server_settings()
    tasks = args.tasks or settings.tasks or Path(".")
    root = open_dataset(tasks).root
    if args.token is not None:
        raise UsageError(
            "serve refuses --token: a command line is visible to every user of the host (ps,"
            " /proc); give the token in HARBOR_OPENENV_ORCHESTRATION_TOKEN or a file (--token-file)"
        )
    if args.token_file is not None:
        token = _read_token(args.token_file)
        settings = replace(settings, orchestration_token=token)
    try:
        import uvicorn

        from harbor_openenv.images.lock import LockError
        from harbor_openenv.server.app import build_app
    except ImportError as exc:
        raise UsageError(
            f"serve needs the server extra ({exc.name} is missing): {SERVER_EXTRA}"
        ) from None
    try:
        app = build_app(root, settings=settings)
    except LockError as exc:
        raise UsageError(str(exc)) from None
    if app.state.runtime.settings.orchestration_token is None:
        print(
            "note: no HARBOR_OPENENV_ORCHESTRATION_TOKEN (or --token-file): evaluate and solve"
            " are refused",
            file=sys.stderr,
        )
    print(f"serving {root} on http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port)
    return EXIT_OK


def _read_token(path: Path) -> str:
    """The orchestration token in ``path``: its first line, surrounding whitespace removed."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--token-file {path}: cannot read it: {exc}") from None
    token = lines[0].strip() if lines else ""
    if not token:
        raise UsageError(f"--token-file {path}: the file is empty; put the token on its first line")
    return token
