#!/usr/bin/env bash
# How log.txt was made (as root, on the Debian 12 dev machine, from the repository root):
set -euo pipefail
cmake -S . -B build-pkg -G Ninja -DCMAKE_BUILD_TYPE=Release -DENGRAM_BUILD_TESTS=OFF
cmake --build build-pkg --target package
R=bench/results/2026-11-24-deb-install
(time tools/test-deb-install.sh build-pkg/engram_0.1.0_amd64.deb "$R") 2>&1 | tee "$R/log.txt"
