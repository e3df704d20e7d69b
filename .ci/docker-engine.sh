#!/usr/bin/env bash
# Make a Docker engine reachable: install Debian's docker.io if needed and start dockerd as root.
#
# The daemon runs with .ci/daemon.json: without its bridge, iptables rules, forwarding or
# masquerading, so no private-range network exists and nothing is routed off the machine:
# containers use network "none", or "host" for a server the tests talk to on 127.0.0.1. The extra
# engines of tests/deploy/test_scale_out.py (tests/_engines.py) run with the same file.
set -euo pipefail

if docker info >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "no Docker engine is reachable; start one (or run this script as root)" >&2
  exit 1
fi
if ! command -v dockerd >/dev/null; then
  echo "installing docker.io"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
mkdir -p /etc/docker
cp "$(dirname "$0")/daemon.json" /etc/docker/daemon.json
log=/var/log/harbor-openenv-dockerd.log
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "dockerd is up"
    exit 0
  fi
  sleep 1
done
echo "dockerd did not come up; the end of $log:" >&2
tail -20 "$log" >&2
exit 1
