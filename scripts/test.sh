#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs the whole test suite with ctest.
#   scripts/test.sh           everything
#   scripts/test.sh quick     only the tests labelled "quick" (a minute or so)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
if [ "${1:-all}" = "quick" ]; then
  ctest --output-on-failure -L quick --timeout 600
else
  ctest --output-on-failure --timeout 900
fi
