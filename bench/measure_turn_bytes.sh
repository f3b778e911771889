#!/usr/bin/env bash
# Bytes written per turn against history length (issue 14, append-only persistence): TURNS
# real-length lines piped into `engram-cli chat --conversation` on engram-tiny under a policy;
# every save prints the process's own write counter around it (/proc/self/io wchar: KV run files,
# SQLite pages and WAL) and the conversation's stored KV. Writes CSV to OUT_CSV.
#   CLI=build/app/cli/engram-cli TURNS=300 DEVICE=cpu DTYPE=f32 OUT_CSV=f.csv bench/measure_turn_bytes.sh
set -euo pipefail
CLI=${CLI:-build/app/cli/engram-cli}
TURNS=${TURNS:-300}
DEVICE=${DEVICE:-cpu}
DTYPE=${DTYPE:-f32}
POLICY=${POLICY:-streaming}
BUDGET=${BUDGET:-1024}
OUT_CSV=${OUT_CSV:-/tmp/turn_bytes.csv}
profile=$(mktemp -d)
python3 - "$TURNS" > "$profile/turns.txt" <<'PY'
import sys
names = ["Ines", "Leo", "Marta", "Tomas", "Aiko", "Ravi", "Olga", "Sam"]
things = ["a bicycle", "an old camera", "two plants", "a kitchen table", "a guitar", "new boots"]
topics = ["the garden", "their trip to Lisbon", "work deadlines", "a film", "the weather", "cooking"]
for i in range(int(sys.argv[1])):
    n, t, p = names[i % 8], things[(i * 5) % 6], topics[(i * 7) % 6]
    print(f"On day {i + 1} I bought {t} with my friend {n}, and we talked about {p} for a while.")
PY
"$CLI" chat --model resources/models/engram-tiny --device "$DEVICE" --dtype "$DTYPE" \
  --policy "$POLICY" --kv-budget "$BUDGET" --max-tokens 24 --profile "$profile" \
  --conversation bytes < "$profile/turns.txt" > /dev/null 2> "$profile/err.txt"
python3 - "$profile/err.txt" "$OUT_CSV" <<'PY'
import re, sys
rows = [m.groups() for m in re.finditer(
    r"saved: (\d+) bytes written \(stored KV (\d+) bytes, (\d+) tokens in (\d+) runs\)",
    open(sys.argv[1]).read())]
with open(sys.argv[2], "w") as f:
    f.write("turn,bytes_written,stored_kv_bytes,stored_tokens,runs,written_share\n")
    for i, (w, kv, tok, runs) in enumerate(rows, 1):
        f.write(f"{i},{w},{kv},{tok},{runs},{int(w) / max(1, int(kv)):.4f}\n")
for i in [1, 10, 50, 100, 200, len(rows)]:
    if 0 < i <= len(rows):
        w, kv, tok, runs = rows[i - 1]
        print(f"turn {i}: {w} bytes written, stored KV {kv} bytes ({tok} tokens, {runs} runs), "
              f"{100 * int(w) / int(kv):.2f}%")
PY
rm -rf "$profile"
