#!/bin/sh
# Soak run of the store's kill test: N SIGKILLs of a writer (default 10000) instead of CTest's
# 200, each followed by the full consistency check (tests/test_store_kill.cpp).
#   tests/soak_store_kill.sh [N] [BUILD_DIR]      (BUILD_DIR defaults to build-store)
set -eu
kills=${1:-10000}
build=${2:-"$(dirname "$0")/../build-store"}
binary="$build/tests/test_store_kill"
if [ ! -x "$binary" ]; then
  echo "no $binary; build it with: cmake --build $build --target test_store_kill" >&2
  exit 2
fi
echo "soak: $kills kills with $binary"
# QtTest stops a test function after 5 minutes unless told otherwise; 10,000 kills take about
# 9 minutes on 2 cores.
ENGRAM_STORE_KILLS=$kills QTEST_FUNCTION_TIMEOUT=86400000 QT_QPA_PLATFORM=offscreen exec "$binary" -maxwarnings 0
