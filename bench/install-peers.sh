#!/bin/sh
# Installs the peer tracers that bench/run compares telco-stap with, from the
# package registries: Debian's apt (bpftrace, systemtap, ltrace, uftrace,
# perf, sqlite3 for the real-program workload) and PyPI (frida, frida-tools).
# Every step may fail on its own; bench/run skips a peer that is missing and
# prints why. Run as root (apt) on Debian or Ubuntu.
set -u

status=0
step() {
    echo "== $*"
    "$@" || { echo "!! failed: $*"; status=1; }
}

if command -v apt-get >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    step apt-get update -q
    # One package at a time so that one missing name does not stop the rest.
    for pkg in gcc bpftrace systemtap ltrace uftrace sqlite3 libsqlite3-0; do
        step apt-get install -y -q --no-install-recommends "$pkg"
    done
    # perf is linux-perf on Debian, linux-tools-<kernel> on Ubuntu.
    if ! command -v perf >/dev/null 2>&1; then
        apt-get install -y -q --no-install-recommends linux-perf ||
            step apt-get install -y -q --no-install-recommends linux-tools-common "linux-tools-$(uname -r)"
    fi
else
    echo "!! no apt-get: install bpftrace, systemtap, ltrace, uftrace, perf and sqlite3 with your package manager"
    status=1
fi

PY=${PYTHON:-python3}
step "$PY" -m pip install -q --upgrade frida frida-tools

echo "== installed:"
for tool in bpftrace stap stapbpf ltrace uftrace perf sqlite3 frida; do
    printf '   %-9s %s\n' "$tool" "$(command -v "$tool" || echo missing)"
done
"$PY" -c 'import frida; print("   frida     python module", frida.__version__)' || status=1
exit $status
