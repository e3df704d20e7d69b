"""``sync-tasks``: make an environment repo's tasks/ a copy of a dataset, local or referenced."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harbor_openenv.cli.common import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE


def cmd_sync_tasks(args: argparse.Namespace) -> int:
    import tempfile

    from harbor_openenv.datasets import sources as refs
    from harbor_openenv.datasets.sync import SyncError, SyncRefused, sync_tasks

    source_file = args.repo / refs.SOURCE_NAME
    with tempfile.TemporaryDirectory(prefix="harbor-openenv-dataset-") as workdir:
        try:
            if args.dataset is None:  # re-resolve the recorded reference
                recorded = refs.read_source(source_file)
                reference = str(recorded["reference"])
                registry = args.registry or str(recorded.get("registry", ""))
            else:
                reference, registry = args.dataset, args.registry
            resolved = refs.resolve(
                reference, registry, Path(workdir), local_repos=args.allow_local_repos
            )
        except refs.RefError as exc:
            print(f"harbor-openenv sync-tasks: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            report = sync_tasks(
                resolved.root,
                args.repo,
                force=args.force,
                dry_run=args.dry_run,
                allow_invalid=args.allow_invalid,
                source_note=refs.source_markdown(resolved.record),
            )
        except SyncRefused as exc:  # the repo, the dataset or local changes: nothing was written
            print(f"harbor-openenv sync-tasks: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except SyncError as exc:
            print(f"harbor-openenv sync-tasks: {exc}", file=sys.stderr)
            return EXIT_PROBLEMS
    if not args.dry_run:
        if resolved.record:
            refs.write_source(source_file, resolved.record)
        elif source_file.is_file():  # a local folder now: the old reference no longer applies
            source_file.unlink()
    for label, ids in (("added", report.added), ("changed", report.changed)):
        for task_id in ids:
            print(f"{label}: {task_id}")
    for task_id in report.removed:
        print(f"removed: {task_id}")
    counts = (
        f"{len(report.added)} added, {len(report.changed)} changed, {len(report.removed)} removed,"
        f" {report.unchanged} unchanged"
    )
    if args.dry_run:
        print(f"{counts} (dry run, nothing written)")
    elif report.written:
        readme = ", README counts updated" if report.readme_updated else ""
        print(f"{counts} (replaced tasks/, tasks.sha256 rewritten{readme})")
    else:
        print(f"{counts}: tasks/ already up to date, nothing written")
    return EXIT_OK
