#!/usr/bin/env bash
# Sets up what the aarch64 tests need, Debian packages only (sourced by
# tests/aarch64/run.sh; docs/aarch64.md explains the whole path):
#   * on the host (apt-get): qemu-system-aarch64, the C and C++ cross
#     compilers;
#   * from Debian's arm64 archive, downloaded and extracted, never
#     installed: the arm64 kernel (with its 9p modules) and busybox;
#   * Debian's rustc-web/cargo-web with the arm64 standard library, also
#     only extracted (rustup's toolchain has no aarch64 std).
# Everything lands in $A64 (target/aarch64 by default), reused by later runs.
set -euo pipefail
A64=${A64:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/target/aarch64}
mkdir -p "$A64"

# The Debian archive this machine's apt already uses.
debian_uri() { awk -v sec="$1" '/^URIs:/ && (($2 ~ /security/) == sec) {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null; }
DEBIAN_URI=$(debian_uri 0); SECURITY_URI=$(debian_uri 1)
if [ -z "$DEBIAN_URI" ]; then
    DEBIAN_URI=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    SECURITY_URI=$(awk '$1 == "deb" && $0 ~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
: "${DEBIAN_URI:=http://deb.debian.org/debian}" "${SECURITY_URI:=http://deb.debian.org/debian-security}"

# 1. Host packages: the emulator and the C cross compiler.
if ! command -v qemu-system-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null \
    || ! command -v aarch64-linux-gnu-g++ >/dev/null; then
    apt-get update -qq
    # bookworm's qemu-system-arm would remove a backported qemu-utils:
    # take qemu from bookworm-backports then.
    QT=()
    if dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null | grep -q bpo; then
        echo "deb $DEBIAN_URI bookworm-backports main" > /etc/apt/sources.list.d/bookworm-backports.list
        apt-get update -qq
        QT=(-t bookworm-backports)
    fi
    apt-get install -y -qq --no-install-recommends "${QT[@]}" qemu-system-arm >/dev/null
    apt-get install -y -qq --no-install-recommends gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
fi

# 2. A private apt configuration for arm64 packages (no dpkg --add-architecture).
mkdir -p "$A64"/apt/state/lists/partial "$A64"/apt/cache/archives/partial "$A64"/apt/etc/{sources.list.d,preferences.d,apt.conf.d} "$A64"/debs
touch "$A64"/apt/state/status
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
cat > "$A64"/apt/etc/sources.list <<SRC
deb [arch=arm64 signed-by=$KEYRING] $DEBIAN_URI bookworm main
deb [arch=arm64 signed-by=$KEYRING] $DEBIAN_URI bookworm-updates main
deb [arch=arm64 signed-by=$KEYRING] $SECURITY_URI bookworm-security main
SRC
cat > "$A64"/apt/apt.conf <<CONF
APT::Architecture "arm64"; APT::Architectures { "arm64"; };
Dir::State "$A64/apt/state"; Dir::State::status "$A64/apt/state/status";
Dir::Cache "$A64/apt/cache"; Dir::Etc::SourceList "$A64/apt/etc/sources.list";
Dir::Etc::SourceParts "$A64/apt/etc/sources.list.d"; Dir::Etc::Preferences "$A64/apt/etc/preferences";
Dir::Etc::PreferencesParts "$A64/apt/etc/preferences.d"; Dir::Etc::main "/dev/null";
Dir::Etc::Parts "$A64/apt/etc/apt.conf.d";
CONF
# (Downloads land in $A64, which apt's sandbox user may not write: as root.)
arm64_apt() { APT_CONFIG="$A64/apt/apt.conf" "$@" -o APT::Sandbox::User=root; }
if [ ! -f "$A64/.lists" ] || [ -n "$(find "$A64/.lists" -mmin +1440)" ]; then
    arm64_apt apt-get update -qq && touch "$A64/.lists"
fi

# 3. The arm64 kernel and busybox.
KPKG=$(arm64_apt apt-cache depends linux-image-arm64 | awk '/Depends: linux-image-/{print $2; exit}')
KVER=${KPKG#linux-image-}
if [ ! -f "$A64/x/kernel/boot/vmlinuz-$KVER" ]; then
    (cd "$A64/debs" && arm64_apt apt-get download -qq "$KPKG" busybox-static)
    rm -rf "$A64/x"; mkdir -p "$A64/x/kernel" "$A64/x/bb"
    dpkg-deb -x "$A64"/debs/"${KPKG}"_*.deb "$A64/x/kernel"
    dpkg-deb -x "$A64"/debs/busybox-static_*.deb "$A64/x/bb"
fi
export KVER

# 4. Rust for aarch64: Debian's rustc-web (amd64) with its arm64 std, the
# two pinned to the same version.
RV=$(apt-cache policy rustc-web | awk '/Candidate:/{print $2}')
if [ ! -x "$A64/rustweb/usr/bin/rustc" ] || [ "$(cat "$A64/rustweb/.version" 2>/dev/null)" != "$RV" ]; then
    [ -n "$RV" ] && [ "$RV" != "(none)" ] || { apt-get update -qq; RV=$(apt-cache policy rustc-web | awk '/Candidate:/{print $2}'); }
    STD=$(apt-cache depends libstd-rust-web-dev | awk '/Depends: libstd-rust-web-[0-9]/{print $2; exit}')
    LLVM=$(apt-cache depends rust-web-llvm | awk '/Depends: llvm-[0-9]/{sub("llvm-","libllvm",$2); print $2; exit}')
    rm -rf "$A64/rustdebs" "$A64/rustweb"; mkdir -p "$A64/rustdebs" "$A64/rustweb"
    (cd "$A64/rustdebs" && apt-get -o APT::Sandbox::User=root download -qq rustc-web="$RV" cargo-web="$RV" libstd-rust-web-dev="$RV" "$STD=$RV" \
        rust-web-llvm="$RV" "$LLVM" libgit2-1.5 libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1 \
        && arm64_apt apt-get download -qq libstd-rust-web-dev="$RV" "$STD=$RV")
    for d in "$A64"/rustdebs/*.deb; do dpkg-deb -x "$d" "$A64/rustweb"; done
    echo "$RV" > "$A64/rustweb/.version"
fi
RUSTWEB=$A64/rustweb/usr
export RUSTWEB
