#!/usr/bin/env bash
# The aarch64 end-to-end tests (part of .ci/run, the README's test
# command): builds telco-stap for aarch64-unknown-linux-gnu, boots Debian's
# arm64 kernel under qemu-system-aarch64 (TCG) with a busybox initramfs,
# runs tests/aarch64/guest.sh there against target programs built with
# aarch64-linux-gnu-gcc, and checks the --chrome file on the host. Prints
# "aarch64: N passed, M failed"; exits 1 unless M is 0.
#   tests/aarch64/run.sh bench   runs tests/aarch64/bench.sh there instead
#                                (probe costs as ratios: docs/PERFORMANCE.md)
# Everything it sets up and builds lives in target/aarch64 (toolchain.sh).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/aarch64/toolchain.sh
source "$HERE/toolchain.sh"
step() { echo "[aarch64 $(date +%T)] $*"; }

step "cargo build --release --target aarch64-unknown-linux-gnu"
nice -n 5 "$HERE/cargo.sh" build --release --locked --bin telco-stap

step "target programs"
SHARE=$A64/share
rm -rf "$SHARE"; mkdir -p "$SHARE"
cp "$A64/cargo/aarch64-unknown-linux-gnu/release/telco-stap" "$SHARE/"
CC=aarch64-linux-gnu-gcc
# <sys/sdt.h> (systemtap-sdt-dev, installed by .ci/run) is the same text
# for every architecture, but Debian puts it in the x86_64 include folder.
SDT=$(dpkg -L systemtap-sdt-dev 2>/dev/null | grep '/sys/sdt.h$' | head -1 || true)
INC=$A64/include
rm -rf "$INC"; mkdir -p "$INC/sys"
[ -n "$SDT" ] && cp "$SDT" "$(dirname "$SDT")/sdt-config.h" "$INC/sys/"
$CC -O2 -g -pthread -I"$INC" ${SDT:+-DHAVE_SDT} -o "$SHARE/a64" "$HERE/programs/a64.c"
$CC -O2 -g -pthread -mbranch-protection=standard -o "$SHARE/a64bti" "$HERE/programs/a64.c"
$CC -O2 -g -pthread -static -o "$SHARE/a64static" "$HERE/programs/a64.c"
# C++ (the C++ runtime linked in: the guest has only the C library).
# No stack protector: its layout (the saved registers above the locals)
# would keep x30 at the top of big's frame, and the test of a record at
# the bottom would pass without the feature; checked below.
for v in throw:none throwpac:standard; do
    aarch64-linux-gnu-g++ -O2 -g -fno-stack-protector -mbranch-protection=${v#*:} -static-libstdc++ -static-libgcc \
        -o "$SHARE/${v%%:*}" "$HERE/programs/throw.cc"
    d=$(aarch64-linux-gnu-objdump -d --no-show-raw-insn "$SHARE/${v%%:*}")
    awk '/<_Z3bigi>:/ { f = 3 } f && f-- && /stp.*x29, x30, \[sp, #-256\]!/ { ok = 1 } END { exit !ok }' <<<"$d" \
        || { echo "big() in ${v%%:*} has no frame record at its bottom" >&2; exit 1; }
done
$CC -O2 -g -pthread -o "$SHARE/shapes" "$ROOT/tests/programs/itrace_shapes.c"
# Without frame pointers: the profile's unwinding goes by CFI, and through
# the probes' own code by the rows telco-stap derives for it.
$CC -O2 -g -fomit-frame-pointer -o "$SHARE/profile" "$ROOT/tests/programs/profile.c"
$CC -O2 -g -pthread -o "$SHARE/offcpu" "$ROOT/tests/programs/offcpu.c"
cp "$ROOT/tests/programs/profile.c" "$SHARE/"
$CC -O2 -g -o "$SHARE/stmt" "$HERE/programs/stmt.c"
$CC -O0 -g -o "$SHARE/args" "$HERE/programs/args.c"
$CC -O2 -g -o "$SHARE/loop" "$HERE/programs/loop.c"
$CC -O2 -g -pthread -o "$SHARE/traps" "$ROOT/tests/programs/traps.c"
$CC -O2 -g -pthread -o "$SHARE/flight" "$ROOT/tests/programs/flight.c"
# far_fn 256 MiB above the text (a section of its own, a segment of its own).
# Guarded by BTI: no startup files of the C library (far.c has its own).
$CC -O2 -g -no-pie -nostartfiles -mbranch-protection=standard -Wl,--section-start=far_text=0x10400000 \
    -o "$SHARE/far" "$HERE/programs/far.c"
$CC -O2 -g -o "$SHARE/host" "$ROOT/tests/programs/host.c" -ldl
$CC -O2 -g -shared -fPIC -o "$SHARE/libplugin.so" "$ROOT/tests/programs/plugin.c"
# Go programs (Debian's golang-go cross-builds for arm64 by itself; its
# cache in target/aarch64): with their symbols, and stripped.
gobuild() {
    out=$1; src=$2; shift 2
    rm -rf "$A64/gosrc"; mkdir -p "$A64/gosrc"; cp "$src" "$A64/gosrc/main.go"
    (cd "$A64/gosrc" && GOARCH=arm64 CGO_ENABLED=0 GO111MODULE=off GOPROXY=off GOFLAGS=-buildvcs=false \
        GOCACHE="$A64/gocache" HOME="$A64" go build "$@" -o "$out" .)
}
gobuild "$SHARE/gowork" "$ROOT/tests/programs/gowork.go"
gobuild "$SHARE/gospin" "$ROOT/tests/programs/gospin.go" -ldflags="-s -w"
rm -rf "$A64/gosrc"
if [ "${1:-}" = bench ]; then
    cp "$HERE/bench.sh" "$SHARE/guest.sh"
else
    cp "$HERE/guest.sh" "$SHARE/"
fi

step "initramfs"
RFS=$A64/rootfs
rm -rf "$RFS"; mkdir -p "$RFS"/{bin,sbin,proc,sys,dev,mnt,tmp,lib/modules}
cp "$A64/x/bb/bin/busybox" "$RFS/bin/"
cp "$HERE/init" "$RFS/init"
M=$A64/x/kernel/lib/modules/$KVER/kernel; i=0
# virtio-pci and 9p, in load order.
for m in drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci \
         net/9p/9pnet net/9p/9pnet_virtio fs/netfs/netfs fs/fscache/fscache fs/9p/9p; do
    [ -f "$M/$m.ko" ] || continue
    i=$((i + 1)); cp "$M/$m.ko" "$RFS/lib/modules/$(printf %02d $i)-$(basename "$m").ko"
done
for l in ld-linux-aarch64.so.1 libc.so.6 libm.so.6 libgcc_s.so.1; do
    cp -L "/usr/aarch64-linux-gnu/lib/$l" "$RFS/lib/"
done
python3 "$HERE/mkcpio.py" "$RFS" "$A64/initramfs.cpio"
gzip -1 -f "$A64/initramfs.cpio"

step "boot qemu-system-aarch64 and run the tests"
LOG=$A64/guest.log
# One CPU: with the host busy, a second virtual CPU makes ptrace stops
# far slower under TCG.
nice -n 5 timeout 1500 qemu-system-aarch64 -M virt -cpu max,pauth-impdef=on -smp 1 -m 2G -nographic -no-reboot \
    -nic none -kernel "$A64/x/kernel/boot/vmlinuz-$KVER" -initrd "$A64/initramfs.cpio.gz" \
    -append "console=ttyAMA0 quiet rdinit=/init" \
    -virtfs "local,path=$SHARE,mount_tag=share,security_model=none,id=share" < /dev/null > "$LOG" 2>&1 || true
if [ "${1:-}" = bench ]; then
    tr -d '\r' < "$LOG" | sed -n 's/^BENCH //p'
    grep -q 'GUEST: bench done' "$LOG"
    exit
fi
tr -d '\r' < "$LOG" | grep -E '^(ok|FAIL|  |== |GUEST)' || true
line=$(tr -d '\r' < "$LOG" | grep -a '^GUEST: ' | tail -1)
if [[ $line =~ ^GUEST:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    pass=${BASH_REMATCH[1]}; fail=${BASH_REMATCH[2]}
else
    echo "the guest did not finish; its console:"; tail -30 "$LOG"
    pass=0; fail=1
fi

# The --chrome file the guest wrote: JSON with one complete event per call.
if python3 - "$SHARE/calls.json" <<'PY'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"--chrome file unreadable: {e}")
events = doc["traceEvents"] if isinstance(doc, dict) else doc
calls = [e for e in events if e.get("ph") == "X" and e.get("name") == "work"]
if len(calls) != 300 or any(e["dur"] < 0 for e in calls):
    sys.exit(f"--chrome file: {len(calls)} calls of work, wanted 300")
PY
then pass=$((pass + 1)); echo "ok   --chrome validated (host)"; else fail=$((fail + 1)); echo "FAIL --chrome validated (host)"; fi

# The guest's .itrace file, read by the independent reader written from
# the format's description: Frida's arm64 register list, every block
# declared, the link register first in each record, and the writes
# replayed from the start values giving fib(10) = 55 in x0 at the end.
if python3 "$ROOT/tests/itrc_reader.py" "$SHARE/fib.itrc" > "$A64/fib.json" 2>"$A64/fib.err" && python3 - "$A64/fib.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
names = [r[0] for r in t["registers"]]
want = ["pc", "sp", "nzcv"] + [f"x{i}" for i in range(29)] + ["fp", "lr"] + [f"v{i}" for i in range(32)]
assert names == want, names
assert [r[1] for r in t["registers"]] == [8] * 34 + [16] * 32
assert t["python_json"] and t["end"] and t["lost"] is None, (t["python_json"], t["end"], t["lost"])
assert t["records"], "no records"
regs = {k: int(v, 16) for k, v in t["start"].items()}
for r in t["records"]:
    assert r["writes"][0][:2] == [0, "lr"], r["writes"][0]
    for off, name, value in r["writes"]:
        regs[name] = int(value, 16)
assert regs["x0"] == 55, regs["x0"]
print(f"{len(t['records'])} records, {len(t['blocks'])} blocks", file=sys.stderr)
PY
then pass=$((pass + 1)); echo "ok   .itrace read back by tests/itrc_reader.py (host)"
else fail=$((fail + 1)); echo "FAIL .itrace read back by tests/itrc_reader.py (host)"; cat "$A64/fib.err"; fi
if [ -x "$ROOT/target/release/telco-stap" ]; then
    if "$ROOT/target/release/telco-stap" itrc-dump "$SHARE/fib.itrc" > "$A64/fib.dump" 2>&1; then
        pass=$((pass + 1)); echo "ok   .itrace read by itrc-dump (host)"
    else fail=$((fail + 1)); echo "FAIL .itrace read by itrc-dump (host)"; head -5 "$A64/fib.dump"; fi
fi

# A trace the guest wrote, loaded into Perfetto's trace processor, the
# engine of ui.perfetto.dev (tests/chrome/check.sh, installed by the test
# command): accepted, with the 300 calls of work. viewer FILE WHAT.
viewer() {
    local out rc
    set +e
    out=$("$ROOT/tests/chrome/check.sh" "$1" 2>&1); rc=$?
    set -e
    if [ $rc -eq 77 ]; then
        echo "skip $2 in Perfetto's trace processor: not installed (tests/chrome/install.sh)"
    elif [ $rc -eq 0 ] && echo "$out" | python3 -c '
import json, sys
doc = json.load(sys.stdin)
sys.exit(sum(t["counts"].get("work", 0) for t in doc["threads"]) != 300)'; then
        pass=$((pass + 1)); echo "ok   $2 loaded by Perfetto's trace processor (host)"
    else
        fail=$((fail + 1)); echo "FAIL $2 loaded by Perfetto's trace processor (host)"; echo "$out" | head -5
    fi
}
viewer "$SHARE/calls.pftrace" --perfetto
# The flight recorder's dump at the fault: nested as called, the last
# slice the function that faulted, the fault an instant inside it.
if [ -f "$SHARE/crash.pftrace" ] && out=$("$ROOT/tests/chrome/check.sh" "$SHARE/crash.pftrace" 2>&1) \
    && echo "$out" | python3 -c '
import json, sys
t = json.load(sys.stdin)["threads"]
assert len(t) == 1, len(t)
d = t[0]["depth_counts"]
assert sorted(d) == ["SIGSEGV@1", "first@0", "fourth@0", "second@1", "third@2"], d
assert d["first@0"] + d["second@1"] + d["third@2"] == 41920, d
calls = [s for s in t[0]["slices"] if s["name"] != "SIGSEGV"]
assert max(calls, key=lambda s: s["ts_ns"])["name"] == "fourth"'; then
    pass=$((pass + 1)); echo "ok   --flight-recorder dump loaded by Perfetto's trace processor (host)"
else
    fail=$((fail + 1)); echo "FAIL --flight-recorder dump loaded by Perfetto's trace processor (host)"; echo "${out:-no file}" | head -5
fi
viewer "$SHARE/calls.json" --chrome

echo "aarch64: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
