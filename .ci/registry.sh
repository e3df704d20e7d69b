#!/usr/bin/env bash
# Install what tests/test_registry.py needs beyond .venv: Debian's docker-registry (the reference
# registry, /usr/bin/docker-registry), which the tests serve themselves on 127.0.0.1 with their own
# config. Only the binary is wanted: the package's own service is not started. Safe to run again.
set -euo pipefail

if [ -x /usr/bin/docker-registry ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "/usr/bin/docker-registry is missing: install Debian's docker-registry package (as root)" >&2
  exit 1
fi
echo "installing docker-registry"
apt-get update -qq
# policy-rc.d-less machines would start the packaged service on :5000; keep it off.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-registry >/dev/null
