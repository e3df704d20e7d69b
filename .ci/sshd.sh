#!/usr/bin/env bash
# Install what the SSH transport's tests need (tests/deploy/test_remote.py): Debian's
# openssh-server (each test runs its own sshd on 127.0.0.1, with a config, host key and client key
# of its own, never the system service) and the ssh client tools. Safe to run again.
set -euo pipefail

if [ ! -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null; then
  bash "$(dirname "$0")/debian-package.sh" openssh-server
fi
version=$(/usr/sbin/sshd -V 2>&1 || true)
echo "${version%%$'\n'*}"
