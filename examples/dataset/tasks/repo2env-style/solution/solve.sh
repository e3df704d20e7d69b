#!/bin/bash
cd /workspace && git apply --verbose --reject "$(dirname "$0")/patch.diff"
