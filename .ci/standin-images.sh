#!/usr/bin/env bash
# Build the stand-in base images the tests use, once; later runs reuse them by name.
#
# No registry image can be pulled on the CI machines, so root file systems made with debootstrap
# are imported as images and tagged with the names the example tasks' and the server's Dockerfiles
# start FROM, but only where an image of that name is missing: on a machine that has the real
# images, they are used. Two distributions, so the harness cache's builds are tried on two C
# libraries and layouts: Debian bookworm (glibc 2.36) and Ubuntu 22.04 (glibc 2.35), each from
# debootstrap's own default mirror for it; and Debian trixie, for its Python 3.13. Debian bookworm's apt carries no Ubuntu archive key:
# where /usr/share/keyrings/ubuntu-archive-keyring.gpg is missing, the Ubuntu image's Release file
# is not signature-checked (its packages still are, against that Release's checksums); it is a
# test stand-in, never shipped.
set -euo pipefail

# name, suite, debootstrap's options, packages, then the names it stands in for
standin() {
  local name=$1 suite=$2 options=$3 packages=$4
  shift 4
  if ! docker image inspect "$name" >/dev/null 2>&1; then
    command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
    local root log=/tmp/standin-debootstrap-$suite.log
    root=$(mktemp -d "/tmp/standin-rootfs-$suite.XXXXXX")
    echo "building $name with debootstrap (about a minute)"
    # shellcheck disable=SC2086 # $options is a word list
    debootstrap --variant=minbase $options --include="$packages" "$suite" "$root" >"$log" 2>&1 \
      || { tail -20 "$log"; rm -rf "$root"; exit 1; }
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | docker import \
      -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      -c 'ENV LANG=C.UTF-8' -c 'CMD ["bash"]' - "$name" >/dev/null
    rm -rf "$root"
  fi
  for alias in "$@"; do
    docker image inspect "$alias" >/dev/null 2>&1 || docker tag "$name" "$alias"
  done
  echo "stand-in image ready: $name as $*"
}

standin harbor-openenv/standin:bookworm bookworm "" \
  python3,python3-venv,python3-pip,python-is-python3,git,patch,procps,ca-certificates \
  python:3.12-slim python:3.11-slim debian:bookworm-slim
# Debian trixie's Python is 3.13: the base of an image that carries Harbor (Python >= 3.12), as
# the rendered repo's terminus-2 answer needs (bookworm's python3 is 3.11)
standin harbor-openenv/standin:trixie trixie "" \
  python3,python3-venv,python3-pip,python-is-python3,procps,ca-certificates \
  python:3.13-slim
ubuntu_keyring=/usr/share/keyrings/ubuntu-archive-keyring.gpg
[ -e "$ubuntu_keyring" ] && ubuntu_check="" || ubuntu_check=--no-check-gpg
standin harbor-openenv/standin:jammy jammy "$ubuntu_check" \
  python3,procps,ca-certificates \
  ubuntu:22.04
