#!/usr/bin/env bash
# Installs what Engram needs to build and test on Debian 12 (run as root, or with sudo present).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev                     # the model runtime (libtorch 1.13, CPU)
  libopenblas0-openmp              # BLAS for libtorch: the default libblas3 is the reference
                                   # BLAS, 10x slower (measured on engram-tiny prefill)
  libsentencepiece-dev             # tokenizer
  libpcre2-dev                     # tokenizer.json pre-tokenizer regexes (\p{L}, lookahead)
  libicu-dev                       # tokenizer.json NFC normalizer (Qwen2 family)
  libsqlite3-dev                   # persistent memory store
  libxxhash-dev                    # XXH64 checksums of KV blob files (the reference library)
  libcli11-dev                     # engram-cli's flag parser (header-only; replaces our own)
  libspdlog-dev                    # logging (behind core/log.h)
  nlohmann-json3-dev               # config.json, safetensors headers, traces
  libcpp-httplib-dev               # engram-cli serve: HTTP/1.1 keep-alive, chunked SSE, limits
  qt6-base-dev qt6-base-dev-tools qt6-charts-dev libgl-dev   # the desktop app and Qt Test
  qt6-svg-dev                      # SVG export of the layer timeline (QSvgGenerator)
  xvfb xauth                       # screenshots of the real window in tests/ui scripts
  python3                          # the training tools' data steps (tests/tools)
  lintian appstream desktop-file-utils   # the packaging tests (tests/packaging.cmake)
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi
