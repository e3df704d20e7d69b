#!/bin/sh
# Prepares a task environment, as root in its working directory: makes the /logs folders
# (/logs/verifier is the verifier's alone: the keeper hands it over at each run), then prints the
# working directory as given, its real path, and "empty" when /logs/artifacts holds nothing.
mkdir -p /logs/agent /logs/verifier /logs/artifacts &&
  chmod 777 /logs/agent /logs/artifacts && chmod 755 /logs/verifier &&
  pwd && readlink -f . && { [ -n "$(ls -A /logs/artifacts)" ] || echo empty; }
