#!/usr/bin/env python3
"""Whole services: probes by path against bpftrace's, in the same run.

    sudo python3 bench/services.py [--runs 5] [--procs 50] [--probes 100] [--execs 40] [--old BIN]

(1) Arming: 50 running processes of one program (bench/target.c `tick`),
    100 of its functions probed by path. telco-stap: from its start to the
    `-v` line that says every process is armed ("Pass 5: N more
    process(es) armed"); bpftrace: from its start to BEGIN's output
    (bpftrace runs BEGIN once every uprobe is attached). Both include
    compiling the script.
(2) A held exec: the wall time of `target run 1` (fork, exec, main, exit)
    with no tracer, while a telco-stap session by path probes `work` (its
    exec is held until the tracer has attached, then the program is
    armed before its first instruction), and while bpftrace probes
    `uprobe:BIN:work`. The added delay is the median difference.

Prints a Markdown table (the section for docs/PERFORMANCE.md). Runs are
interleaved, so the machine's load spreads over all tools."""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
TELCO = REPO / "target" / "release" / "telco-stap"


def build(work):
    with open(work / "funcs.h", "w") as f:
        for i in range(1000):
            f.write(f"__attribute__((noinline, used)) long f{i}(long x) {{ return x + {i}; }}\n")
    subprocess.run(["gcc", "-O2", "-I", str(work), "-o", str(work / "target"), str(BENCH / "target.c")], check=True)
    return work / "target"


def wait_for(stream, needle, timeout):
    """Read lines from `stream` until one contains `needle`: whether it came in time."""
    found = threading.Event()

    def reader():
        for line in stream:
            if needle in line:
                found.set()
                break
        for _ in stream:
            pass

    threading.Thread(target=reader, daemon=True).start()
    return found.wait(timeout)


def stop(p):
    p.send_signal(signal.SIGINT)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def arm_telco(binary, probes, telco=TELCO):
    script = " ".join(f'probe process("{binary}").function("f{i}") {{ }}' for i in range(probes))
    t0 = time.monotonic()
    p = subprocess.Popen([str(telco), "-v", "-e", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ok = wait_for(p.stderr, "more process(es) armed", 120)
    dt = time.monotonic() - t0
    stop(p)
    return dt if ok else None


def arm_bpftrace(binary, probes):
    points = ",".join(f"uprobe:{binary}:f{i}" for i in range(probes))
    script = f'BEGIN {{ printf("armed\\n"); }} {points} {{ @n = count(); }}'
    env = dict(os.environ, BPFTRACE_MAX_PROBES="4096")
    t0 = time.monotonic()
    p = subprocess.Popen(["bpftrace", "-e", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    ok = wait_for(p.stdout, "armed", 120)
    dt = time.monotonic() - t0
    stop(p)
    return dt if ok else None


def exec_times(binary, n):
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        subprocess.run([str(binary), "run", "1"], stdout=subprocess.DEVNULL, check=True)
        out.append(time.monotonic() - t0)
    return out


def session(argv, needle, on_stderr):
    """A tracer started with `argv`, once it printed `needle` (on its
    stderr or its stdout); None if it did not within a minute."""
    out = (subprocess.DEVNULL, subprocess.PIPE) if on_stderr else (subprocess.PIPE, subprocess.STDOUT)
    p = subprocess.Popen(argv, stdout=out[0], stderr=out[1], text=True)
    if not wait_for(p.stderr if on_stderr else p.stdout, needle, 60):
        stop(p)
        return None
    return p


def session_telco(binary, telco=TELCO):
    script = f'probe process("{binary}").function("work") {{ }}'
    return session([str(telco), "-v", "-e", script], "watching the processes of", True)


def session_bpftrace(binary):
    script = f'BEGIN {{ printf("armed\\n"); }} uprobe:{binary}:work {{ @n = count(); }}'
    return session(["bpftrace", "-e", script], "armed", False)


def ms(v):
    return f"{v * 1e3:.1f} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--procs", type=int, default=50)
    ap.add_argument("--probes", type=int, default=100)
    ap.add_argument("--execs", type=int, default=40)
    ap.add_argument("--old", type=Path, help="an older telco-stap build, measured in the same run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/services.py: run as root (fanotify, uprobes)")
    if not TELCO.exists():
        sys.exit(f"bench/services.py: build {TELCO} first (cargo build --release)")
    telcos = {"telco-stap": TELCO}
    if args.old:
        telcos["telco-stap (old)"] = args.old
    peers = list(telcos) + (["bpftrace"] if shutil.which("bpftrace") else [])
    work = Path(tempfile.mkdtemp(prefix="telco-services-"))
    try:
        binary = build(work)
        procs = []
        for _ in range(args.procs):
            p = subprocess.Popen([str(binary), "tick"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert p.stdout.readline() == "ready\n"
            procs.append(p)
        arm = {t: [] for t in peers}
        for _ in range(args.runs):
            for t in peers:
                if t in telcos:
                    arm[t].append(arm_telco(binary, args.probes, telcos[t]))
                else:
                    arm[t].append(arm_bpftrace(binary, args.probes))
        for p in procs:
            p.stdin.close()
            p.wait()
        delay = {"none": []}
        delay.update({t: [] for t in peers})
        for _ in range(args.runs):
            delay["none"] += exec_times(binary, args.execs)
            for t in peers:
                s = session_telco(binary, telcos[t]) if t in telcos else session_bpftrace(binary)
                if s is not None:
                    delay[t] += exec_times(binary, args.execs)
                    stop(s)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(delay["none"])
    print(f"| tool | arm {args.probes} probes in {args.procs} running processes (median, min–max of {args.runs}) "
          f"| a process started during the session: run time, added delay (median of {args.runs * args.execs}) |")
    print("|---|---|---|")
    print(f"| no tracer | — | {ms(base)} |")
    for t in peers:
        a = [x for x in arm[t] if x is not None]
        arm_text = f"{ms(statistics.median(a))} ({ms(min(a))}–{ms(max(a))})" if a else "failed"
        if len(a) < len(arm[t]):
            arm_text += f", {len(arm[t]) - len(a)} run(s) failed"
        d = delay[t]
        run_text = f"{ms(statistics.median(d))}, +{ms(statistics.median(d) - base)}" if d else "failed"
        print(f"| {t} | {arm_text} | {run_text} |")


if __name__ == "__main__":
    main()
