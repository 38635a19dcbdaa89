#!/usr/bin/env python3
"""How long a hot --chrome session takes to end (docs/PERFORMANCE.md).

A gcc -O2 program calls work() in a loop as fast as it can; telco-stap
traces every call with --chrome for SECONDS (default 2), then gets SIGINT,
as a user's Ctrl-C. Printed: the time from SIGINT until telco-stap exits
(the rest of the trace written out), the file's size, and telco-stap's
stderr lines with the time each came (from the program's start).

    python3 bench/chrome_writeout.py [--binary target/release/telco-stap]
        [--seconds 2] [--dir DIR] [-- EXTRA telco-stap ARGS, e.g. --max-size 100G]

The trace goes to DIR (default: the system's temporary directory) and is
removed afterwards, as is the program.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HOT = r"""
#include <stdio.h>
static volatile long sink;
__attribute__((noinline)) long work(long x) { return x * 2 + 1; }
int main(void) {
    printf("ready\n");
    fflush(stdout);
    for (long i = 0;; i++) sink += work(i);
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="target/release/telco-stap")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="telco-writeout-", dir=a.dir)
    try:
        src, exe, out = (os.path.join(work, n) for n in ("hot.c", "hot", "out.json"))
        with open(src, "w") as f:
            f.write(HOT)
        subprocess.run(["gcc", "-O2", "-o", exe, src], check=True)
        p = subprocess.Popen(
            [a.binary, "-e", 'probe process.function("work") {}', "-c", exe, "--chrome", out] + a.extra,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        # Readiness: the program's first line, through telco-stap's stdout.
        assert p.stdout.readline().strip() == b"ready"
        t0 = time.time()
        lines = []

        def read_stderr():
            for line in p.stderr:
                lines.append((time.time() - t0, line.decode(errors="replace").rstrip()))

        reader = threading.Thread(target=read_stderr)
        reader.start()
        time.sleep(a.seconds)
        p.send_signal(signal.SIGINT)
        t1 = time.time()
        p.wait()
        t2 = time.time()
        reader.join()
        size = os.path.getsize(out)
        print(f"traced {t1 - t0:.2f} s; SIGINT to exit {t2 - t1:.2f} s; trace {size / 2**20:.1f} MiB; exit {p.returncode}")
        for t, line in lines:
            print(f"  {t:8.2f} s  {line}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
