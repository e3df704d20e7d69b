#!/usr/bin/env bash
# Build the stand-in base images the tests use, once; later runs reuse them by name.
#
# No registry image can be pulled on the CI machines, so a Debian bookworm root file system made
# with debootstrap (using debootstrap's own default mirror) is imported as an image and tagged with
# the names the example tasks' and the server's Dockerfiles start FROM, but only where an image of
# that name is missing: on a machine that has the real images, they are used.
set -euo pipefail

STANDIN=harbor-openenv/standin:bookworm
ALIASES=(python:3.12-slim python:3.11-slim debian:bookworm-slim)
PACKAGES=python3,python3-venv,python3-pip,python-is-python3,git,patch,procps,ca-certificates

if ! docker image inspect "$STANDIN" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
  root=$(mktemp -d /tmp/standin-rootfs.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  echo "building $STANDIN with debootstrap (about a minute)"
  debootstrap --variant=minbase --include="$PACKAGES" bookworm "$root" >/tmp/standin-debootstrap.log 2>&1 \
    || { tail -20 /tmp/standin-debootstrap.log; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LANG=C.UTF-8' -c 'CMD ["bash"]' - "$STANDIN" >/dev/null
fi
for name in "${ALIASES[@]}"; do
  docker image inspect "$name" >/dev/null 2>&1 || docker tag "$STANDIN" "$name"
done
echo "stand-in images ready: $STANDIN as ${ALIASES[*]}"
