#!/usr/bin/env bash
# test_package_lintian: lintian finds no error and no warning in the .deb test_packages made
# (informational tags are listed, not failed on).
#   check_lintian.sh DEB
set -uo pipefail
deb="$1"
[ -f "$deb" ] || { echo "FAIL: no $deb (test_packages makes it)" >&2; exit 1; }
report="$(mktemp)"
trap 'rm -f "$report"' EXIT
lintian --fail-on error,warning --info --display-info "$deb" > "$report" 2>&1
status=$?
# lintian only warns that it runs as root (CI containers do); the checks are the same.
grep -v '^running with root privileges is not recommended!$' "$report"
[ "$status" -eq 0 ] || { echo "FAIL: lintian found errors or warnings (status $status)" >&2; exit 1; }
echo PASS
