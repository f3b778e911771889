#!/usr/bin/env bash
# Installs Engram's .deb on a clean Debian 12 (bookworm, debootstrap --variant=minbase) and checks
# what a user meets there: apt-get resolves the package's Depends from Debian's mirror,
# engram-cli generates text with the bundled model, the desktop app comes up (offscreen) on that
# model by default and answers, and removing and then purging the package leaves the user's
# profile (conversations, saved KV, settings) as it was.
#   tools/test-deb-install.sh DEB [OUT_DIR]
# OUT_DIR receives the window's screenshot and the profile checksums. Needs root (chroot, mount),
# debootstrap and the network. The clean base system is made once and kept as a tarball in
# ~/.cache/engram-debootstrap (ENGRAM_DEBOOTSTRAP_CACHE); every run unpacks a fresh copy of it.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (chroot and mount)" >&2; exit 2; }
deb="$(realpath "$1")"
out="${2:-}"
[ -f "$deb" ] || { echo "no $deb" >&2; exit 2; }
[ -z "$out" ] || { mkdir -p "$out" && out="$(realpath "$out")"; }
cache="${ENGRAM_DEBOOTSTRAP_CACHE:-$HOME/.cache/engram-debootstrap}"
mirror="${ENGRAM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
base="$cache/bookworm-minbase.tar"
work="$(mktemp -d "${TMPDIR:-/tmp}/engram-deb-install.XXXXXX")"
root="$work/root"
user=alice
home="/home/$user"
profile="$home/.local/share/engram"

cleanup() {
  for mount_point in "$root/dev/pts" "$root/dev" "$root/proc"; do
    if mountpoint -q "$mount_point"; then umount "$mount_point"; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
in_root() {
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"
}
as_user() {
  chroot --userspec="$uid:$gid" "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME="$home" \
    USER="$user" LANG=C.UTF-8 XDG_RUNTIME_DIR="/tmp/runtime-$user" "$@"
}
# Checksums of every file of the user's data: the profile and the app's settings.
profile_sums() {
  local dirs=(.local/share/engram)
  [ -d "$root$home/.config" ] && dirs+=(.config)
  (cd "$root$home" && find "${dirs[@]}" -type f -print0 | sort -z | xargs -0 sha256sum)
}

step "clean Debian 12 root"
if [ ! -f "$base" ]; then
  mkdir -p "$cache"
  debootstrap --variant=minbase bookworm "$work/bootstrap" "$mirror"
  tar -C "$work/bootstrap" -cf "$base.partial" .
  mv "$base.partial" "$base"
  rm -rf "$work/bootstrap"
fi
mkdir "$root"
tar -C "$root" -xf "$base"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The programs find their model and libraries through /proc/self/exe, as on any running system.
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
echo "Debian $(cat "$root/etc/debian_version"), $(in_root dpkg-query -W -f='.\n' | wc -l) packages"
in_root useradd --create-home --shell /bin/bash "$user"
uid="$(in_root id -u "$user")"
gid="$(in_root id -g "$user")"

step "apt-get install ./$(basename "$deb")"
cp "$deb" "$root/tmp/"
in_root apt-get update -q
before="$(in_root dpkg-query -W -f='.\n' | wc -l)"
in_root apt-get install -y -q "./tmp/$(basename "$deb")"
after="$(in_root dpkg-query -W -f='.\n' | wc -l)"
echo "installed engram $(in_root dpkg-query -W -f='${Version}' engram) and $((after - before - 1)) dependencies"
in_root dpkg-query -W -f='${Status}\n' engram | grep -qx 'install ok installed' ||
  fail "engram is not installed"

step "engram-cli generate"
text="$(as_user engram-cli generate --model /usr/share/engram/models/engram-tiny \
  --prompt "Hello, my name is" --max-tokens 24 --seed 1)"
echo "generated: $text"
[ -n "$text" ] || fail "engram-cli generated nothing"

step "engram-cli chat --conversation (the user's profile)"
echo "My name is Alice and I grow tomatoes on my balcony." |
  as_user engram-cli chat --model /usr/share/engram/models/engram-tiny --conversation garden \
    --max-tokens 24
[ -f "$root$profile/engram.db" ] || fail "chat left no $profile/engram.db"

step "the desktop app, offscreen, on its default model"
mkdir -p "$root/tmp/runtime-$user"
chmod 700 "$root/tmp/runtime-$user"
chown "$uid:$gid" "$root/tmp/runtime-$user"
cat > "$root/tmp/gui-check.txt" << 'SCRIPT'
wait-model
new
type Hello! Who are you?
wait-reply
screenshot window /tmp/engram-window.png
quit
SCRIPT
if ! as_user QT_QPA_PLATFORM=offscreen timeout 300 engram --demo-script /tmp/gui-check.txt; then
  fail "the desktop app did not finish its script"
fi
[ -s "$root/tmp/engram-window.png" ] || fail "no screenshot of the window"
[ -z "$out" ] || cp "$root/tmp/engram-window.png" "$out/engram-window.png"
# What the app saved: the chat's conversation and the window's, each with an answer.
python3 - "$root$profile/engram.db" << 'PYTHON'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = db.execute("""SELECT c.name, u.role, u.text FROM utterances u
                     JOIN conversations c ON c.id = u.conversation_id
                     ORDER BY c.id, u.idx""").fetchall()
for name, role, text in rows:
    print(f"  [{name}] {role}: {text!r}")
conversations = {name for name, _, _ in rows}
answered = {name for name, role, text in rows if role == "assistant" and text.strip()}
if len(conversations) < 2 or answered != conversations:
    sys.exit(f"FAIL: expected two answered conversations, got {sorted(answered)} "
             f"of {sorted(conversations)}")
PYTHON

step "apt-get remove: the profile stays"
profile_sums > "$work/profile.before"
cat "$work/profile.before"
in_root apt-get remove -y -q engram
[ ! -e "$root/usr/bin/engram" ] || fail "remove left /usr/bin/engram"
profile_sums | diff "$work/profile.before" - || fail "remove changed the profile"

# The package has no conffiles, so remove already forgets it; purge is checked on a reinstall.
step "apt-get install again, then purge: the profile stays"
in_root apt-get install -y -q "./tmp/$(basename "$deb")"
as_user engram-cli generate --model /usr/share/engram/models/engram-tiny --prompt "Hello" \
  --max-tokens 4 > /dev/null
in_root apt-get purge -y -q engram
if in_root dpkg-query -W -f='${Status}\n' engram 2> /dev/null | grep -q installed; then
  fail "engram is still known to dpkg after purge"
fi
for path in /usr/bin/engram /usr/bin/engram-cli /usr/share/engram /usr/share/doc/engram; do
  [ ! -e "$root$path" ] || fail "purge left $path"
done
profile_sums | diff "$work/profile.before" - || fail "purge changed the profile"
echo "the profile's $(wc -l < "$work/profile.before") files are unchanged after remove and purge"
[ -z "$out" ] || cp "$work/profile.before" "$out/profile.sha256"

step "PASS"
