#!/usr/bin/env bash
# engram-cli serve with the official `openai` npm client (tests/serve/openai_client.mjs).
# Usage: test_serve_openai_client.sh ENGRAM_CLI MODEL_DIR NPM_DIR
# The client is installed into NPM_DIR (under the build directory) on the first run; openai 6.x
# is the newest major that runs on Debian 12's Node 20 (7.x needs Node 22). Without node or npm
# the test is skipped (exit 77); a failed install fails it.
set -euo pipefail
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node and npm are needed for the openai npm client test"
  exit 77
fi
cli="$1" model_dir="$2"
npm_dir="$(mkdir -p "$3" && cd "$3" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -f "$npm_dir/node_modules/openai/package.json" ]; then
  npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error openai@6
fi
echo "openai $(node -p 'require(process.argv[1]).version' "$npm_dir/node_modules/openai/package.json")"
work="$(mktemp -d)"
server=""
trap 'if [ -n "$server" ]; then kill "$server"; wait "$server"; fi 2>/dev/null; rm -rf "$work"' EXIT
"$cli" serve --model "$model_dir" --port 0 --profile "$work/profile" >"$work/out" 2>"$work/log" &
server=$!
for _ in $(seq 600); do
  grep -q "^serving" "$work/out" && break
  kill -0 "$server" 2>/dev/null || { cat "$work/log"; echo "the server did not start"; exit 1; }
  sleep 0.1
done
base_url="$(grep -o 'http://[^ ]*/v1' "$work/out")"
model="$(basename "$model_dir")"
# ES modules resolve 'openai' from the script's folder up (not NODE_PATH): run a copy beside
# node_modules.
cp "$here/openai_client.mjs" "$npm_dir/openai_client.mjs"
if ! node "$npm_dir/openai_client.mjs" "$base_url" "$model"; then
  cat "$work/log"
  exit 1
fi
