#!/usr/bin/env bash
# Install what tests/deploy/test_registry.py needs beyond .venv: Debian's docker-registry (the reference
# registry, /usr/bin/docker-registry), which the tests serve themselves on 127.0.0.1 with their own
# config. Only the binary is wanted: the package's own service is not started. Safe to run again.
set -euo pipefail

if [ ! -x /usr/bin/docker-registry ]; then
  bash "$(dirname "$0")/debian-package.sh" docker-registry
fi
