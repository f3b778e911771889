#!/usr/bin/env bash
# LouisKV's unit logits with vector loads (four units a warp, eight lanes a unit, 4-element loads):
# the recorded-retrieval GPU checks (the scores against the torch reference among them), then at
# 32K in / 512 out on the llama3.1-8b shape (random weights, bf16) one τ (a retrieval at every
# token) and rate=10 with the new kernel, with the first one (ENGRAM_WARP_SCORES=1) and with the
# torch ops (ENGRAM_TORCH_SCORES=1), and full KV.
#   ENGRAM_COMMIT=<sha> OUT=<dir> bash bench/results/2026-11-28-h100-louiskv-vector-scores/run.sh
set -uo pipefail
DEVICE_TARGETS=engram-gpu-checks source bench/device_session.sh
$B/bench/engram-gpu-checks --only recorded_retrieval --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
echo "gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|louiskv_scores" $R/gpu_checks.log | head -8
run_decode in32k-louiskv-vector 32768 512 "louiskv"
ENGRAM_WARP_SCORES=1 run_decode in32k-louiskv-warp 32768 512 "louiskv"
ENGRAM_TORCH_SCORES=1 run_decode in32k-louiskv-torch 32768 512 "louiskv"
run_decode in32k-louiskv-rate-10-vector 32768 512 "louiskv:rate=10"
ENGRAM_WARP_SCORES=1 run_decode in32k-louiskv-rate-10-warp 32768 512 "louiskv:rate=10"
run_decode in32k-full 32768 512 "full"
pack
