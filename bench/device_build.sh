# Sourced by the bench/run_device*.sh scripts: builds engram-cli (and any extra targets named in
# DEVICE_TARGETS) against the GPU machine's PyTorch into $B, with the Debian 12 -dev packages the
# GPU machine lacks carried in .device/ (git-ignored): libsqlite3-dev, and for the tokenizer and
# the store libpcre2-dev + libpcre2-8-0, libxxhash-dev + libxxhash0, libcli11-dev (the CLI's
# flags) (`apt-get download` them),
# and icu-headers-as-74.tar.gz: Debian 12's /usr/include/unicode with uvernum.h relabelled 74 and
# an icu-uc.pc, so that the tokenizer's unorm2 calls link against the machine's own
# libicuuc.so.74 (ICU's symbols carry its major version; the whole ICU 72 runtime would not fit
# the 64 MiB a call carries). Unpacked into /tmp/sq and found through pkg-config's sysroot; the
# binaries keep /tmp/sq in their build RPATH. Sets CLI. Exits the script on a failed build.
B=${B:-/tmp/engram-build}
mkdir -p /tmp/sq && for deb in .device/*.deb; do dpkg -x "$deb" /tmp/sq; done
tar -C /tmp/sq -xzf .device/icu-headers-as-74.tar.gz
for lib in icuuc icudata; do
  ln -sf /usr/lib/x86_64-linux-gnu/lib$lib.so.74 /tmp/sq/usr/lib/x86_64-linux-gnu/lib$lib.so
done
export PKG_CONFIG_SYSROOT_DIR=/tmp/sq
export PKG_CONFIG_PATH=/tmp/sq/usr/lib/x86_64-linux-gnu/pkgconfig:/tmp/sq/usr/share/pkgconfig
# Keep -I/usr/include and -L/usr/lib/... (sysroot-prefixed): they are where the unpacked files are.
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DENGRAM_BUILD_UI=OFF -DENGRAM_BUILD_TESTS=OFF -DENGRAM_BUILD_SERVE=OFF \
  -DCMAKE_CXX_FLAGS="-idirafter /tmp/sq/usr/include" \
  -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
  -DSQLite3_INCLUDE_DIR=/tmp/sq/usr/include -DSQLite3_LIBRARY=/lib/x86_64-linux-gnu/libsqlite3.so.0 \
  > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
cmake --build $B --target engram-cli ${DEVICE_TARGETS:-} -j16 >> "$OUT/build.log" 2>&1 ||
  { grep -E "error" -A5 "$OUT/build.log" | head -60; exit 1; }
echo "built"
CLI=$B/app/cli/engram-cli
