#!/usr/bin/env python3
"""telco-stap against its peers: one command, one run, one table.

    bench/run [--quick] [--runs N] [--tools a,b] [--workloads 1,2,...] [--no-doc]

Builds the C targets (gcc) and telco-stap (cargo build --release), runs
every workload untraced and under every tracer found on the machine
(bench/install-peers.sh installs them), and writes the median of several
runs, min-max and the ratios to the untraced run and to telco-stap into
docs/PERFORMANCE.md (between the bench markers) and bench/results.json.
bench/README.md says what each workload does under each tool.

Everything this script starts runs in its own process group with a
timeout; probes (perf probe, uprobe_events entries), mounts and processes it
created are removed before it exits, also on Ctrl-C.
"""

import argparse
import datetime
import gzip
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
TELCO = ROOT / "target" / "release" / "telco-stap"
DOC = ROOT / "docs" / "PERFORMANCE.md"
MARK_BEGIN = "<!-- bench/run: begin (generated, do not edit by hand) -->"
MARK_END = "<!-- bench/run: end -->"
TRACEFS = "/sys/kernel/tracing"
DEBUGFS = "/sys/kernel/debug"
PERF_GROUP = "telcobench"

TOOLS = ["untraced", "int3-floor", "telco-stap", "telco-stap-trap", "bpftrace", "stap", "stap-bpf", "frida-c", "frida-js", "uftrace", "perf", "ltrace"]
UPROBE_TOOLS = {"bpftrace", "stap", "stap-bpf", "perf"}
WORKLOADS = {
    "counter": "1",
    "hist": "2",
    "chrome": "3",
    "attach": "4",
    "sqlite": "5",
}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class Skip(Exception):
    """A tool cannot do a workload; the message says why (it goes in the table)."""


# ---------------------------------------------------------------- processes

LIVE = set()  # every Proc still running, killed at exit
PENDING = []  # tools tearing down in the background (uprobe detach is slow)


class Proc:
    """A subprocess in its own process group; its output lines are collected
    with the time they arrived, so readiness can be timed from the start."""

    def __init__(self, cmd, env=None, stdin=subprocess.DEVNULL, cwd=None, merge=True):
        self.cmd = [str(c) for c in cmd]
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(
            self.cmd,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        LIVE.add(self)
        self.lines = []  # (seconds since start, stream, text)
        self.cond = threading.Condition()
        self.readers = []
        for stream, name in ((self.p.stdout, "out"), (self.p.stderr, "err")):
            if stream is not None:
                t = threading.Thread(target=self._read, args=(stream, name), daemon=True)
                t.start()
                self.readers.append(t)

    def _read(self, stream, name):
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self.cond:
                self.lines.append((time.monotonic() - self.t0, name, line))
                self.cond.notify_all()
        with self.cond:
            self.lines.append((time.monotonic() - self.t0, name + "-eof", ""))
            self.cond.notify_all()

    def wait_line(self, pred, timeout):
        """The first line matching pred: (seconds since start, line), or None
        on timeout or when the process ends without one."""
        end = time.monotonic() + timeout
        seen = 0
        with self.cond:
            while True:
                while seen < len(self.lines):
                    t, stream, line = self.lines[seen]
                    seen += 1
                    if not stream.endswith("-eof") and pred(line):
                        return t, line
                eofs = sum(1 for _, s, _ in self.lines if s.endswith("-eof"))
                left = end - time.monotonic()
                if eofs == len(self.readers) or left <= 0:
                    return None
                self.cond.wait(min(left, 0.5))

    def text(self, stream=None):
        with self.cond:
            return "\n".join(l for _, s, l in self.lines if not s.endswith("-eof") and (stream is None or s == stream))

    def alive(self):
        """The group, not just its leader: stap's stapbpf child goes on
        detaching after stap itself has exited."""
        return self.p.poll() is None or bool(self.members())

    def members(self):
        """{pid: state} of the live processes in this process group."""
        out = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.p.pid and fields[0] != "Z":
                out[int(d)] = fields[0]
        return out

    def detaching(self):
        """A member in uninterruptible sleep: the kernel is unregistering
        uprobes (or something else that no signal can speed up)."""
        return "D" in self.members().values()

    def signal_group(self, sig):
        try:
            os.killpg(self.p.pid, sig)
        except ProcessLookupError:
            pass

    def close_stdin_and_finish(self, timeout=30):
        """An attach target that runs until its stdin closes: closed, and
        waited for (a target that does not end in time is killed)."""
        if self.alive():
            self.p.stdin.close()
            try:
                self.finish(timeout)
            except Skip:
                pass

    def finish(self, timeout):
        """Waits for the exit of the leader and of the rest of its group;
        past the timeout the whole group is killed and Skip is raised."""
        end = time.monotonic() + timeout
        try:
            rc = self.p.wait(timeout)
            while self.members():
                if time.monotonic() > end:
                    raise subprocess.TimeoutExpired(self.cmd, timeout)
                time.sleep(0.1)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Skip(f"timed out after {timeout:.0f} s")
        for t in self.readers:
            t.join(5)
        LIVE.discard(self)
        return rc

    def stop(self, grace=3.0, teardown=300.0, background=False, then=None, cell=None):
        """SIGINT to the group (tracers print their results and detach on
        it); a tool still sleeping after `grace` seconds gets SIGTERM, then
        SIGKILL (stapbpf sometimes sits in pause() through both). A tool in
        uninterruptible sleep is detaching (the kernel unregisters uprobes
        one by one): it gets `teardown` seconds, in the background when
        asked."""
        if not self.alive():
            return self.finish(5)
        self.signal_group(signal.SIGINT)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            end = time.monotonic() + grace
            while time.monotonic() < end and self.alive() and not self.detaching():
                time.sleep(0.05)
            if not self.alive() or self.detaching():
                break
            self.signal_group(sig)
        if background:
            PENDING.append((Then(self, then, cell), time.monotonic() + teardown))
            return None
        try:
            return self.finish(teardown)
        except Skip:
            return None

    def kill(self):
        self.signal_group(signal.SIGKILL)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            pass
        LIVE.discard(self)


class Then:
    """A clean-up step to run once a background detach is over (deleting the
    perf probe events a perf run used takes minutes too); it stands in the
    PENDING list like a process."""

    def __init__(self, proc, step=None, cell=None):
        self.cmd = proc.cmd
        self.proc = proc
        t0 = time.monotonic()

        def wait():
            try:
                proc.finish(1200)
            except Skip:
                pass
            if cell is not None:
                cell["extra"].setdefault("detach_s", []).append(round(time.monotonic() - t0, 1))
            if step:
                t1 = time.monotonic()
                step()
                if cell is not None:
                    cell["extra"].setdefault("delete_probes_s", []).append(round(time.monotonic() - t1, 1))

        self.thread = threading.Thread(target=wait, daemon=True)
        self.thread.start()

    def alive(self):
        return self.thread.is_alive()

    def finish(self, timeout):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise Skip(f"{self.cmd[0]} still running after {timeout:.0f} s")


def drain(reason=""):
    """Waits for tools detaching in the background."""
    if not PENDING:
        return
    t0 = time.monotonic()
    log(f"   waiting for {len(PENDING)} tool(s) to finish detaching {reason}")
    while PENDING:
        proc, deadline = PENDING.pop(0)
        try:
            proc.finish(max(1.0, deadline - time.monotonic()))
        except Skip:
            log(f"   {proc.cmd[0]} did not finish detaching; killed")
    log(f"   ... {time.monotonic() - t0:.0f} s")


def run(cmd, timeout, env=None, cwd=None, merge=False, stdin=subprocess.DEVNULL):
    """Runs a command to completion: (rc, stdout, stderr, seconds)."""
    p = Proc(cmd, env=env, cwd=cwd, merge=merge, stdin=stdin)
    rc = p.finish(timeout)
    return rc, p.text("out"), p.text("err"), time.monotonic() - p.t0


def sh(cmd, timeout=120, **kw):
    """A set-up command whose failure is fatal."""
    rc, out, err, _ = run(cmd, timeout, **kw)
    if rc != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({rc}):\n{out}\n{err}")
    return out


def tail(text, n=2):
    # stap ends every failure with a "Tip:" pointing at its README.
    lines = [l.strip() for l in text.strip().splitlines() if l.strip() and not l.startswith("Tip: ")]
    return " / ".join(lines[-n:]) if lines else "(no output)"


def elf_function_addresses(path):
    """The distinct addresses of the defined function symbols of an ELF file
    (the symbol table, or the dynamic one when it is stripped)."""
    addrs = set()
    for args in (["nm", "--defined-only"], ["nm", "-D", "--defined-only"]):
        rc, out, err, _ = run(args + [path], 60)
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TtWi":
                addrs.add(int(parts[0], 16))
        if addrs:
            break
    return sorted(addrs)


# ---------------------------------------------------------------- statistics

def stats(v):
    s = sorted(v)
    return statistics.median(s), s[0], s[-1]


# ---------------------------------------------------------------- the bench


class Bench:
    def __init__(self, args):
        self.a = args
        self.work = Path(tempfile.mkdtemp(prefix="telco-bench-"))
        self.mounted = []  # mount points this run created, unmounted at the end
        self.uprobe_events_before = None
        self.avail = {}  # tool -> None (usable) or the reason it is not
        self.versions = {}
        self.cells = []
        self.lib = None
        self.env = dict(os.environ)
        self.perf_groups = set()

    # ------------------------------------------------------------ set-up

    def build(self):
        log("== building")
        w = self.work
        with open(w / "funcs.h", "w") as f:
            for i in range(1000):
                f.write(f"__attribute__((noinline, used)) long f{i}(long x) {{ return x + {i}; }}\n")
        sh(["gcc", "-O2", "-I", w, "-o", w / "cost", BENCH / "target.c"])
        sh(["gcc", "-O2", "-o", w / "sqlite_load", BENCH / "sqlite_load.c", "-lsqlite3"])
        sh(["gcc", "-O2", "-shared", "-fPIC", "-o", w / "memlock.so", BENCH / "memlock.c", "-ldl"])
        ldd = sh(["ldd", w / "sqlite_load"])
        m = re.search(r"libsqlite3\.so\.0 => (\S+)", ldd)
        self.lib = os.path.realpath(m.group(1))
        # Cells with thousands of uprobes detach for minutes in the background
        # (see execute). They probe copies of the target and of the library:
        # other inodes, so no uprobe left registered on them can reach a
        # program measured meanwhile.
        self.heavy = w / "heavy"
        self.heavy.mkdir()
        shutil.copy2(w / "cost", self.heavy / "cost")
        shutil.copy2(self.lib, self.heavy / "libsqlite3.so.0")
        self.heavy_env = dict(self.env, LD_LIBRARY_PATH=str(self.heavy))
        if not self.a.no_cargo:
            log("   cargo build --release")
            rc, out, err, secs = run(["cargo", "build", "--release"], 3600, cwd=ROOT)
            if rc != 0:
                log(tail(err, 20))
        self.avail["telco-stap"] = None if TELCO.exists() else "cargo build --release failed"
        # The same binary, its probe forced onto a trap (-D TRAP_PROBES=1).
        self.avail["telco-stap-trap"] = self.avail["telco-stap"]
        self.avail["untraced"] = None
        self.avail["int3-floor"] = None

    def mount(self, fstype, where):
        if os.path.ismount(where):
            return True
        rc, out, err, _ = run(["mount", "-t", fstype, "nodev", where], 30)
        if rc == 0:
            self.mounted.append(where)
            return True
        self.mount_error = tail(out + err)
        return False

    def version(self, cmd):
        try:
            rc, out, err, _ = run(cmd, 30, merge=True)
            return out.strip().splitlines()[0] if out.strip() else "?"
        except (OSError, Skip):
            return "?"

    def detect(self):
        log("== peers")
        if os.path.exists(TRACEFS) and self.mount("tracefs", TRACEFS):
            try:
                self.uprobe_events_before = set(Path(TRACEFS, "uprobe_events").read_text().splitlines())
            except OSError:
                pass
        have = shutil.which
        # bpftrace
        if not have("bpftrace"):
            self.avail["bpftrace"] = "not installed (bench/install-peers.sh)"
        else:
            self.versions["bpftrace"] = self.version(["bpftrace", "--version"])
            rc, out, err, _ = run(["bpftrace", "-e", "BEGIN { printf(\"ok\\n\"); exit(); }"], 60)
            self.avail["bpftrace"] = None if "ok" in out else "bpftrace does not start: " + tail(err)
        # SystemTap: the kernel-module runtime, then the BPF runtime.
        if not have("stap"):
            self.avail["stap"] = self.avail["stap-bpf"] = "not installed (bench/install-peers.sh)"
        else:
            self.versions["stap"] = self.version(["stap", "-V"])
            try:
                rc, out, err, _ = run(["stap", "-e", "probe begin { println(\"ok\"); exit() }"], 240)
                ok = rc == 0 and "ok" in out
                why = tail(err)
            except Skip as e:
                ok, why = False, str(e)
            if ok:
                self.avail["stap"] = None
            else:
                config = self.kernel_config()
                if config is not None and "# CONFIG_MODULES is not set" in config:
                    why = "this kernel has no loadable modules (CONFIG_MODULES is not set); stap says: " + why
                self.avail["stap"] = "the kernel-module runtime cannot run: " + why
            self.avail["stap-bpf"] = self.setup_stapbpf()
        # Frida
        try:
            rc, out, err, _ = run([sys.executable, "-c", "import frida; print(frida.__version__)"], 60)
            if rc == 0:
                self.versions["frida"] = "frida " + out.strip()
                self.avail["frida-js"] = self.avail["frida-c"] = None
            else:
                self.avail["frida-js"] = self.avail["frida-c"] = "python module frida not installed (bench/install-peers.sh)"
        except Skip as e:
            self.avail["frida-js"] = self.avail["frida-c"] = str(e)
        for tool, vcmd in (("ltrace", ["ltrace", "-V"]), ("uftrace", ["uftrace", "--version"]), ("perf", ["perf", "--version"])):
            if not have(tool):
                self.avail[tool] = "not installed (bench/install-peers.sh)"
            else:
                self.versions[tool] = self.version(vcmd)
                self.avail[tool] = None
        if self.avail.get("perf") is None and not os.path.exists(Path(TRACEFS, "uprobe_events")):
            self.avail["perf"] = "no tracefs at /sys/kernel/tracing (perf probe needs uprobe_events)"
        if self.avail.get("bpftrace") is None and not os.path.ismount(TRACEFS):
            self.avail["bpftrace"] = "tracefs cannot be mounted"
        self.versions["telco-stap"] = self.version([TELCO, "--version"])
        self.versions["telco-stap-trap"] = self.versions["telco-stap"]
        only = set(self.a.tools.split(",")) if self.a.tools else None
        for t in TOOLS:
            self.avail.setdefault(t, "unknown")
            if only and t not in only and t != "untraced":
                self.avail[t] = self.avail[t] or "not selected (--tools)"
            state = "ok" if self.avail[t] is None else "skipped: " + self.avail[t]
            log(f"   {t:10} {self.versions.get(t.split('-')[0], '')[:40]:40} {state}")

    def kernel_config(self):
        try:
            with gzip.open("/proc/config.gz", "rt") as f:
                return f.read()
        except OSError:
            return None

    def setup_stapbpf(self):
        """SystemTap's BPF runtime (stapbpf) needs no kernel module, but stap
        still insists on a kernel build tree and stapbpf on raising
        RLIMIT_MEMLOCK to infinity (refused without CAP_SYS_RESOURCE, and
        unneeded since Linux 5.11, where BPF memory is charged to the cgroup).
        When the real tree is missing, a stand-in holds only what stap reads
        (.config, kernel.release, an empty Module.symvers), and an LD_PRELOAD
        shim turns that one setrlimit failure into success. stapbpf writes its
        uprobes through /sys/kernel/debug/tracing, so debugfs is mounted."""
        if not shutil.which("stapbpf"):
            return "stapbpf not installed"
        args = ["--runtime=bpf"]
        if not os.path.exists(f"/lib/modules/{os.uname().release}/build/.config"):
            config = self.kernel_config()
            if config is None:
                return "no kernel build tree and no /proc/config.gz to stand in for it"
            fake = self.work / "kernel-build"
            (fake / "include" / "config").mkdir(parents=True)
            (fake / ".config").write_text(config)
            (fake / "include" / "config" / "kernel.release").write_text(os.uname().release + "\n")
            (fake / "Module.symvers").write_text("")
            args += ["-r", str(fake)]
        if not os.path.exists(DEBUGFS + "/tracing/uprobe_events") and not self.mount("debugfs", DEBUGFS):
            return "debugfs cannot be mounted: " + self.mount_error
        if os.path.ismount(DEBUGFS + "/tracing") and DEBUGFS in self.mounted:
            self.mounted.insert(self.mounted.index(DEBUGFS) + 1, DEBUGFS + "/tracing")
        self.stap_args = args
        self.stap_env = dict(self.env, LD_PRELOAD=str(self.work / "memlock.so"))
        try:
            rc, out, err, _ = run(["stap"] + args + ["-e", "probe begin { println(\"ok\"); exit() }"], 240, env=self.stap_env)
        except Skip as e:
            return str(e)
        return None if "ok" in out else "stap --runtime=bpf fails: " + tail(err)

    # ------------------------------------------------------------ cells

    def add(self, workload, tool, n, runs, fn, how, heavy=False):
        self.cells.append(
            dict(workload=workload, tool=tool, n=n, runs=runs, fn=fn, how=how, heavy=heavy,
                 values=[], hits=[], extra={}, error=None)
        )

    def skip(self, workload, tool, why, how=""):
        self.cells.append(dict(workload=workload, tool=tool, n=None, runs=0, fn=None, how=how, heavy=False,
                               values=[], hits=[], extra={}, error=why))

    def runs(self, fast):
        if self.a.runs:
            return self.a.runs
        if self.a.quick:
            return 3 if fast else 1
        return 5 if fast else 3

    # Expected hits of work() in `cost run N`: N timed calls plus the warm-up.
    @staticmethod
    def expected(n):
        return n + min(n // 100, 100000)

    def target(self, n):
        return [str(self.work / "cost"), "run", str(n)]

    @staticmethod
    def parse_ns(text):
        m = re.search(r"^(\d+\.\d+) \d+$", text, re.M)
        if not m:
            raise Skip("no timing from the target: " + tail(text, 3))
        return float(m.group(1))

    def sample(self, cmd, timeout, hits_re=None, env=None, n=None):
        rc, out, err, _ = run(cmd, timeout, env=env)
        both = out + "\n" + err
        try:
            ns = self.parse_ns(out)
        except Skip:
            raise Skip(f"exit {rc}: " + tail(both, 3))
        hits = None
        if hits_re:
            m = re.search(hits_re, both, re.M)
            hits = int(m.group(1).replace(",", "")) if m else None
        return ns, hits, both

    def scale(self, n):
        return max(100, n // 4) if self.a.quick else n

    def plan(self):
        wl = set(self.a.workloads.split(",")) if self.a.workloads else set("12345")
        A = self.avail
        w = self.work
        cost = str(w / "cost")
        telco_counter = 'global n probe process.function("work") { n++ } probe end { printf("calls %d\\n", n) }'
        telco_hist = ('global lat probe process.function("work").return { lat <<< gettimeofday_ns() - @entry(gettimeofday_ns()) } '
                      'probe end { printf("calls %d\\n", @count(lat)); print(@hist_log(lat)) }')
        stap_counter = f'global n probe process("{cost}").function("work") {{ n++ }} probe end {{ printf("calls %d\\n", n) }}'
        stap_hist = (f'global lat probe process("{cost}").function("work").return {{ lat <<< gettimeofday_ns() - @entry(gettimeofday_ns()) }} '
                     'probe end { printf("calls %d\\n", @count(lat)); print(@hist_log(lat)) }')
        bt_counter = f"uprobe:{cost}:work {{ @n = count(); }}"
        bt_hist = (f"uprobe:{cost}:work {{ @start[tid] = nsecs; }} "
                   f"uretprobe:{cost}:work /@start[tid]/ {{ @lat = hist(nsecs - @start[tid]); delete(@start[tid]); @n = count(); }}")
        ev = '{\\"name\\":\\"work\\",\\"ph\\":\\"%s\\",\\"ts\\":%lld.%03lld,\\"pid\\":%d,\\"tid\\":%d},\\n'
        bt_chrome = (f'BEGIN {{ printf("[\\n"); }} '
                     f'uprobe:{cost}:work {{ $t = nsecs; printf("{ev}", "B", $t / 1000, $t % 1000, pid, tid); }} '
                     f'uretprobe:{cost}:work {{ $t = nsecs; printf("{ev}", "E", $t / 1000, $t % 1000, pid, tid); }}')
        frida = [sys.executable, BENCH / "frida_driver.py"]
        bt_env = dict(self.env, BPFTRACE_MAX_PROBES="4096")
        T = 600  # seconds: no single run comes near this unless it hangs

        def percall(workload, tool, n, runs, cmd_fn, hits_re, how, env=None, check=None, skip_prefix=""):
            if A.get(tool) is not None:
                self.skip(workload, tool, A[tool], how)
                return
            n = self.scale(n)

            def once(cell):
                cmd = cmd_fn(n)
                try:
                    ns, hits, text = self.sample(cmd, T, hits_re, env=env)
                    if check:
                        hits = check(cell, n)
                except Skip as e:
                    msg = str(e)
                    raise Skip(msg if msg.startswith(skip_prefix) else skip_prefix + msg)
                return ns, hits

            self.add(workload, tool, n, runs, once, how)

        R, r = self.runs(True), self.runs(False)

        # (1) and (2): per-call cost, the target times its own loop.
        for wk, telco_s, stap_s, bt_s, fw, ltrace_how, perf_mode in (
            ("counter", telco_counter, stap_counter, bt_counter, "counter", "-c: count calls", "stat"),
            ("hist", telco_hist, stap_hist, bt_hist, "hist", "-c: count calls and sum the time in each", "record"),
        ):
            if wk not in self.sel(wl):
                continue
            percall(wk, "untraced", 10_000_000, R, self.target, None, "no tracer")
            percall(wk, "telco-stap", 10_000_000, R, lambda n, s=telco_s: [TELCO, "-e", s, "-c", " ".join(self.target(n))],
                    r"^calls (\d+)", "the script, -c")
            if wk == "counter":
                percall(wk, "int3-floor", 1_000_000, R, lambda n: [cost, "int3", str(n)], None,
                        "no tracer: the program's own int3 before each call, an empty SIGTRAP handler (the kernel's "
                        "round trip: the least a trap costs)")
            percall(wk, "telco-stap-trap", 1_000_000, R,
                    lambda n, s=telco_s: [TELCO, "-D", "TRAP_PROBES=1", "-e", s, "-c", " ".join(self.target(n))],
                    r"^calls (\d+)", "the script, -c, -D TRAP_PROBES=1: a trap where the jump would go (SIGTRAP's handler in the target)")
            percall(wk, "bpftrace", 200_000 if wk == "counter" else 100_000, r,
                    lambda n, s=bt_s: ["bpftrace", "-e", s, "-c", " ".join(self.target(n))], r"^@n: (\d+)",
                    "uprobe" + (" + uretprobe, @start[tid] = nsecs; hist()" if wk == "hist" else ", @n = count()"), env=bt_env)
            self.stap_cell(wk, stap_s, r)
            for api in ("c", "js"):
                how = ("CModule" if api == "c" else "JavaScript") + (" onEnter { n++ }" if wk == "counter" else
                                                                       " onEnter/onLeave, clock_gettime, log2 histogram")
                n = {("c", "counter"): 2_000_000, ("c", "hist"): 1_000_000, ("js", "counter"): 300_000, ("js", "hist"): 100_000}[api, wk]
                percall(wk, "frida-" + api, n, r,
                        lambda n, api=api: frida + ["--api", api, "--workload", fw, "--spawn"] + self.target(n),
                        r"^frida: hits (\d+)", how)
            percall(wk, "uftrace", 1_000_000, r,
                    lambda n: ["uftrace", "record", "-d", w / "uftrace.data", "--no-libcall", "--no-event", "-P", "work"] + self.target(n),
                    None, "record -P work (dynamic patching): entry and exit timestamps of every call to a file",
                    check=lambda cell, n: self.uftrace_hits(w / "uftrace.data", "work"))
            percall(wk, "ltrace", 3_000, r,
                    lambda n: ["ltrace", "-L", "-c", "-x", "work"] + self.target(n), r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+) work$",
                    "-L -c -x work: breakpoints at entry and return, " + ltrace_how)
            self.perf_percall(wk, perf_mode, r)

        # (3): Chrome trace of every call.
        if "chrome" in self.sel(wl):
            percall("chrome", "untraced", 10_000_000, R, self.target, None, "no tracer")
            out = w / "chrome.json"
            percall("chrome", "telco-stap", 1_000_000, R,
                    lambda n: [TELCO, "-e", 'probe process.function("work") { }', "-c", " ".join(self.target(n)), "--chrome", out],
                    None, "--chrome out.json, probe process.function(\"work\") { }",
                    check=lambda cell, n: self.chrome_check(cell, out, n, telco=True), skip_prefix="not available in this build: ")
            percall("chrome", "bpftrace", 50_000, r,
                    lambda n: ["bpftrace", "-q", "-o", out, "-e", bt_chrome, "-c", " ".join(self.target(n))], None,
                    "printf of a B event (uprobe) and an E event (uretprobe) per call, -o file", env=bt_env,
                    check=lambda cell, n: self.chrome_check(cell, out, n))
            percall("chrome", "frida-js", 50_000, r,
                    lambda n: frida + ["--api", "js", "--workload", "chrome", "--chrome-out", out, "--spawn"] + self.target(n),
                    None, "JavaScript onEnter/onLeave build B/E events, batched through send() to a file",
                    check=lambda cell, n: self.chrome_check(cell, out, n))
            percall("chrome", "uftrace", 1_000_000, r,
                    lambda n: ["uftrace", "record", "-d", w / "uftrace.data", "--no-libcall", "--no-event", "-P", "work"] + self.target(n),
                    None, "record -P work, then uftrace dump --chrome (the dump is not timed)",
                    check=lambda cell, n: self.uftrace_chrome(cell, w / "uftrace.data", out, n))
            for tool, why in (
                ("frida-c", "no transport: a CModule callback cannot write events out without a buffer and a reader of its own (the JavaScript row does it)"),
                ("ltrace", "no Chrome output; its text trace (-T -tt) would need a converter"),
                ("perf", "no Chrome Trace Event writer (perf data convert writes CTF or its own JSON)"),
                ("stap", self.avail.get("stap") or "no Chrome output"),
                ("stap-bpf", self.avail.get("stap-bpf") or "no return probes in the BPF runtime, and no Chrome output"),
            ):
                self.skip("chrome", tool, A.get(tool) or why)

        if "attach" in self.sel(wl):
            self.plan_attach()
        if "sqlite" in self.sel(wl):
            self.plan_sqlite()

    def sel(self, wl):
        return {k for k, v in WORKLOADS.items() if v in wl}

    def stap_cell(self, wk, script, runs):
        if self.avail.get("stap") is None:
            tool, args, env = "stap", [], self.env
        else:
            self.skip(wk, "stap", self.avail["stap"])
            tool = "stap-bpf"
            if self.avail.get(tool) is not None:
                self.skip(wk, tool, self.avail[tool])
                return
            args, env = self.stap_args, self.stap_env
        n = self.scale(100_000)

        def once(cell):
            ns, hits, text = self.sample(["stap"] + args + ["-e", script, "-c", " ".join(self.target(n))], 600, r"^calls (\d+)", env=env)
            return ns, hits

        def guarded(cell):
            try:
                return once(cell)
            except Skip as e:
                raise Skip(self.stap_error(str(e)))

        self.add(wk, tool, n, runs, guarded, "the telco-stap script, process(PATH) prefix" + (", --runtime=bpf" if tool == "stap-bpf" else ""))

    @staticmethod
    def stap_error(text):
        m = re.search(r"semantic error: ([^/]*?)(?: \[man [^\]]*\])?(?: /|$)", text)
        return ("stap: " + m.group(1).strip()) if m else text

    def perf_percall(self, wk, mode, runs):
        if self.avail.get("perf") is not None:
            self.skip(wk, "perf", self.avail["perf"])
            return
        n = self.scale(100_000)
        cost = self.work / "cost"
        data = self.work / "perf.data"

        def once(cell):
            events = [f"{PERF_GROUP}:work=work"] + ([f"{PERF_GROUP}:work=work%return"] if mode == "record" else [])
            self.perf_add(cost, events)
            try:
                if mode == "stat":
                    cmd = ["perf", "stat", "-x", ",", "-e", f"{PERF_GROUP}:work", "--"] + self.target(n)
                else:
                    cmd = ["perf", "record", "-q", "-o", data, "-e", f"{PERF_GROUP}:work", "-e", f"{PERF_GROUP}:work__return", "--"] + self.target(n)
                ns, hits, text = self.sample(cmd, 600, r"^(\d+),,telcobench:work" if mode == "stat" else None)
                if mode == "record":
                    rc, out, err, _ = run(["perf", "script", "-i", data, "-F", "event"], 300)
                    hits = out.count(f"{PERF_GROUP}:work:")
                return ns, hits
            finally:
                self.perf_del()

        how = ("perf probe -x BIN work; perf stat -e the event (counted in the kernel)" if mode == "stat" else
               "perf probe work and work%return; perf record of both (timestamps; the histogram would be computed afterwards)")
        self.add(wk, "perf", n, runs, once, how)

    def perf_add(self, binary, events, chunk=100, group=PERF_GROUP):
        self.perf_groups.add(group)
        for i in range(0, len(events), chunk):
            args = []
            for e in events[i:i + chunk]:
                args += ["-a", e]
            rc, out, err, _ = run(["perf", "probe", "-q", "-x", binary] + args, 600)
            if rc != 0:
                raise Skip("perf probe: " + tail(out + err))

    def perf_del(self, group=PERF_GROUP):
        run(["perf", "probe", "-q", "-d", f"{group}:*"], 900)

    def uftrace_hits(self, data, func):
        rc, out, err, _ = run(["uftrace", "report", "-d", data, "-F", func, "--no-pager"], 300)
        for line in out.splitlines():
            parts = line.split()
            if parts and parts[-1] == func:
                return int(parts[-2])
        return None

    def count_events(self, path):
        """Chrome events in a trace file: X counts once per call, B and E once each."""
        counts = {"X": 0, "B": 0, "E": 0}
        pat = re.compile(rb'"ph"\s*:\s*"([XBE])"')
        tailbuf = b""
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 22)
                if not chunk:
                    break
                buf = tailbuf + chunk
                cut = buf.rfind(b"\n")
                if cut < 0:
                    tailbuf = buf
                    continue
                for m in pat.finditer(buf, 0, cut):
                    counts[m.group(1).decode()] += 1
                tailbuf = buf[cut:]
        for m in pat.finditer(tailbuf):
            counts[m.group(1).decode()] += 1
        return counts

    def chrome_check(self, cell, path, n, telco=False):
        if not path.exists() or path.stat().st_size == 0:
            if telco:
                raise Skip("telco-stap --chrome wrote no file")
            raise Skip("no trace file written")
        c = self.count_events(path)
        calls = c["X"] + min(c["B"], c["E"])
        cell["extra"].setdefault("bytes", []).append(path.stat().st_size)
        cell["extra"].setdefault("events", []).append(c)
        path.unlink()
        if telco and calls == 0:
            raise Skip("telco-stap --chrome wrote no call events")
        return calls

    def uftrace_chrome(self, cell, data, out, n):
        t0 = time.monotonic()
        # The dump is large: straight to the file, not through a pipe.
        with open(out, "wb") as f:
            p = subprocess.Popen(["uftrace", "dump", "-d", str(data), "--chrome"], stdout=f, stderr=subprocess.DEVNULL,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                rc = p.wait(600)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                raise Skip("uftrace dump --chrome timed out")
        cell["extra"].setdefault("dump_seconds", []).append(round(time.monotonic() - t0, 2))
        if rc != 0:
            raise Skip("uftrace dump --chrome failed")
        return self.chrome_check(cell, out, n)

    # ------------------------------------------------------------ (4) attach

    def plan_attach(self):
        A = self.avail
        names = {1: ["work"], 1000: [f"f{i}" for i in range(1000)]}
        R, r = self.runs(True), self.runs(False)
        for k in (1, 1000):
            funcs = names[k]
            wk = f"attach{k}"
            cost = str(self.heavy / "cost" if k > 1 else self.work / "cost")
            pts = ", ".join(f'process.function("{f}")' for f in funcs)
            telco = f'global n probe begin {{ println("armed") }} probe {pts} {{ if (n++ == 0) println("hit") }}'
            self.attach_cell(wk, "telco-stap", k, R, lambda pid, s=telco: [TELCO, "-p", pid, "-e", s], "armed", "hit",
                             "begin probe prints; the first hit prints")
            bt = ('BEGIN { printf("armed\\n"); } ' + ", ".join(f"uprobe:{cost}:{f}" for f in funcs) +
                  ' { if (@n == 0) { printf("hit\\n"); } @n = 1; }')
            self.attach_cell(wk, "bpftrace", k, r if k == 1 else 1, lambda pid, s=bt: ["bpftrace", "-p", pid, "-e", s], "armed", "hit",
                             "BEGIN prints (after attaching); the first hit prints", env=dict(self.env, BPFTRACE_MAX_PROBES="4096"),
                             heavy=k > 1, target=cost)
            stap_pts = ", ".join(f'process("{cost}").function("{f}")' for f in funcs)
            stap = f'global n probe begin {{ println("armed") }} probe {stap_pts} {{ if (n++ == 0) println("hit") }}'
            if A.get("stap") is None:
                self.attach_cell(wk, "stap", k, r if k == 1 else 1, lambda pid, s=stap: ["stap", "-x", pid, "-e", s], "armed", "hit",
                                 "begin probe prints; the first hit prints", heavy=k > 1, target=cost)
            else:
                self.skip(wk, "stap", A["stap"])
                if A.get("stap-bpf") is None:
                    self.attach_cell(wk, "stap-bpf", k, r if k == 1 else 1,
                                     lambda pid, s=stap: ["stap"] + self.stap_args + ["-x", pid, "-e", s], "armed", "hit",
                                     "begin probe prints; the first hit prints", env=self.stap_env, heavy=k > 1, target=cost)
                else:
                    self.skip(wk, "stap-bpf", A["stap-bpf"])
            for api in ("c", "js"):
                self.attach_cell(wk, "frida-" + api, k, r,
                                 lambda pid, api=api: [sys.executable, BENCH / "frida_driver.py", "--api", api, "--workload", "counter",
                                                       "--symbols", ",".join(funcs), "--pid", pid],
                                 "armed", None, "the driver prints once script.load() returned (every Interceptor.attach done)")
            self.attach_cell(wk, "ltrace", k, r,
                             lambda pid, f=("work" if k == 1 else "f[0123456789]*@MAIN"): ["ltrace", "-L", "-p", pid, "-x", f],
                             None, lambda l: re.match(r"^\[?(pid \d+\] )?(work|f0)\(", l) is not None,
                             "no ready message: the first traced call printed")
            self.perf_attach(wk, funcs, r if k == 1 else 1, heavy=k > 1, target=cost)
            self.skip(wk, "uftrace", A.get("uftrace") or "cannot attach to a running process (uftrace record starts the program)")

    def slow_ok(self, wk, tool, heavy, how):
        """--quick leaves out perf's and SystemTap's cells with thousands of
        uprobes (bpftrace's show what they cost)."""
        if heavy and tool in ("perf", "stap", "stap-bpf") and self.a.quick:
            self.skip(wk, tool, "not run with --quick: detaching thousands of uprobes takes minutes "
                      "(see the bpftrace row)", how)
            return False
        return True

    def attach_cell(self, wk, tool, k, runs, cmd_fn, ready, hit, how, env=None, heavy=False, target=None):
        if self.avail.get(tool) is not None:
            self.skip(wk, tool, self.avail[tool], how)
            return
        if not self.slow_ok(wk, tool, heavy, how):
            return
        exe = target or str(self.work / "cost")

        def once(cell):
            target = Proc([exe, "tick"], stdin=subprocess.PIPE)
            try:
                if target.wait_line(lambda l: l == "ready", 30) is None:
                    raise Skip("target did not start")
                tool_p = Proc(cmd_fn(str(target.p.pid)), env=env)
                try:
                    rd = hit_t = None
                    if ready:
                        got = tool_p.wait_line(lambda l: l.strip() == ready, 300)
                        if got is None:
                            raise Skip("no ready message: " + tail(tool_p.text(), 3))
                        rd = got[0]
                    if hit:
                        pred = hit if callable(hit) else (lambda l: l.strip() == hit)
                        got = tool_p.wait_line(pred, 300)
                        if got is None:
                            raise Skip("no hit seen: " + tail(tool_p.text(), 3))
                        hit_t = got[0]
                    cell["extra"].setdefault("first_hit_ms", []).append(None if hit_t is None else hit_t * 1e3)
                    value = (rd if rd is not None else hit_t) * 1e3
                finally:
                    t0 = time.monotonic()
                    tool_p.stop(background=heavy, cell=cell)
                    if not heavy:
                        cell["extra"].setdefault("detach_s", []).append(round(time.monotonic() - t0, 2))
                return value, None
            finally:
                target.close_stdin_and_finish()

        self.add(wk, tool, k, runs, once, how, heavy=heavy)

    def perf_attach(self, wk, funcs, runs, heavy, target):
        how = "perf probe -a each function, then perf stat -I 10 -p PID: the first interval with a count (10 ms steps)"
        if self.avail.get("perf") is not None:
            self.skip(wk, "perf", self.avail["perf"], how)
            return
        if not self.slow_ok(wk, "perf", heavy, how):
            return
        first = funcs[0]
        exe = target
        # Heavy cells' events are deleted in the background (minutes for
        # thousands), under a group of their own.
        group = PERF_GROUP + ("_attach" if heavy else "")

        def once(cell):
            target = Proc([exe, "tick"], stdin=subprocess.PIPE)
            try:
                if target.wait_line(lambda l: l == "ready", 30) is None:
                    raise Skip("target did not start")
                t0 = time.monotonic()
                self.perf_add(exe, [f"{group}:{f}={f}" for f in funcs], group=group)
                added = time.monotonic() - t0
                stat = Proc(["perf", "stat", "-I", "10", "-x", ",", "-p", str(target.p.pid), "-e", f"{group}:*"])
                pat = re.compile(rf"^\s*[\d.]+,(\d+),,{group}:{first},")
                got = stat.wait_line(lambda l: bool(pat.match(l)) and pat.match(l).group(1) != "0", 300)
                t1 = time.monotonic()
                stat.stop(background=heavy, then=(lambda: self.perf_del(group)) if heavy else None, cell=cell)
                if got is None:
                    raise Skip("no count seen: " + tail(stat.text(), 3))
                value = (added + got[0]) * 1e3
                cell["extra"].setdefault("perf_probe_ms", []).append(round(added * 1e3, 1))
                cell["extra"].setdefault("first_hit_ms", []).append(value)
                if not heavy:
                    self.perf_del()
                    cell["extra"].setdefault("detach_s", []).append(round(time.monotonic() - t1, 2))
                return value, None
            finally:
                target.close_stdin_and_finish()

        self.add(wk, "perf", len(funcs), runs, once, how, heavy=heavy)

    # ------------------------------------------------------------ (5) sqlite

    def plan_sqlite(self):
        A = self.avail
        lib = self.lib
        load = self.work / "sqlite_load"
        R, r = self.runs(True), self.runs(False)
        rows = {"untraced": 20000, "telco-stap": 20000, "frida-c": 2000, "frida-js": 500, "uftrace": 2000,
                "bpftrace": 500, "stap": 500, "stap-bpf": 500, "perf": 500, "ltrace": 50}
        rows = {k: self.scale(v) if self.a.quick else v for k, v in rows.items()}
        for n in sorted(set(rows.values())):
            self.sqlite_cell("untraced", n, R, lambda n: [load, n], None, "no tracer")
        self.sqlite_cell("telco-stap", rows["telco-stap"], R,
                         lambda n: [TELCO, "-e", f'global n probe process("{lib}").function("*") {{ n++ }} probe end {{ printf("calls %d\\n", n) }}',
                                    "-c", f"{load} {n}"], r"^calls (\d+)", 'process("libsqlite3.so.0").function("*") { n++ }')
        hlib = str(self.heavy / "libsqlite3.so.0")
        self.sqlite_cell("bpftrace", rows["bpftrace"], 1,
                         lambda n: ["bpftrace", "-e", f"uprobe:{hlib}:* {{ @n = count(); }}", "-c", f"{load} {n}"], r"^@n: (\d+)",
                         "uprobe:LIB:* { @n = count(); }", env=dict(self.heavy_env, BPFTRACE_MAX_PROBES="4096"), heavy=True)
        stap = f'global n probe process("{hlib}").function("*") {{ n++ }} probe end {{ printf("calls %d\\n", n) }}'
        if A.get("stap") is None:
            self.sqlite_cell("stap", rows["stap"], 1, lambda n: ["stap", "-e", stap, "-c", f"{load} {n}"], r"^calls (\d+)",
                             "the telco-stap script", env=self.heavy_env, heavy=True)
        else:
            self.skip("sqlite", "stap", A["stap"])
            self.sqlite_cell("stap-bpf", rows["stap-bpf"], 1,
                             lambda n: ["stap"] + self.stap_args + ["-e", stap, "-c", f"{load} {n}"], r"^calls (\d+)",
                             "the telco-stap script, --runtime=bpf",
                             env=dict(getattr(self, "stap_env", self.env), LD_LIBRARY_PATH=str(self.heavy)), heavy=True)
        for api in ("c", "js"):
            self.sqlite_cell("frida-" + api, rows["frida-" + api], r,
                             lambda n, api=api: [sys.executable, BENCH / "frida_driver.py", "--api", api, "--workload", "counter",
                                                 "--module-prefix", "libsqlite3.so", "--spawn", load, str(n)],
                             r"^frida: hits (\d+)", ("CModule" if api == "c" else "JavaScript") + " onEnter { n++ } on every function symbol")
        data = self.work / "uftrace-sqlite.data"
        self.sqlite_cell("uftrace", rows["uftrace"], r,
                         lambda n: ["uftrace", "record", "-d", data, "--no-libcall", "--no-event", "-P", ".@libsqlite3.so.0", load, n],
                         None, "record -P .@libsqlite3.so.0 (every function it can patch)",
                         check=lambda: self.uftrace_total(data))
        self.sqlite_cell("ltrace", rows["ltrace"], r,
                         lambda n: ["ltrace", "-L", "-c", "-x", "@libsqlite3.so.0", load, n], r"^100\.00\s+[\d.]+\s+(\d+) total",
                         "-L -c -x @libsqlite3.so.0")
        self.perf_sqlite(rows["perf"])

    def sqlite_cell(self, tool, n, runs, cmd_fn, hits_re, how, env=None, heavy=False, check=None):
        wk = "sqlite"
        if self.avail.get(tool) is not None:
            self.skip(wk, tool, self.avail[tool], how)
            return
        if not self.slow_ok(wk, tool, heavy, how):
            return

        def once(cell):
            cmd = cmd_fn(str(n))
            p = Proc(cmd, env=env, merge=False)
            try:
                got = p.wait_line(lambda l: re.match(r"^\d+\.\d+ \d+ \d+$", l) is not None, 900)
                if got is None:
                    if p.alive():
                        PENDING.append((Then(p, None, cell), time.monotonic() + 1200))
                    raise Skip(self.stap_error(tail(p.text(), 3)))
                secs = float(got[1].split()[0])
                if heavy:
                    # The program is done; the tool detaches, which for uprobe
                    # tools takes minutes (the kernel unregisters them one by
                    # one), and prints its results: read after the drain.
                    PENDING.append((Then(p, None, cell), time.monotonic() + 1200))
                    cell["extra"]["hits_from"] = (p, hits_re)
                    return secs, None
                p.finish(900)
            finally:
                if p.alive() and all(p is not getattr(q, "proc", q) for q, _ in PENDING):
                    p.kill()
            text = p.text()
            hits = None
            if hits_re:
                m = re.search(hits_re, text, re.M)
                hits = int(m.group(1)) if m else None
            if check:
                hits = check()
            return secs, hits

        self.add(wk, tool, n, runs, once, how, heavy=heavy)

    def uftrace_total(self, data):
        rc, out, err, _ = run(["uftrace", "report", "-d", data, "--no-pager"], 300)
        total = 0
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 6 and parts[-2].isdigit():
                total += int(parts[-2])
        return total

    def perf_sqlite(self, n):
        how = "perf probe -x LIB at the address of every function symbol; perf stat -e all of them"
        if self.avail.get("perf") is not None:
            self.skip("sqlite", "perf", self.avail["perf"], how)
            return
        if not self.slow_ok("sqlite", "perf", True, how):
            return
        load = self.work / "sqlite_load"
        lib = str(self.heavy / "libsqlite3.so.0")

        def once(cell):
            # By address: given a name, perf probe also puts a probe on the
            # function's PLT stub, which counts every call through the PLT
            # twice (measured: 506 hits of sqlite3VdbeExec for 253 calls).
            addrs = elf_function_addresses(lib)
            group = PERF_GROUP + "_lib"
            self.perf_groups.add(group)
            events = [f"{group}:p{i}={a:#x}" for i, a in enumerate(addrs)]
            t0 = time.monotonic()
            failed = 0
            for i in range(0, len(events), 100):
                args = []
                for e in events[i:i + 100]:
                    args += ["-a", e]
                rc, o, e, _ = run(["perf", "probe", "-q", "-f", "-x", lib] + args, 900)
                if rc != 0:
                    # One bad function fails its whole batch: add that batch one by one.
                    for e1 in events[i:i + 100]:
                        rc1, _, _, _ = run(["perf", "probe", "-q", "-x", lib, "-a", e1], 120)
                        failed += rc1 != 0
            cell["extra"]["probes"] = len(events) - failed
            cell["extra"]["perf_probe_s"] = round(time.monotonic() - t0, 1)
            p = Proc(["perf", "stat", "-x", ",", "-e", f"{group}:*", "--", load, str(n)], merge=False, env=self.heavy_env)
            got = p.wait_line(lambda l: re.match(r"^\d+\.\d+ \d+ \d+$", l) is not None, 900)
            if got is None:
                p.kill()
                raise Skip("no timing: " + tail(p.text(), 3))
            secs = float(got[1].split()[0])
            PENDING.append((Then(p, lambda: self.perf_del(group), cell), time.monotonic() + 1200))
            cell["extra"]["perf_stat"] = p
            return secs, None

        self.add("sqlite", "perf", n, 1, once, how, heavy=True)

    # ------------------------------------------------------------ running

    def execute(self):
        """The schedule. Light cells run in rounds (one run of each cell per
        round), so that noise from the rest of the machine spreads over every
        tool instead of landing on one. A heavy cell (thousands of uprobes)
        runs alone, with no other tool detaching; the minutes its detach takes
        are spent measuring tools that use no uprobes (their targets and
        libraries are other files, see build). Uprobe tools' light cells run
        last, once every detach is over."""
        todo = [c for c in self.cells if c["fn"]]
        heavy = [c for c in todo if c["heavy"]]
        light = [c for c in todo if not c["heavy"]]
        free = [c for c in light if c["tool"] not in UPROBE_TOOLS]
        uprobe = [c for c in light if c["tool"] in UPROBE_TOOLS]
        self.total = sum(c["runs"] for c in todo)
        self.done = 0
        self.t_start = time.monotonic()

        def rounds(cells):
            for _ in range(max([c["runs"] for c in cells] + [0])):
                for c in cells:
                    if not c["error"] and len(c["values"]) < c["runs"]:
                        yield c

        free_runs = rounds(free)
        for h in heavy:
            for _ in range(h["runs"]):
                drain("before a heavy cell")
                if h["error"]:
                    break
                self.one(h)
                while PENDING and any(p.alive() for p, _ in PENDING):
                    c = next(free_runs, None)
                    if c is None:
                        break
                    self.one(c)
        for c in free_runs:
            self.one(c)
        drain("before the uprobe tools' cells")
        for c in rounds(uprobe):
            self.one(c)

    def one(self, c):
        self.done += 1
        done, total, t_start = self.done, self.total, self.t_start
        label = f"({WORKLOADS.get(c['workload'].rstrip('0123456789'), '?')}) {c['workload']:10} {c['tool']:10} n={c['n']}"
        t0 = time.monotonic()
        try:
            value, hits = c["fn"](c)
            c["values"].append(value)
            c["hits"].append(hits)
            log(f"   [{done}/{total} {time.monotonic() - t_start:5.0f}s] {label}: {value:.3f}" + (f" hits={hits}" if hits is not None else "") +
                f" ({time.monotonic() - t0:.1f}s)")
        except Skip as e:
            c["error"] = str(e)
            log(f"   [{done}/{total}] {label}: cannot: {e}")

    # ------------------------------------------------------------ cleanup

    def cleanup(self):
        waited = {id(q.proc) for q, _ in PENDING if isinstance(q, Then)} | {id(q) for q, _ in PENDING}
        for p in list(LIVE):
            if id(p) not in waited:
                p.kill()
        drain("before cleaning up")
        for p in list(LIVE):
            p.kill()
        if self.perf_groups and shutil.which("perf"):
            for g in self.perf_groups:
                try:
                    run(["perf", "probe", "-q", "-d", f"{g}:*"], 600)
                except Skip:
                    pass
        self.clean_uprobe_events()
        self.kill_strays()
        for where in reversed(self.mounted):
            for attempt in range(10):
                if not os.path.ismount(where):
                    break
                rc, out, err, _ = run(["umount", where], 60)
                if rc == 0:
                    break
                time.sleep(1)
            else:
                log(f"!! could not unmount {where}: {tail(out + err)}")
        if not self.a.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def clean_uprobe_events(self):
        """uprobe_events lines this run left (stapbpf does not always remove
        its own) are deleted; lines that were there before are kept."""
        path = Path(TRACEFS, "uprobe_events")
        if not path.exists():
            path = Path(DEBUGFS, "tracing", "uprobe_events")
        if not path.exists():
            return
        before = self.uprobe_events_before or set()
        try:
            now = path.read_text().splitlines()
        except OSError:
            return
        for line in now:
            if line in before:
                continue
            m = re.match(r"^[pr]:(\S+)", line)
            if m:
                try:
                    # os.open: Python's "a" mode seeks, which tracefs refuses.
                    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                    try:
                        os.write(fd, f"-:{m.group(1)}\n".encode())
                    finally:
                        os.close(fd)
                except OSError as e:
                    log(f"!! could not remove uprobe event {m.group(1)}: {e}")

    def kill_strays(self):
        """Targets that outlived their tracer (a spawned child of a killed
        tool), found by their executable in this run's directory."""
        mine = {str(self.work / "cost"), str(self.work / "heavy" / "cost"), str(self.work / "sqlite_load")}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                exe = os.readlink(f"/proc/{d}/exe")
            except OSError:
                continue
            if exe in mine:
                try:
                    os.kill(int(d), signal.SIGKILL)
                    log(f"   killed a stray target, pid {d}")
                except ProcessLookupError:
                    pass

    # ------------------------------------------------------------ results

    def finish_cells(self):
        """After the drain: hits that are only known once a tool has exited."""
        for c in self.cells:
            p = c["extra"].pop("perf_stat", None)
            if p is not None:
                total = 0
                c["extra"]["hits_note"] = "summed from perf stat's output after the detach"
                for line in p.text("err").splitlines():
                    parts = line.split(",")
                    if len(parts) > 2 and parts[2].startswith(PERF_GROUP) and parts[0].isdigit():
                        total += int(parts[0])
                c["hits"] = [total or None]
            hf = c["extra"].pop("hits_from", None)
            if hf is not None:
                p, hits_re = hf
                m = re.search(hits_re, p.text(), re.M) if hits_re else None
                c["hits"] = [int(m.group(1)) if m else None]


    def summarize(self):
        out = []
        by = {}
        for c in self.cells:
            by.setdefault(c["workload"], {})
            by[c["workload"]].setdefault(c["tool"], []).append(c)
        for c in self.cells:
            s = {k: c[k] for k in ("workload", "tool", "n", "runs", "how", "values", "hits", "error")}
            s["extra"] = c["extra"]
            if c["values"]:
                med, lo, hi = stats(c["values"])
                s.update(median=med, min=lo, max=hi)
            out.append(s)
        return out

    def result_index(self, cells):
        idx = {}
        for c in cells:
            idx.setdefault((c["workload"], c["tool"]), []).append(c)
        return idx

    def write(self, cells, seconds):
        meta = {
            "date": datetime.date.today().isoformat(),
            "kernel": platform.release(),
            "cpu": self.cpu(),
            "cores": os.cpu_count(),
            "command": "bench/run" + (" --quick" if self.a.quick else ""),
            "seconds": round(seconds),
            "versions": self.versions,
            "tools": {t: ("ok" if self.avail.get(t) is None else self.avail[t]) for t in TOOLS},
        }
        res = {"meta": meta, "cells": cells}
        json_path = Path(self.a.json)
        json_path.write_text(json.dumps(res, indent=1, default=str) + "\n")
        md = render(res)
        if not self.a.no_doc:
            write_doc(md)
        print(md)

    @staticmethod
    def cpu():
        try:
            for line in open("/proc/cpuinfo"):
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return platform.processor()


# ---------------------------------------------------------------- markdown


def write_doc(md):
    """Replaces the generated section of docs/PERFORMANCE.md, keeping the rest."""
    doc = DOC.read_text()
    if MARK_BEGIN in doc and MARK_END in doc:
        pre, rest = doc.split(MARK_BEGIN, 1)
        _, post = rest.split(MARK_END, 1)
        doc = pre + MARK_BEGIN + "\n" + md + MARK_END + post
    else:
        doc = doc.rstrip("\n") + "\n\n" + MARK_BEGIN + "\n" + md + MARK_END + "\n"
    DOC.write_text(doc)


def fmt(x, digits=None):
    if x is None:
        return "—"
    if digits is None:
        digits = 2 if abs(x) < 10 else 1 if abs(x) < 1000 else 0
    s = f"{x:,.{digits}f}"
    return s


def count(n):
    if n is None:
        return "—"
    if n >= 1_000_000 and n % 100_000 == 0:
        return f"{n / 1_000_000:g} M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000} k"
    return f"{n:,}"


def ratio(x):
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:,.0f}×"
    if x >= 10:
        return f"{x:.1f}×"
    return f"{x:.2f}×"


def render(res):
    cells = res["cells"]
    meta = res["meta"]
    idx = {}
    for c in cells:
        idx.setdefault(c["workload"], []).append(c)
    # A tool that cannot run at all says why once, in the tool list.
    for c in cells:
        if c["error"] and c["error"] == meta["tools"].get(c["tool"]):
            c["error"] = "unavailable (see the tool list)"
    L = []
    L.append(f"Measured {meta['date']} by `{meta['command']}` in one run of {meta['seconds'] // 60} min {meta['seconds'] % 60} s "
             f"on {meta['cores']} cores ({meta['cpu']}), Linux {meta['kernel']}. "
             "Raw numbers: `bench/results.json`; what each tool runs: `bench/README.md`.")
    L.append("")
    L.append("| tool | version | status |")
    L.append("|---|---|---|")
    for t in TOOLS:
        if t == "untraced":
            continue
        v = meta["versions"].get(t.split("-")[0] if t.startswith(("frida", "stap")) else t, "")
        L.append(f"| {t} | {v} | {meta['tools'][t]} |")
    L.append("")
    L.extend(goals(idx))

    def percall_table(wk, title):
        cs = idx.get(wk)
        if not cs:
            return
        base = next((c for c in cs if c["tool"] == "untraced" and c.get("median") is not None), None)
        telco = next((c for c in cs if c["tool"] == "telco-stap" and c.get("median") is not None), None)
        b = base["median"] if base else None
        tadd = telco["median"] - b if telco and b is not None else None
        L.append(title)
        L.append("")
        L.append("| tool | what runs | calls | ns per call, median | min–max | added ns per call | × untraced | × telco-stap (added ns) | hits seen |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        ok = [c for c in cs if c.get("median") is not None]
        ok.sort(key=lambda c: (c["tool"] != "untraced", c["tool"] != "telco-stap", c["median"]))
        for c in ok:
            add = c["median"] - b if b is not None and c["tool"] != "untraced" else None
            rt = c["median"] / b if b and c["tool"] != "untraced" else None
            rtel = add / tadd if add is not None and tadd and c["tool"] not in ("telco-stap", "untraced") else None
            hits = hits_cell(c, Bench.expected(c["n"]) if wk in ("counter", "hist") else Bench.expected(c["n"]))
            L.append(f"| {c['tool']} | {c['how']} | {count(c['n'])} | {fmt(c['median'])} | {fmt(c['min'])}–{fmt(c['max'])} | "
                     f"{fmt(add)} | {ratio(rt)} | {ratio(rtel)} | {hits} |")
        for c in cs:
            if c.get("median") is None:
                L.append(f"| {c['tool']} | {c['how']} | | cannot: {c['error']} | | | | | |")
        L.append("")

    percall_table("counter", "**(1) Counter on entry** of a small non-inlined function (`n++`); the target times its own loop "
                  "of N calls (tool start-up and detach are not counted).")
    percall_table("hist", "**(2) Entry + return**, entry timestamp kept per call, the difference into a log2 histogram "
                  "(`lat <<< gettimeofday_ns() - @entry(gettimeofday_ns())`, `@hist_log`).")
    percall_table("chrome", "**(3) Every call into a Chrome trace file**; the hits column counts the calls found in the file.")

    at = [c for c in cells if c["workload"].startswith("attach")]
    if at:
        L.append("**(4) Attach to a running process** with 1 and 1,000 probed functions: ms from starting the tool "
                 "to its ready message (telco-stap's begin probe, bpftrace's BEGIN, …) and to the first probe hit it "
                 "printed (the target calls `work` and `f0` every millisecond).")
        L.append("")
        L.append("| tool | probes | what is timed | runs | ready, ms median | min–max | first hit, ms median | detach, s | × telco-stap |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for k in ("attach1", "attach1000"):
            cs = idx.get(k, [])
            telco = next((c for c in cs if c["tool"] == "telco-stap" and c.get("median") is not None), None)
            ok = sorted([c for c in cs if c.get("median") is not None], key=lambda c: (c["tool"] != "telco-stap", c["median"]))
            tfh = first_hit(telco) if telco else None
            for c in ok:
                fh = first_hit(c)
                fhm = fmt(fh) if fh is not None else "—"
                dets = detach_cell(c)
                # Like with like: first hit against first hit where the tool
                # prints one, ready message against ready message otherwise.
                rt = None
                if telco and c["tool"] != "telco-stap":
                    rt = fh / tfh if fh is not None and tfh else c["median"] / telco["median"]
                L.append(f"| {c['tool']} | {count(c['n'])} | {c['how']} | {len(c['values'])} | {fmt(c['median'])} | "
                         f"{fmt(c['min'])}–{fmt(c['max'])} | {fhm} | {dets} | {ratio(rt)} |")
            for c in cs:
                if c.get("median") is None:
                    L.append(f"| {c['tool']} | {count(int(k[6:]))} | {c['how']} | | cannot: {c['error']} | | | | |")
        L.append("")

    cs = idx.get("sqlite")
    if cs:
        L.append("**(5) A real program**: SQLite (`libsqlite3.so.0`) runs N single-row INSERT statements, an index and two "
                 "queries, timed by the program itself (`bench/sqlite_load.c`), with every function of the library probed "
                 "by a counter. Slowdown: against the untraced program on the same number of rows.")
        L.append("")
        L.append("| tool | what runs | rows | runs | s, median | min–max | untraced s (same rows) | slowdown | probe hits | "
                 "added ns per hit | × telco-stap (per hit) | detach, s |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        base = {c["n"]: c["median"] for c in cs if c["tool"] == "untraced" and c.get("median") is not None}

        def per_hit(c):
            hits = [h for h in c["hits"] if h]
            if not hits or c["n"] not in base:
                return None
            return (c["median"] - base[c["n"]]) * 1e9 / statistics.median(hits)

        telco = next((c for c in cs if c["tool"] == "telco-stap" and c.get("median") is not None), None)
        tph = per_hit(telco) if telco else None
        ok = sorted([c for c in cs if c.get("median") is not None and c["tool"] != "untraced"],
                    key=lambda c: (c["tool"] != "telco-stap", c["median"] / base.get(c["n"], 1)))
        for c in [c for c in cs if c["tool"] == "untraced" and c.get("median") is not None] + ok:
            u = base.get(c["n"])
            slow = c["median"] / u if u and c["tool"] != "untraced" else None
            ph = per_hit(c) if c["tool"] != "untraced" else None
            hits = [h for h in c["hits"] if h]
            rt = ph / tph if ph is not None and tph and c["tool"] != "telco-stap" else None
            L.append(f"| {c['tool']} | {c['how']} | {count(c['n'])} | {len(c['values'])} | {fmt(c['median'], 4)} | "
                     f"{fmt(c['min'], 4)}–{fmt(c['max'], 4)} | {fmt(u, 4)} | {ratio(slow)} | "
                     f"{count(int(statistics.median(hits))) if hits else '—'} | {fmt(ph)} | {ratio(rt)} | {detach_cell(c)} |")
        for c in cs:
            if c.get("median") is None:
                L.append(f"| {c['tool']} | {c['how']} | | | cannot: {c['error']} | | | | | | | {detach_cell(c)} |")
        L.append("")
    return "\n".join(L) + "\n"


def detach_cell(c):
    """Seconds the tool took to exit after being told to (and to delete its
    perf probe events, for perf's cells with thousands of them)."""
    det = c["extra"].get("detach_s")
    if not det:
        return "—"
    text = fmt(statistics.median(det))
    dele = c["extra"].get("delete_probes_s")
    if dele:
        text += f" + {fmt(statistics.median(dele))} (perf probe -d)"
    return text


def first_hit(c):
    fh = [x for x in c["extra"].get("first_hit_ms", []) if x is not None]
    return statistics.median(fh) if fh else None


def goals(idx):
    """telco-stap's goals (docs/PERFORMANCE.md, "Goals") against this run."""
    out = ["Against the goals, in this run:", ""]

    def added(wk):
        cs = idx.get(wk, [])
        base = next((c["median"] for c in cs if c["tool"] == "untraced" and c.get("median") is not None), None)
        if base is None:
            return None, None, None
        res = {c["tool"]: c["median"] - base for c in cs if c.get("median") is not None and c["tool"] != "untraced"}
        peers = {t: v for t, v in res.items() if not t.startswith("telco-stap") and t != "int3-floor"}
        best = min(peers, key=peers.get) if peers else None
        return res.get("telco-stap"), best, peers.get(best)

    for wk, goal, what in (("counter", 8, "(1) counter"), ("hist", 30, "(2) entry + return with a histogram"),
                           ("chrome", 40, "(3) Chrome trace of every call")):
        if wk not in idx:
            continue
        t, best, b = added(wk)
        if t is None:
            err = next((c["error"] for c in idx[wk] if c["tool"] == "telco-stap"), None)
            out.append(f"* {what}: telco-stap has no number ({err}).")
            continue
        line = f"* {what}: telco-stap adds {t:.1f} ns per call (goal ≤ {goal} ns: {'met' if t <= goal else 'not met'})"
        if best:
            r = b / t if t > 0 else float("inf")
            line += (f"; the fastest peer, {best}, adds {b:,.1f} ns: {r:.1f}× telco-stap "
                     f"(goal ≥ 20×: {'met' if r >= 20 else 'not met'})")
        out.append(line + ".")
    cs = idx.get("attach1000", [])
    t = next((c for c in cs if c["tool"] == "telco-stap" and c.get("median") is not None), None)
    if t:
        out.append(f"* (4) attach with 1,000 probes: {t['median']:.0f} ms to the begin probe "
                   f"(goal ≤ 200 ms: {'met' if t['median'] <= 200 else 'not met'}).")
    out.append("")
    return out


def hits_cell(c, expected):
    hits = [h for h in c["hits"] if h is not None]
    if not hits:
        return "—"
    if all(h == expected for h in hits):
        return "all"
    return " / ".join(f"{h:,}" for h in sorted(set(hits))) + f" (calls: {expected:,})"


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer runs and calls, and only bpftrace with thousands of uprobes (a smoke test, ~5 min)")
    ap.add_argument("--runs", type=int, help="runs per measurement (default 5 for fast tools, 3 for slow ones)")
    ap.add_argument("--tools", help="comma-separated subset of: " + ",".join(TOOLS[1:]))
    ap.add_argument("--workloads", help="comma-separated subset of 1,2,3,4,5")
    ap.add_argument("--no-doc", action="store_true", help="do not rewrite docs/PERFORMANCE.md")
    ap.add_argument("--no-cargo", action="store_true", help="use the telco-stap binary already built")
    ap.add_argument("--json", default=str(BENCH / "results.json"), help="where the raw numbers go")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--render", metavar="JSON", help="only rewrite docs/PERFORMANCE.md from an earlier results file")
    a = ap.parse_args()
    if a.render:
        write_doc(render(json.loads(Path(a.render).read_text())))
        return 0
    if os.geteuid() != 0:
        log("bench/run needs root (uprobes, mounts, ptrace of other tools)")
        return 2
    b = Bench(a)

    def on_signal(sig, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    t0 = time.monotonic()
    try:
        b.build()
        b.detect()
        b.plan()
        b.execute()
        drain("(uprobe detach is slow: the kernel unregisters them one by one)")
        b.finish_cells()
        b.write(b.summarize(), time.monotonic() - t0)
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        return 130
    finally:
        b.cleanup()
        log(f"== done in {time.monotonic() - t0:.0f} s; work dir {'kept at ' + str(b.work) if a.keep else 'removed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
