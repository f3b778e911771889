#!/usr/bin/env bash
# The decode attention in one launch (the last block of a (row, KV head) combines) against the two
# kernels in the same build (ENGRAM_DECODE_ATTENTION_TWO_KERNELS=1, the peer; both launched
# dependent): the kernel's checks and speed rows (3B shape, 28 layers) both ways, with and without
# dependent launch (ENGRAM_NO_PDL=1), every GPU check, then decode ms/token of the recorded step
# (--policy full) alternating new and peer. Logs in /tmp/res, packed into $OUT/results.tgz;
# the summary in $OUT/summary.txt.
# OTHERS_PATCH (optional): a diff of files other engineers had modified, uncommitted, in the
# checkout when the call was made; it is reversed first so that the build is the commit plus
# this change only.
set -uo pipefail
export ENGRAM_COMMIT=${ENGRAM_COMMIT:-unknown}
SECONDS=0
R=/tmp/res; mkdir -p $R
S=$OUT/summary.txt
say() { echo "$*" | tee -a $S; }
pack() { tar -C /tmp -czf $OUT/results.tgz res; }
if [ -n "${OTHERS_PATCH:-}" ] && [ -s "$OTHERS_PATCH" ]; then
  (git apply -R "$OTHERS_PATCH" 2>/dev/null || patch -R -p1 < "$OTHERS_PATCH") > $R/others_patch.log 2>&1
  say "others' uncommitted changes reversed: rc=$?"
fi
(bash bench/run_device_epicache.sh build | tail -1)
cp $OUT/device.txt $R/ 2>/dev/null; rm -f $OUT/device.txt
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> $R/device.txt 2>&1
cat $R/device.txt | tee -a $S
B=/tmp/engram-build; CLI=$B/app/cli/engram-cli; GC=$B/bench/engram-gpu-checks
cmake --build $B --target engram-gpu-checks -j16 > /tmp/gc.log 2>&1 || { grep -E "error" -A3 /tmp/gc.log | head -30; exit 1; }
say "built at ${SECONDS}s"
rows() {  # name, then env assignments
  local name=$1; shift
  env "$@" timeout 120 $GC --only decode_attention --json $R/rows-$name.json > $R/rows-$name.log 2>&1
  say "rows $name ($*): rc=$? PASS $(grep -c PASS $R/rows-$name.log) FAIL $(grep -c FAIL $R/rows-$name.log) at ${SECONDS}s"
  grep -E "FAIL|graph, 3 replays|3B shape" $R/rows-$name.log | sed 's/^/  /' | tee -a $S
}
rows new ENGRAM_X=0
rows peer ENGRAM_DECODE_ATTENTION_TWO_KERNELS=1
rows new-nopdl ENGRAM_NO_PDL=1
rows peer-nopdl ENGRAM_DECODE_ATTENTION_TWO_KERNELS=1 ENGRAM_NO_PDL=1
timeout 150 $GC --json $R/gpu_checks.json > $R/gpu_checks.log 2>&1
say "all gpu checks rc=$? PASS $(grep -c PASS $R/gpu_checks.log) FAIL $(grep -c FAIL $R/gpu_checks.log) at ${SECONDS}s"
grep -E "FAIL|3B shape" $R/gpu_checks.log | sed 's/^/  /' | tee -a $S
pack
decode() {  # name shape tokens modes...
  local name=$1 shape=$2 tokens=$3 n=0; shift 3
  for mode in "$@"; do
    n=$((n + 1))
    unset ENGRAM_DECODE_ATTENTION_TWO_KERNELS
    [ $mode = peer ] && export ENGRAM_DECODE_ATTENTION_TWO_KERNELS=1
    timeout 150 $CLI bench decode --shape $shape --device cuda --dtype bf16 --tokens $tokens --decode-tokens 256 --repeat 3 \
      --policy full --json $R/decode-$name-$mode-$n.json > $R/decode-$name-$mode-$n.log 2>&1
    say "$name $mode rc=$? $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%.3f ms/token, %.0f%% of roofline' % (d['per_token_latency_ms'], 100*d.get('fraction_of_roofline',0)))" $R/decode-$name-$mode-$n.json 2>/dev/null) at ${SECONDS}s"
  done
  unset ENGRAM_DECODE_ATTENTION_TWO_KERNELS
}
decode 3b-10k llama3.2-3b 10240 new peer new peer new peer
decode 8b-32k llama3.1-8b 32768 new peer new peer
decode 3b-90k llama3.2-3b 90000 new peer
grep -h -i -E "error|what\(\)" $R/decode-*.log | sort | uniq -c | head | tee -a $S
pack
say "done at ${SECONDS}s"
