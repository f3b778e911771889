#!/usr/bin/env bash
# Makes .device/ (git-ignored), the Debian 12 -dev files bench/device_build.sh unpacks on the GPU
# machine, which has PyTorch but not these headers: libsqlite3-dev (from ../shared/device/ when
# there), libpcre2-dev + libpcre2-8-0, libxxhash-dev + libxxhash0, libcli11-dev, and
# icu-headers-as-74.tar.gz (this machine's ICU 72 headers relabelled 74 with an icu-uc.pc, so the
# tokenizer's unorm2 calls link against the GPU machine's libicuuc.so.74: ICU's symbols carry the
# major version). Run on the development machine after tools/install-deps.sh; carry ".device".
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device
shared_sqlite=$(ls ../shared/device/libsqlite3-dev_*.deb 2>/dev/null | head -1 || true)
if [ -n "$shared_sqlite" ]; then cp "$shared_sqlite" .device/; else need=libsqlite3-dev; fi
(cd .device && apt-get download ${need:-} libpcre2-dev libpcre2-8-0 libxxhash-dev libxxhash0 \
  libcli11-dev >/dev/null)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/usr/include" "$work/usr/lib/x86_64-linux-gnu/pkgconfig"
cp -r /usr/include/unicode "$work/usr/include/"
major=$(sed -n 's/^#define U_ICU_VERSION_MAJOR_NUM \([0-9]*\).*/\1/p' /usr/include/unicode/uvernum.h)
sed -i -e "s/^#define U_ICU_VERSION_MAJOR_NUM $major/#define U_ICU_VERSION_MAJOR_NUM 74/" \
  -e "s/^#define U_ICU_VERSION_SUFFIX _$major/#define U_ICU_VERSION_SUFFIX _74/" \
  -e "s/^#define U_ICU_VERSION \"$major\./#define U_ICU_VERSION \"74./" \
  -e "s/^#define U_ICU_VERSION_SHORT \"$major\"/#define U_ICU_VERSION_SHORT \"74\"/" \
  "$work/usr/include/unicode/uvernum.h"
grep -q "U_ICU_VERSION_MAJOR_NUM 74" "$work/usr/include/unicode/uvernum.h"
cat > "$work/usr/lib/x86_64-linux-gnu/pkgconfig/icu-uc.pc" <<'EOF'
prefix=/usr
libdir=${prefix}/lib/x86_64-linux-gnu
includedir=${prefix}/include

Name: icu-uc
Description: ICU 72 headers relabelled 74 for the GPU machine's libicuuc.so.74
Version: 74.2
Libs: -L${libdir} -licuuc -licudata
Cflags: -I${includedir}
EOF
tar -C "$work" -czf .device/icu-headers-as-74.tar.gz usr
ls -la .device
