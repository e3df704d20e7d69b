#!/usr/bin/env bash
# Install one Debian package for the tests (as root; otherwise say which package is missing).
# The package's own service, if it has one, is not started: the tests run their own instances.
# Usage: bash .ci/debian-package.sh PACKAGE
set -euo pipefail
package=$1

if [ "$(id -u)" != 0 ]; then
  echo "$package is missing: install Debian's $package package (as root)" >&2
  exit 1
fi
echo "installing $package"
apt-get update -qq
if [ ! -e /usr/sbin/policy-rc.d ]; then # without it, a package's service starts on install
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null
