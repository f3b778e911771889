#!/usr/bin/env bash
# Runs test suites under valgrind's memcheck and reports the errors whose stack passes through
# Engram's code (libtorch's libcpuinfo reports 4 overlapping memcpys at start-up in every run;
# they are left out). Found libtorch 1.13's CPU baddbmm reading its uninitialised result at
# beta 0 (LouisKV's scores, 2026-11-27). Slow: minutes per suite; the Qt watchdog is lifted.
#   tools/memcheck_tests.sh [BUILD_DIR] [SUITE...]   (default: build, the engine's torch suites)
set -uo pipefail
BUILD=${1:-build}
shift || true
SUITES=("$@")
[ ${#SUITES[@]} -eq 0 ] && SUITES=(test_kv_sources test_louiskv test_keep test_epicache test_memory_policies
  test_ragged_plan test_static_decode test_keep_loading test_oxygen test_episode_kv_store)
OUT=${OUT:-/tmp/engram-memcheck}
mkdir -p "$OUT"
status=0
for suite in "${SUITES[@]}"; do
  log="$OUT/$suite.log"
  QTEST_FUNCTION_TIMEOUT=3600000 QT_QPA_PLATFORM=offscreen valgrind --error-limit=no --num-callers=20 \
    "$BUILD/tests/$suite" > "$log" 2>&1
  rc=$?
  # An error block: from "==pid== <message>" to the blank "==pid== " line; keep those naming engram.
  ours=$(awk '/^==[0-9]+== [A-Z]/ {block=$0; next} /^==[0-9]+== *$/ {if (block ~ /engram/) n++; block=""; next} {block=block"\n"$0} END {print n+0}' "$log")
  echo "$suite: rc $rc, $ours memcheck error(s) in Engram's code ($log)"
  [ "$ours" -gt 0 ] || [ $rc -ne 0 ] && status=1
done
exit $status
