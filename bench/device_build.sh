# Sourced by the bench/run_device*.sh scripts: builds engram-cli (and any extra targets named in
# DEVICE_TARGETS) against the GPU machine's PyTorch into $B, with the carried SQLite header
# (.device/libsqlite3-dev_*.deb, git-ignored). Sets CLI. Exits the script on a failed build.
B=${B:-/tmp/engram-build}
mkdir -p /tmp/sq && dpkg -x .device/libsqlite3-dev_*.deb /tmp/sq
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DENGRAM_BUILD_UI=OFF -DENGRAM_BUILD_TESTS=OFF \
  -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
  -DSQLite3_INCLUDE_DIR=/tmp/sq/usr/include -DSQLite3_LIBRARY=/lib/x86_64-linux-gnu/libsqlite3.so.0 \
  > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
cmake --build $B --target engram-cli ${DEVICE_TARGETS:-} -j16 >> "$OUT/build.log" 2>&1 ||
  { grep -E "error" -A5 "$OUT/build.log" | head -60; exit 1; }
echo "built"
CLI=$B/app/cli/engram-cli
