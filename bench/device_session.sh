# Sourced by a results folder's run.sh on the GPU machine: the device and commit into
# $R/device.txt, the build (bench/device_build.sh, with DEVICE_TARGETS), and helpers:
#   run_decode NAME TOKENS DECODE SPEC [flags...]  one `engram-cli bench decode` on the 8B shape
#                                                  (bf16), its JSON and log in $R, a summary line
#   pack                                           $R into $OUT/o.tar.gz (one file comes back)
# Needs OUT (the device's result folder) and ENGRAM_COMMIT; sets R=/tmp/o, B, CLI.
SECONDS=0
mkdir -p /tmp/o && R=/tmp/o
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $R/device.txt
echo "commit ${ENGRAM_COMMIT:-unknown} date $(date -u +%F) torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)')" >> $R/device.txt
OUT_SAVED=$OUT
OUT=$R source bench/device_build.sh
OUT=$OUT_SAVED
echo "built at ${SECONDS}s"
run_decode() {
  local name=$1 tokens=$2 decode=$3 spec=$4
  shift 4
  timeout 170 $CLI bench decode --shape llama3.1-8b --device cuda --dtype bf16 --tokens $tokens \
    --decode-tokens $decode --repeat 1 --policy "$spec" --json $R/$name.json "$@" > $R/$name.log 2>&1
  echo "$name rc=$? $(python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
print('%.3f ms/token (%.3f without build), TTFT %.0f ms, peak KV tokens %d, decode peak above weights %.2f GiB, device KV %.1f %% of full, retrievals/token %.3f' % (d['per_token_latency_ms'], d.get('per_token_latency_ms_without_build',0), d.get('time_to_first_token_ms',0), d.get('peak_kv_tokens',0), d.get('decode_peak_above_weights_bytes',0)/2**30, 100*d.get('device_kv_fraction_of_full',0), d.get('retrievals_per_token',0)))" $R/$name.json 2>/dev/null) at ${SECONDS}s"
}
pack() {
  rm -f $R/build.log
  tar -C /tmp -czf $OUT/o.tar.gz o
}
