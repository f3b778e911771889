#!/usr/bin/env bash
# EpiCache vs prefix caching vs full re-prefill (Engram's, 3 turns measured, projected x 300) and
# the transformers peer of one re-prefill turn, 300 turns over a 90K history, llama3.2-3b shape,
# all in one call on one machine.
set -uo pipefail
export ENGRAM_COMMIT=${ENGRAM_COMMIT:-unknown}
SECONDS=0
(bash bench/run_device_epicache.sh build | tail -1)
echo "built at ${SECONDS}s"
SHAPE=llama3.2-3b METHODS="epicache:170 prefix:120 full:100" bash bench/run_device_epicache.sh turns
echo "turns done at ${SECONDS}s"
SHAPE=llama3.2-3b timeout 150 bash bench/run_device_epicache.sh hf
echo "done at ${SECONDS}s"
rm -f $OUT/build.log $OUT/*.out
