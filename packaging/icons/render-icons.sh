#!/usr/bin/env bash
# Renders the hicolor PNG sizes of the application icon from io.engram.Engram.svg (needs
# rsvg-convert: apt-get install librsvg2-bin). The PNGs are committed, so building the
# packages does not need librsvg; rerun this after editing the SVG.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
for size in 16 24 32 48 64 128 256 512; do
  mkdir -p "$here/${size}x${size}"
  rsvg-convert -w "$size" -h "$size" "$here/io.engram.Engram.svg" \
    -o "$here/${size}x${size}/io.engram.Engram.png"
done
