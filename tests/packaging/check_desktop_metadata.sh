#!/usr/bin/env bash
# test_desktop_metadata: the desktop entry, the AppStream metadata and the man pages in
# packaging/ pass their validators, and the icon named by the entry exists in every size.
#   check_desktop_metadata.sh PACKAGING_DIR
set -euo pipefail
dir="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }
desktop-file-validate "$dir/io.engram.Engram.desktop" || fail "desktop-file-validate"
appstreamcli validate --no-net --explain "$dir/io.engram.Engram.metainfo.xml" ||
  fail "appstreamcli validate"
icon="$(sed -n 's/^Icon=//p' "$dir/io.engram.Engram.desktop")"
[ -f "$dir/icons/$icon.svg" ] || fail "no icons/$icon.svg"
for size in 16 24 32 48 64 128 256 512; do
  png="$dir/icons/${size}x${size}/$icon.png"
  [ -f "$png" ] || fail "no $png"
  # Bytes 16..23 of a PNG are its width and height, big-endian.
  dims="$(od -An -tu1 -j16 -N8 "$png" | tr -s ' ' | sed 's/^ //')"
  [ "$dims" = "0 0 $((size / 256)) $((size % 256)) 0 0 $((size / 256)) $((size % 256))" ] ||
    fail "$png is not ${size}x${size} ($dims)"
done
for page in "$dir"/man/*.1; do
  warnings="$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$page" 2>&1 \
    > /dev/null)"
  [ -z "$warnings" ] || fail "$page: $warnings"
done
echo PASS
