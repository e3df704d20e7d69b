#!/bin/bash
# Reward 1 when /app/hello.txt holds exactly "Hello, world!" (one trailing newline allowed), else 0.
# The reward file is written on every path; the script's exit code does not matter to Harbor.
mkdir -p /logs/verifier
if [ -f /app/hello.txt ] && [ "$(cat /app/hello.txt)" = "Hello, world!" ]; then
  echo "PASS: /app/hello.txt has the expected greeting"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL: /app/hello.txt is missing or has other content"
  echo 0 > /logs/verifier/reward.txt
fi
