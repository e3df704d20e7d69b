"""``harbor-openenv``: validate a dataset, check its tasks in Docker, make their images, serve it,
or keep an environment repo up to date: the parser and the entry point. Each command is a module
of its own (validate, check, images, serve, sync, update, fill).

``validate`` needs only the core package; ``check``, ``images`` and ``serve`` import the server
extra (OpenEnv, Docker, uvicorn) when they run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harbor_openenv._version import __version__
from harbor_openenv.cli.check import cmd_check
from harbor_openenv.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, UsageError
from harbor_openenv.cli.fill import cmd_harnesses_fill, cmd_wheels
from harbor_openenv.cli.images import cmd_images
from harbor_openenv.cli.serve import cmd_serve
from harbor_openenv.cli.sync import cmd_sync_tasks
from harbor_openenv.cli.update import cmd_update
from harbor_openenv.cli.validate import cmd_validate

_DATASET_HELP = "a dataset folder: tasks at its root or under its tasks/ folder"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harbor-openenv",
        description="Validate, check and serve Harbor task datasets as an OpenEnv environment.",
    )
    parser.add_argument("--version", action="version", version=f"harbor-openenv {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser(
        "validate",
        help="parse every task and report its kind, image and timeouts",
        description="Parse every task.toml and report each task's kind, image source, timeouts"
        " and problems. Exits 1 when a task is invalid; unsupported and text-only tasks are"
        " reported but do not fail. Needs no Docker.",
    )
    validate.add_argument("dataset", type=Path, metavar="DATASET", help=_DATASET_HELP)
    validate.add_argument("--json", action="store_true", help="print a JSON report instead")
    validate.set_defaults(run=cmd_validate)

    check = commands.add_parser(
        "check",
        help="run a no-op and an oracle episode of every runnable task in Docker",
        description="For every runnable task, run a no-op episode (reset, evaluate) and an oracle"
        " episode (reset, solve, evaluate) in containers; a multi-step task is evaluated step"
        " after step (the oracle solving each) until the episode ends. Exits 1 when an oracle"
        " does not score 1.0, a no-op scores 1.0, a verifier writes no reward, or a task is"
        " invalid; text-only and unsupported tasks are skipped unless named with --task.",
    )
    check.add_argument("dataset", type=Path, metavar="DATASET", help=_DATASET_HELP)
    check.add_argument("--jobs", "-j", type=int, default=2, help="episodes at once (default 2)")
    check.add_argument(
        "--json", metavar="FILE", help="also write the results as JSON to FILE ('-': stdout)"
    )
    check.add_argument(
        "--task", action="append", metavar="ID", help="check only this task (repeatable)"
    )
    check.set_defaults(run=cmd_check)

    images = commands.add_parser(
        "images",
        help="build or pull every task image ahead of serving; push them to a registry",
        usage="harbor-openenv images [-h] [build|push] [DATASET] [--jobs N] [--registry R]",
        description="build (the default): build (environment/Dockerfile) or pull (docker_image)"
        " the image of every runnable task, and any separate verifier's image, JOBS at once, so"
        " no reset waits for one. Prints a line per image as it is ready and a table at the end;"
        " exits 1 when an image fails or a task is invalid. push: the same, then tag each task's"
        " image under --registry HOST/PREFIX (as HOST/PREFIX/task:<image id>), push it, and write"
        " images.lock beside the tasks folder (only when every image pushed): a server with that"
        " lock pulls those images by digest and never builds them.",
    )
    images.add_argument(
        "words",
        nargs="*",
        metavar="[build|push] [DATASET]",
        help=_DATASET_HELP + " (default: $HARBOR_OPENENV_TASKS or the current folder);"
        " a dataset folder named build or push is written ./build",
    )
    images.add_argument("--jobs", "-j", type=int, default=2, help="images at once (default 2)")
    images.add_argument(
        "--registry",
        metavar="HOST/PREFIX",
        help="push: the registry and path to push under, e.g. 127.0.0.1:5000/envs/my-env",
    )
    images.set_defaults(run=cmd_images)

    serve = commands.add_parser(
        "serve",
        help="run the environment server on a local dataset (no image build)",
        description="Serve TASKS (default: $HARBOR_OPENENV_TASKS or the current folder) with"
        " uvicorn. HARBOR_OPENENV_* variables apply as in the image.",
    )
    serve.add_argument("tasks", type=Path, nargs="?", metavar="TASKS", help=_DATASET_HELP)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="read the orchestration token enabling evaluate/solve from FILE's first line"
        " (or set HARBOR_OPENENV_ORCHESTRATION_TOKEN); --token TOKEN is refused, since a command"
        " line is visible to every user of the host (ps)",
    )
    serve.add_argument("--token", help=argparse.SUPPRESS)  # refused with the reason
    serve.set_defaults(run=cmd_serve)

    sync = commands.add_parser(
        "sync-tasks",
        help="re-sync an environment repo's tasks/ from a dataset",
        description="Make tasks/ of an environment repo a byte-for-byte copy of DATASET and"
        " rewrite tasks.sha256 and the README's dataset summary; reports added, changed and"
        " removed tasks. Refuses when tasks/ has local changes (files differing from"
        " tasks.sha256) unless --force, and refuses datasets with invalid tasks unless"
        " --allow-invalid.",
    )
    sync.add_argument(
        "dataset",
        nargs="?",
        metavar="DATASET",
        help="a dataset folder (tasks at its root or under tasks/), a Harbor registry reference"
        " name@version (with --registry), or hf://owner/name[@revision]; default: re-resolve"
        " the reference recorded in tasks.source.json",
    )
    sync.add_argument(
        "--registry",
        default="",
        help="registry file or URL for name@version (default: the recorded one)",
    )
    sync.add_argument(
        "--repo", type=Path, default=Path("."), help="the environment repo (default: here)"
    )
    sync.add_argument(
        "--allow-local-repos",
        action="store_true",
        help="a registry's tasks may come from git repositories on this machine (a path or"
        " file:// as git_url); refused by default: a registry could name any repository here",
    )
    sync.add_argument("--force", action="store_true", help="discard local changes to tasks/")
    sync.add_argument("--dry-run", action="store_true", help="report, write nothing")
    sync.add_argument(
        "--allow-invalid",
        action="store_true",
        help="keep invalid tasks (copied as they are, refused at reset with their reasons)",
    )
    sync.set_defaults(run=cmd_sync_tasks)

    update = commands.add_parser(
        "update",
        help="copier update an environment repo, failing on conflicts copier leaves",
        description="Run `copier update --trust --defaults --conflict inline` in REPO, then fail"
        " (exit 1) when unmerged files, conflict markers or .rej files remain, which copier"
        " itself exits 0 on. Change an answer with -d KEY=VALUE (e.g. -d runtime_pin=...).",
    )
    update.add_argument("repo", type=Path, nargs="?", default=Path("."), metavar="REPO")
    update.add_argument("--vcs-ref", help="template version to update to (default: newest tag)")
    update.add_argument("-d", "--data", action="append", metavar="KEY=VALUE")
    update.set_defaults(run=cmd_update)

    wheels = commands.add_parser(
        "wheels",
        help="fill an environment repo's wheels/ for an offline image build",
        description="Put every wheel the image installs (pyproject.toml's dependencies and"
        " runtime group) into wheels/, for the base image's Python (asked from the image with"
        " Docker, else read from its tag), so `docker build --network none` works. Builds with"
        " `pip wheel` and a Python of that version found here; --platform downloads published"
        " wheels only (pip download --only-binary=:all:) instead.",
    )
    wheels.add_argument(
        "--repo", type=Path, default=Path("."), help="the environment repo (default: here)"
    )
    wheels.add_argument("--python", metavar="X.Y", help="the image's Python version")
    wheels.add_argument(
        "--platform",
        action="append",
        metavar="TAG",
        help="download wheels for this platform tag (repeatable), e.g. manylinux_2_28_x86_64",
    )
    wheels.set_defaults(run=cmd_wheels)

    harnesses = commands.add_parser(
        "harnesses",
        help="fill the harness cache the inside harnesses run from",
        description="The harness cache (HARBOR_OPENENV_HARNESS_CACHE): each inside harness's"
        " pinned build, fetched here with npm pack and put read-only into every task container"
        " by the server.",
    )
    harness_commands = harnesses.add_subparsers(dest="action", required=True, metavar="ACTION")
    fill = harness_commands.add_parser(
        "fill",
        help="fetch harnesses into FOLDER",
        description="Fetch each NAMEd harness (default: all) into FOLDER/NAME with npm pack, at"
        " the version this runtime pins, for this machine's architecture (glibc and musl builds)"
        " or the npm platforms --platform names (aider: pip install on a CPython made portable"
        " from Debian's packages, for this machine); what was there is replaced.",
    )
    fill.add_argument("folder", type=Path, metavar="FOLDER")
    fill.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="a harness, e.g. claude-code, gemini-cli or qwen-code (these two fill node, their"
        " runtime, too), aider (from PyPI), or tmux (terminus-2's, from Debian's packages)",
    )
    fill.add_argument(
        "--platform",
        action="append",
        metavar="PLATFORM",
        help="an npm platform to fill (repeatable), e.g. linux-x64 or linux-arm64-musl",
    )
    fill.set_defaults(run=cmd_harnesses_fill)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns (and, as a script, exits with) the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
        return status
    except UsageError as exc:
        print(f"harbor-openenv {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\nharbor-openenv {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
