#!/usr/bin/env bash
# The CPU figures of bench/results/2026-11-25-cpu-oxygen (engram-tiny, f32): the same settings as
# ../2026-11-24-cpu-oxygen after the frame's action suffix joined the observation's prefill and the
# language suffixes were prefilled in one forward (the CPU keeps the per-layer decode path).
cd "$(dirname "$0")/../../.."
R=bench/results/2026-11-25-cpu-oxygen
export ENGRAM_COMMIT=$(git rev-parse HEAD)
CLI=./build/app/cli/engram-cli
M="--model resources/models/engram-tiny --frames 24"
run() { name=$1; shift; echo "$CLI bench oxygen $M $* --json $R/$name.json" >> $R/commands.txt;
  $CLI bench oxygen $M "$@" --json $R/$name.json > /dev/null 2> $R/$name.txt; }
: > $R/commands.txt
run max --repeat 3
run rate-2hz --action-hz 2
run every-task-every-frame --repeat 3 --note-every 1 --chat-every 1
