#!/bin/bash
# Histories ~3x engram-tiny's 4,096 trained positions: 5 held-out conversations (seed 1000100..)
cd /work/main
for p in "epicache 1024" "snapkv 1024" "streaming 1024" "full 0"; do
  set -- $p
  extra=""; [ "$2" != "0" ] && extra="--kv-budget $2"
  ./build/app/cli/engram-cli eval conversation --model resources/models/engram-tiny --episodes 5 --seed 1000100 --min-tokens 12000 --max-tokens 13000 --policy $1 $extra --json bench/results/2026-11-25-cpu-epicache-long/$1.json > bench/results/2026-11-25-cpu-epicache-long/$1.txt 2>&1
done
echo done > bench/results/2026-11-25-cpu-epicache-long/DONE
