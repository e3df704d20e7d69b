#!/bin/bash
# Reward 1 when every unittest in /tests/test_wordcount.py passes, else 0 (written on every path).
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /app || exit 0
if python3 /tests/test_wordcount.py -v; then
  echo 1 > /logs/verifier/reward.txt
fi
exit 0
