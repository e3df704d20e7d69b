#!/bin/sh
# Prepares a task environment, as root in its working directory: makes the /logs folders
# (/logs/verifier is the verifier's alone: the helper hands it over at each run), then prints the
# working directory as given, its real path, and the processes running now (the baseline, listed
# by the runtime's helper at $1). PID 1 is the helper's keeper, unless the image's ENTRYPOINT runs
# first: while PID 1 is still a sh with no child (an entrypoint script that has not yet exec'd or
# forked the keeper), the baseline waits, up to 5 s: a keeper forked after the list would be killed
# by the stop before grading, and the container with it.
i=0
while [ "$i" -lt 250 ]; do
  read -r comm </proc/1/comm || comm=
  children=
  read -r children </proc/1/task/1/children 2>/dev/null || :
  if [ "$comm" != sh ] || [ -n "$children" ]; then break; fi
  sleep 0.02 2>/dev/null || sleep 1
  i=$((i + 1))
done
mkdir -p /logs/agent /logs/verifier /logs/artifacts &&
  chmod 777 /logs/agent /logs/artifacts && chmod 755 /logs/verifier &&
  pwd && readlink -f . && "$1" list
