#!/usr/bin/env bash
# One device call of engram-tiny training: several runs side by side on the one GPU, then their
# mean (tools/average_models.py). The 12M model leaves an H100 mostly idle: one run trains at
# ~300k tokens/s, two side by side at ~300k each, three at ~215k each (2.15x in all), so a call
# buys two or three runs for the price of one. Output under $OUT (the device's return folder):
# console.txt (timestamped), train_log_NAME.json, and the folders named in RET as tar parts of
# 15 MiB (the device returns at most 8 files of 16 MiB: two models per call); RET may name
# "best", the run with the highest validation exact match (QA plus embodied).
#   OUT=$OUT SOUP="v1 v2 v3" RET="v1 soup" bash tools/train_side_by_side.sh DATA MINUTES \
#       v1 "INIT|SEED|LR|EXTRA" v2 "INIT|SEED|LR|EXTRA" ...
# Unpack here: cat DIR/model.tar.part-* | tar -C MODEL_DIR -xf -
# The runs and the mean are written to $WORK/m-NAME and $WORK/m-soup (WORK defaults to /tmp).
# Exits 1 when a run or the mean failed (the console says which).
set -u
DATA=$1; MIN=$2; shift 2
W=${WORK:-/tmp}
L=$OUT/console.txt
log() { while IFS= read -r l; do echo "$(date +%H:%M:%S) $1 $l"; done >> "$L"; }
date | log all; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | log all
[ -f "$DATA/embodied_dagger2.jsonl.gz" ] || cp "$DATA/embodied_dagger.jsonl.gz" "$DATA/embodied_dagger2.jsonl.gz"
pids=(); names=()
while [ $# -ge 2 ]; do
  name=$1; IFS='|' read -r init seed lr extra <<< "$2"; shift 2
  ( OUT=$W/m-$name INIT=$init DATA=$DATA SEED=$seed LR=$lr EXTRA="$extra" \
      bash tools/train_on_device.sh continue "$MIN" 2>&1 | grep --line-buffered -v '"step": [0-9]*[1-9]00,' | log "$name"
    cp $W/m-$name/train_log.json "$OUT/train_log_$name.json" ) &
  pids+=($!); names+=("$name")
done
for p in "${pids[@]}"; do wait "$p"; done
failed=0
for n in "${names[@]}"; do
  [ -f "$OUT/train_log_$n.json" ] || { echo "run $n wrote no model" | log all; failed=1; }
done
if [ -n "${SOUP:-}" ]; then
  python3 tools/average_models.py $W/m-soup $(for n in $SOUP; do echo $W/m-$n; done) 2>&1 | log soup
  [ "${PIPESTATUS[0]}" = 0 ] || failed=1
fi
# "best" in RET: the run with the highest validation exact match, QA and embodied together
if [[ " ${RET:-} " == *" best "* ]]; then
  best=$(python3 -c 'import json,sys; print(max(sys.argv[1:], key=lambda f: sum(json.load(open(f))["validation_target_exact_by_kind"].get(k, 0) for k in ("qa", "embodied"))).split("train_log_")[1][:-5])' "$OUT"/train_log_*.json)
  echo "best by validation: $best" | log all
fi
for n in ${RET:-}; do
  mkdir -p "$OUT/$n"; src=$n; [ "$n" = best ] && src=$best
  tar -C $W/m-$src -cf - . | split -b 15M - "$OUT/$n/model.tar.part-"
done
date | log all
exit $failed
