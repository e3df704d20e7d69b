#!/bin/sh
# Kills the processes that carry one exec's marker ($1, NAME=VALUE) in their environment: the
# processes a timed-out exec started, whatever became of their parent.
for d in /proc/[0-9]*; do
  [ "${d#/proc/}" = "$$" ] && continue
  if tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "$1"; then
    kill -KILL "${d#/proc/}" 2>/dev/null
  fi
done
exit 0
