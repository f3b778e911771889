#!/usr/bin/env bash
# Starts the real Engram app under Xvfb with a fresh profile, drives a chat with the bundled
# model (tests/ui/demo.txt through --demo-script) and saves screenshots of the window and of each
# panel, the timeline's PNG and SVG export, a stopped answer, a trace from `engram-cli --trace`
# opened in the timeline, a LouisKV reply's retrieval map, the message for a bad model folder, and the window in a dark palette.
#   tests/ui/screenshots.sh [BUILD_DIR] [OUT_DIR]     (defaults: build-ui, docs/screenshots)
# Needs xvfb-run (apt-get install xvfb xauth) and the 'engram' and 'engram-cli' targets.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$(cd "${1:-$root/build-ui}" && pwd)"
out="$(mkdir -p "${2:-$root/docs/screenshots}" && cd "${2:-$root/docs/screenshots}" && pwd)"
app="$build/app/gui/engram"
cli="$build/app/cli/engram-cli"
[ -x "$app" ] || { echo "no $app: build the 'engram' target first" >&2; exit 1; }
[ -x "$cli" ] || { echo "no $cli: build the 'engram-cli' target first" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/not-a-model"
"$cli" generate --model "$root/tests/data/models/llama-gqa" --prompt "The layer timeline" \
  --max-tokens 16 --trace "$work/engram-cli-trace.jsonl" > /dev/null
# A reply of the bundled model decoded with LouisKV: its trace holds the retrieval map.
prompt=""
for i in $(seq 12); do
  prompt+="Theo made lasagna for dinner. The kettle in the kitchen is red. The blue door leads to "
  prompt+="the hall. It has been foggy all week. The key is in the drawer by the bed. "
done
"$cli" generate --model "$root/resources/models/engram-tiny" --prompt "$prompt Tell me about the house." \
  --max-tokens 400 --temperature 1.0 --seed 3 --policy louiskv:full_layers=1,sinks=16,window=64,budget=128 \
  --trace "$work/louiskv-trace.jsonl" > /dev/null
sed -e "s|@OUT@|$out|g" -e "s|@WORK@|$work|g" -e "s|@TRACE@|$work/engram-cli-trace.jsonl|g" \
  -e "s|@LOUISKV_TRACE@|$work/louiskv-trace.jsonl|g" "$here/demo.txt" > "$work/demo.txt"
# A fixed light palette and font rendering: screenshots should not depend on the desktop.
export QT_QPA_PLATFORMTHEME="" QT_STYLE_OVERRIDE=Fusion
timeout 600 xvfb-run -a -s "-screen 0 1440x900x24" \
  "$app" --profile "$work/profile" --settings "$work/settings.ini" --demo-script "$work/demo.txt"
ls -l "$out"
