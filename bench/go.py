#!/usr/bin/env python3
"""Probes on a Go function: telco-stap against bpftrace, in the same run.

    sudo python3 bench/go.py [--runs 5] [--calls 20000000] [--old BIN]

A Go program (built here with Debian's golang-go) times N calls of a
non-inlined Go function (`main.work`, which calls a leaf so that Go
checks its stack) with time.Now() and prints ns per call; the tracer's
start and end are never in the number. It runs untraced, under
telco-stap with a counter on the function's entry
(`probe process.function("main.work") { n++ }`), under an older
telco-stap build (`--old`), and under bpftrace with a uprobe counter on
the same function; then the same with a return probe beside the entry
probe (an entry+return pair: the return probe counts the call and
keeps its duration from an `@entry` save), against bpftrace's uprobe and
uretprobe. Every run's probe count is checked against N (a tool that
probed nothing cannot look cheap); a run that crashes is reported. Runs are interleaved (one run of
every tool, then the next round), so the machine's load spreads over all
of them; the cells are medians, with min-max.

Prints a Markdown table (the section for docs/PERFORMANCE.md)."""

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TELCO = REPO / "target" / "release" / "telco-stap"

PROGRAM = r"""
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

//go:noinline
func leaf(x int) int { return x ^ (x >> 3) }

//go:noinline
func work(x int) int { return leaf(x)*2 + 1 }

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	s := 0
	for i := 0; i < n/100; i++ {
		s += work(i)
	}
	t := time.Now()
	for i := 0; i < n; i++ {
		s += work(i)
	}
	d := time.Since(t)
	fmt.Printf("%.3f ns %d\n", float64(d.Nanoseconds())/float64(n), s&1)
}
"""


def build(work):
    (work / "main.go").write_text(PROGRAM)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "GOCACHE": str(work / "cache"),
           "GO111MODULE": "off", "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}
    subprocess.run(["go", "build", "-o", str(work / "gowork"), "."], cwd=work, env=env, check=True)
    return work / "gowork"


def run(cmd, calls):
    """ns per call the program printed, the probe count the tool printed
    (or None), and the returns its return probe counted (or None); None
    for the time when the program did not finish (it crashed)."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = re.search(r"([0-9.]+) ns", p.stdout)
    if not m:
        return None, p.stdout + p.stderr, None
    hits = re.search(r"(?:hits|@n): (\d+)", p.stdout)
    rets = re.search(r"(?:returns|@r): (\d+)", p.stdout)
    return float(m.group(1)), int(hits.group(1)) if hits else None, int(rets.group(1)) if rets else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20_000_000)
    ap.add_argument("--old", help="an older telco-stap build, measured in the same run")
    args = ap.parse_args()
    if not TELCO.exists():
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=REPO, check=True)
    n = args.calls
    with tempfile.TemporaryDirectory(prefix="telco-go-bench-") as d:
        work = Path(d)
        exe = str(build(work))
        script = 'global n probe process.function("main.work") { n++ } probe end { printf("hits: %d\\n", n) }'
        pair = ('global n, r, d probe process.function("main.work") { n++ } '
                'probe process.function("main.work").return { r++; d += gettimeofday_ns() - @entry(gettimeofday_ns()) } '
                'probe end { printf("hits: %d\\nreturns: %d\\n", n, r) }')
        tools = {"untraced": [exe, str(n)], "telco-stap": [str(TELCO), "-e", script, "-c", f"{exe} {n}"]}
        if args.old:
            tools["telco-stap (old)"] = [args.old, "-e", script, "-c", f"{exe} {n}"]
        if shutil.which("bpftrace"):
            tools["bpftrace"] = ["bpftrace", "-e", f'uprobe:{exe}:"main.work" {{ @n = count(); }}', "-c", f"{exe} {n}"]
        tools["telco-stap, entry+return"] = [str(TELCO), "-e", pair, "-c", f"{exe} {n}"]
        if shutil.which("bpftrace"):
            tools["bpftrace, entry+return"] = [
                "bpftrace", "-e",
                f'uprobe:{exe}:"main.work" {{ @n = count(); @t[tid] = nsecs; }} '
                f'uretprobe:{exe}:"main.work" {{ @r = count(); @d = sum(nsecs - @t[tid]); }}',
                "-c", f"{exe} {n}"]
        times = {t: [] for t in tools}
        counted = {t: [] for t in tools}
        crashed = {t: 0 for t in tools}
        want = n + n // 100
        for _ in range(args.runs):
            for tool, cmd in tools.items():
                ns, hits, rets = run(cmd, n)
                if ns is None:
                    if tool.startswith("telco-stap") or tool == "untraced":
                        sys.exit(f"{tool} failed:\n{hits}")
                    crashed[tool] += 1
                    continue
                if tool != "untraced" and hits is None:
                    sys.exit(f"{tool} printed no count")
                # telco-stap must count every call once, and every return
                # with an entry+return pair; a uprobe fires again when
                # Go's morestack starts the function over (a stack that
                # grows, a preemption request): shown.
                if tool.startswith("telco-stap") and (hits != want or (rets is not None and rets != want)):
                    sys.exit(f"{tool} counted {hits} calls and {rets} returns, not {want}")
                times[tool].append(ns)
                counted[tool].append(hits)
        base = statistics.median(times["untraced"])
        print(f"{n:,} calls of a Go function (`main.work`, {want:,} with the warm-up), ns per call: "
              f"median of {args.runs}, min-max\n")
        print("| tool | ns per call | added by the probe | calls counted (max) |")
        print("|---|---|---|---|")
        for tool, v in times.items():
            if not v:
                print(f"| {tool} | crashed in {crashed[tool]} of {args.runs} runs | | |")
                continue
            name = tool + (f" (crashed in {crashed[tool]} of {args.runs} runs)" if crashed[tool] else "")
            med = statistics.median(v)
            added = "" if tool == "untraced" else f"{med - base:.1f}"
            hits = "" if tool == "untraced" else f"{max(counted[tool]):,}"
            print(f"| {name} | {med:.2f} ({min(v):.2f}-{max(v):.2f}) | {added} | {hits} |")

if __name__ == "__main__":
    main()
