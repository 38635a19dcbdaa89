#!/usr/bin/env bash
# `cargo` for aarch64-unknown-linux-gnu with Debian's rustc-web (set up by
# toolchain.sh): tests/aarch64/cargo.sh build --release --bin telco-stap
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
A64=${A64:-$ROOT/target/aarch64}
R=$A64/rustweb/usr
export LD_LIBRARY_PATH=$R/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CARGO_HOME=${CARGO_HOME:-$HOME/.cargo} RUSTC=$R/bin/rustc RUSTDOC=$R/bin/rustdoc
export CARGO_TARGET_DIR=$A64/cargo
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# A static binary: the guest (and a user's machine) needs no Rust libraries.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
cd "$ROOT"
exec "$R/bin/cargo" "$@" --target aarch64-unknown-linux-gnu
