#!/usr/bin/env bash
# test_packages: cpack makes the .deb and the .tar.gz (cmake/Packaging.cmake) from the built tree,
# both hold the install layout (programs, private library, bundled model, desktop files, man
# pages, copyright) and nothing of the build (tests, static libraries, headers, training logs),
# the .deb's Depends come from dpkg-shlibdeps, no installed ELF file carries an RPATH, and the
# unpacked tarball generates text from its own copy of the model.
#   check_packages.sh BUILD_DIR OUT_DIR VERSION WITH_GUI(0|1)
# The packages stay in OUT_DIR for test_package_lintian.
set -euo pipefail
build="$1" out="$2" version="$3" gui="$4"
fail() { echo "FAIL: $*" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out"
if ! cpack --config "$build/CPackConfig.cmake" -B "$out" > "$out/cpack.log" 2>&1; then
  cat "$out/cpack.log"
  fail "cpack failed"
fi
deb="$out/engram_${version}_$(dpkg --print-architecture).deb"
tgz="$out/engram-${version}-linux-$(uname -m).tar.gz"
[ -f "$deb" ] || fail "no $deb (cpack made: $(ls "$out"))"
[ -f "$tgz" ] || fail "no $tgz (cpack made: $(ls "$out"))"
ls -l "$deb" "$tgz"

multiarch="$(gcc -print-multiarch 2>/dev/null || true)"
libdir="lib/${multiarch:+$multiarch/}engram"
expected=(
  bin/engram-cli
  "$libdir/libengram_sentencepiece.so"
  share/engram/models/engram-tiny/config.json
  share/engram/models/engram-tiny/tokenizer.model
  share/engram/models/engram-tiny/model.safetensors.index.json
  share/engram/models/engram-tiny/model-00001-of-00002.safetensors
  share/engram/models/engram-tiny/model-00002-of-00002.safetensors
  share/man/man1/engram-cli.1.gz
  share/doc/engram/copyright
  share/doc/engram/changelog.gz
)
if [ "$gui" = 1 ]; then
  expected+=(
    bin/engram
    share/man/man1/engram.1.gz
    share/applications/io.engram.Engram.desktop
    share/metainfo/io.engram.Engram.metainfo.xml
    share/icons/hicolor/scalable/apps/io.engram.Engram.svg
  )
  for size in 16 24 32 48 64 128 256 512; do
    expected+=("share/icons/hicolor/${size}x${size}/apps/io.engram.Engram.png")
  done
fi

# Both listings as paths relative to the install prefix.
dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -e 's|^\./usr/||' -e 's|^\./||' > "$out/deb.list"
tar -tzf "$tgz" | sed -e 's|^[^/]*/||' > "$out/tgz.list"
for list in deb tgz; do
  for path in "${expected[@]}"; do
    grep -qxF "$path" "$out/$list.list" || fail "the $list lacks $path"
  done
  if grep -nE '(^|/)test_|\.a$|^include/|train_log\.json|CMakeFiles|^local/' "$out/$list.list"; then
    fail "the $list holds build files (above)"
  fi
done
echo "both packages hold the ${#expected[@]} expected paths"

# Control fields: the version of project(), Depends from dpkg-shlibdeps (real package names).
[ "$(dpkg-deb -f "$deb" Package)" = engram ] || fail "Package is not engram"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "Version is not $version"
depends="$(dpkg-deb -f "$deb" Depends)"
echo "Depends: $depends"
needed=(libc6 libstdc++6 libtorch1.13 libsqlite3-0 libsentencepiece0)
[ "$gui" = 1 ] && needed+=(libqt6widgets6 libqt6gui6 libqt6core6)
depends_names="$(tr ',|' '\n\n' <<< "$depends" | sed -e 's/^ *//' -e 's/ .*//')"
for package in "${needed[@]}"; do
  grep -qxF "$package" <<< "$depends_names" || fail "Depends lacks $package"
done
dpkg-deb -I "$deb" | grep -qE '^ *[0-9]+ bytes, +[0-9]+ lines +\* +(postinst|postrm)' &&
  fail "the .deb has maintainer scripts (none are needed)"

# No build-tree RPATH in anything installed (lintian's binary-or-shlib-defines-rpath).
root="$out/deb-root"
mkdir -p "$root"
dpkg-deb -x "$deb" "$root"
elves=0
while IFS= read -r -d '' file; do
  head -c 4 "$file" | grep -q $'\x7fELF' || continue
  elves=$((elves + 1))
  if readelf -d "$file" | grep -E 'RPATH|RUNPATH'; then fail "$file carries an RPATH"; fi
  if strings "$file" | grep -F "$build" | grep -v sentencepiece; then
    fail "$file names the build tree"
  fi
done < <(find "$root" -type f -print0)
[ "$elves" -ge 2 ] || fail "found $elves ELF files in the .deb"
echo "$elves ELF files, none with an RPATH"

# The unpacked tarball runs: its engram-cli loads its own model and SentencePiece backend.
mkdir -p "$out/tgz-root"
tar -xzf "$tgz" -C "$out/tgz-root"
prefix="$(find "$out/tgz-root" -mindepth 1 -maxdepth 1 -type d)"
unset ENGRAM_SENTENCEPIECE_LIBRARY ENGRAM_MODEL_DIR
text="$("$prefix/bin/engram-cli" generate --model "$prefix/share/engram/models/engram-tiny" \
  --prompt "Hello, my name is" --max-tokens 12 --seed 1 --device cpu)"
echo "tarball engram-cli generate: $text"
[ -n "$text" ] || fail "the tarball's engram-cli generated nothing"
if [ "$gui" = 1 ]; then
  shown="$(QT_QPA_PLATFORM=offscreen "$prefix/bin/engram" --version)"
  grep -qF "$version" <<< "$shown" || fail "engram --version says '$shown', not $version"
fi
echo "PASS"
