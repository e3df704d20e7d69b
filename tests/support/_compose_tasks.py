"""Compose tasks in the shape public Harbor tasks have, for the compose tests of two layers."""

from __future__ import annotations

from pathlib import Path

ANSWER_TEST = (
    "#!/bin/bash\n"
    'if [ "$(cat /app/answer.txt 2>/dev/null)" = done ]; then echo 1; else echo 0; fi'
    " > /logs/verifier/reward.txt\n"
)
APP_DOCKERFILE = "FROM python:3.12-slim\nWORKDIR /app\n"


def public_compose_task(
    root: Path, name: str, compose: str, *, dockerfile: str = APP_DOCKERFILE, toml: str = ""
) -> Path:
    """A compose task in the shape public ones have: environment/Dockerfile and
    docker-compose.yaml, a verifier scoring /app/answer.txt, an oracle writing it."""
    from _task_helpers import make_task, write

    task = make_task(root, name, '[environment]\nworkdir = "/app"\n' + toml, dockerfile=False)
    write(task / "environment" / "Dockerfile", dockerfile)
    write(task / "environment" / "docker-compose.yaml", compose)
    write(task / "tests" / "test.sh", ANSWER_TEST)
    write(task / "solution" / "solve.sh", "#!/bin/bash\necho done > /app/answer.txt\n")
    return task


# Harbor-converted tasks limit main with Harbor's own variables.
LIMITS_COMPOSE = """\
services:
  main:
    image: ${MAIN_IMAGE_NAME}
    environment:
      - SEEN=${CPUS}/${MEMORY}/${CONTEXT_DIR}
    deploy:
      resources:
        limits:
          cpus: ${CPUS}
          memory: ${MEMORY}
"""
# main built from the task folder, not environment/ (the Dockerfile copies app/ from beside it).
BUILD_COMPOSE = """\
services:
  main:
    build:
      context: ${CONTEXT_DIR}/..
      dockerfile: environment/Dockerfile
      args:
        GREETING: from-compose
    image: ${MAIN_IMAGE_NAME}
    pull_policy: build
"""
BUILD_DOCKERFILE = (
    "FROM python:3.12-slim\nARG GREETING=from-default\nWORKDIR /app\nCOPY app/ /app/\n"
    "RUN echo $GREETING > /app/greeting.txt\n"
)
