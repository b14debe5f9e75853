#!/usr/bin/env bash
# Configures and builds tutti into build/ (Release with debug info). Usage: scripts/build.sh [cmake args]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build build -j"$(nproc)"
