#!/usr/bin/env bash
# Install what tests/deploy/test_balancer.py needs: Debian's haproxy (the load balancer in front of the
# replicas; the test runs its own instance on 127.0.0.1 and never the system service). Safe to
# run again.
set -euo pipefail

if ! command -v haproxy >/dev/null && [ ! -x /usr/sbin/haproxy ]; then
  bash "$(dirname "$0")/debian-package.sh" haproxy
fi
# The first line only, without a pipe to head: under pipefail, head closing early kills haproxy
# with SIGPIPE and the whole run with 141.
version=$(/usr/sbin/haproxy -v)
echo "${version%%$'\n'*}"
