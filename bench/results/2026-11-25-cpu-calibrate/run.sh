#!/usr/bin/env bash
# engram-cli calibrate on the bundled model: the default (conversation seed 1, 2,048 tokens,
# sink 16, window 256, block 512), two more seeds (input variance), α = 1, and the authors'
# ratios at half their size (sink 128, window 1,024, block 2,048, 4,096 tokens). Profiles go to a
# scratch folder; the JSON reports (σ + budgets at M = 512/1024/2048) land here.
# Usage: run.sh [NAME ...]   (default, seed2, seed3, alpha1, authors-ratios; all when none)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cli="$root/build/app/cli/engram-cli"
model="$root/resources/models/engram-tiny"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export OMP_NUM_THREADS=1
# run NAME [FLAGS...]: stdout, then stderr without the progress lines, in NAME.txt.
run() {
  local name=$1
  shift
  case " ${only[*]:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  local rc=0
  /usr/bin/time -f "%e s wall, %M KB max RSS" "$cli" calibrate --model "$model" \
    --profile "$scratch/$name" --json "$here/$name.json" "$@" >"$here/$name.txt" \
    2>"$scratch/$name.err" || rc=$?
  grep -v '^calibrate: ' "$scratch/$name.err" >>"$here/$name.txt" || true
  [ "$rc" = 0 ] || echo "$name: exit $rc (see $name.txt)" >&2
}
only=("$@")  # names to run; all when none
run default
run seed2 --seed 2
run seed3 --seed 3
run alpha1 --alpha 1
run authors-ratios --tokens 4096 --sink 128 --window 1024 --block 2048
