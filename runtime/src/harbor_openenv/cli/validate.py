"""``validate``: parse every task and report its kind, image, timeouts and problems (no Docker)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harbor_openenv.cli.common import EXIT_OK, EXIT_PROBLEMS, open_dataset, print_table
from harbor_openenv.tasks.config import DatasetError, serve_time_variables
from harbor_openenv.tasks.task import Task, TaskKind


def _task_row(task: Task) -> dict[str, Any]:
    """What validate reports about one task: its kind, image source, timeouts, problems, what
    Harbor 0.25 would refuse in it, and the variables the server needs to run it."""
    from harbor_openenv.tasks.harbor_rules import harbor_warnings
    from harbor_openenv.tasks.lint import shadowing, system_state

    try:
        config = task.config
    except DatasetError:  # reported in problems
        config = None
    return {
        "task": task.id,
        "kind": str(task.kind),
        "image": task.image.model_dump() if task.image else None,
        "agent_timeout_sec": config and config.agent.timeout_sec,
        "verifier_timeout_sec": config and config.verifier.timeout_sec,
        "build_timeout_sec": config and config.environment.build_timeout_sec,
        "problems": task.problems,
        "harbor_warnings": harbor_warnings(task),
        "shadowing": shadowing(task),
        "system_state": system_state(task),
        "needs": serve_time_variables(config) if config else {},
    }


def _harbor_text(warnings: list[dict[str, str]]) -> str:
    """The HARBOR column: ``ok``, or ``refuses:`` and the fields Harbor 0.25 would refuse."""
    if not warnings:
        return "ok"
    fields = dict.fromkeys(warning["field"].replace(" ", "-") for warning in warnings)
    return "refuses:" + ",".join(fields)


def _image_text(image: dict[str, Any] | None) -> str:
    if image is None:
        return "-"
    return image["kind"] if image["ref"] is None else f"{image['kind']}:{image['ref']}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def cmd_validate(args: argparse.Namespace) -> int:
    dataset = open_dataset(args.dataset)
    rows = [_task_row(task) for task in dataset]
    counts = {str(kind): 0 for kind in TaskKind}
    for row in rows:
        counts[row["kind"]] += 1
    ok = counts[TaskKind.INVALID] == 0
    if args.json:
        report = {"root": str(dataset.root), "ok": ok, "counts": counts, "tasks": rows}
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK if ok else EXIT_PROBLEMS
    table = [["TASK", "KIND", "IMAGE", "AGENT_S", "VERIFIER_S", "BUILD_S", "HARBOR", "PROBLEMS"]]
    table += [
        [
            row["task"],
            row["kind"],
            _image_text(row["image"]),
            _seconds(row["agent_timeout_sec"]),
            _seconds(row["verifier_timeout_sec"]),
            _seconds(row["build_timeout_sec"]),
            _harbor_text(row["harbor_warnings"]),
            "; ".join(row["problems"]) or "-",
        ]
        for row in rows
    ]
    print_table(table, sys.stdout)
    for row in rows:
        for warning in row["harbor_warnings"]:
            print(f"Harbor 0.25 would refuse {warning['warning']}")
    for row in rows:
        for found in [*row["shadowing"], *row["system_state"]]:
            print(f"{row['task']}/{found['file']}:{found['line']}: {found['warning']}")
    for row in rows:
        for variable, fields in row["needs"].items():
            print(f"{row['task']}: needs {variable} at serve time ({', '.join(fields)})")
    summary = ", ".join(f"{count} {kind}" for kind, count in counts.items())
    verdict = "ok" if ok else f"{counts[TaskKind.INVALID]} invalid task(s) must be fixed"
    refused = sum(bool(row["harbor_warnings"]) for row in rows)
    extra = f"; Harbor 0.25 would refuse {refused}" if refused else ""
    shadowed = sum(bool(row["shadowing"]) for row in rows)
    extra += f"; {shadowed} run something the agent can shadow" if shadowed else ""
    systemic = sum(bool(row["system_state"]) for row in rows)
    extra += f"; {systemic} read the system (not for a pristine verifier)" if systemic else ""
    print(f"{len(rows)} tasks in {dataset.root}: {summary} ({verdict}{extra})")
    return EXIT_OK if ok else EXIT_PROBLEMS
