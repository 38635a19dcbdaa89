#!/usr/bin/env python3
"""Runs one benchmark workload under Frida, for bench/harness.py.

    frida_driver.py --api js|c --workload counter|hist|chrome [--symbols work,f1 | --module-prefix libsqlite3.so]
                    (--spawn PROGRAM ARGS... | --pid PID) [--chrome-out FILE]

--spawn starts the program suspended, hooks it, resumes it and waits for it
to exit; the program's own output goes to this process's stdout, the
driver's lines ("frida: hooks N failed M", "frida: hits N", the histogram)
to stderr. --pid attaches to a running process, hooks it, prints "armed" on
stdout once every hook is in place and detaches at SIGINT/SIGTERM or when
stdin closes.

Workloads (the same semantics as the telco-stap scripts, as far as Frida
allows):
  counter  a count on entry: onEnter { n++ }
  hist     entry + return: the entry timestamp (clock_gettime) kept per
           invocation, the difference into a log2 histogram on return
  chrome   (js only) a Chrome Trace Event "B" event on entry and "E" on
           return, batched through send() into --chrome-out
--api js runs the callbacks as JavaScript; --api c as a CModule (C compiled
by Frida's TinyCC, called without entering the JS runtime).
"""

import argparse
import json
import os
import signal
import sys
import threading

import frida

# The target's pure functions are found in the symbol table (executables
# export nothing); a library's functions are all its function symbols.
JS_COMMON = r"""
const cfg = CONFIG;
function targets() {
  if (cfg.modulePrefix) {
    const lib = Process.enumerateModules().find(m => m.name.startsWith(cfg.modulePrefix));
    if (!lib) throw new Error('no module ' + cfg.modulePrefix);
    const seen = new Set();
    const out = [];
    for (const s of lib.enumerateSymbols()) {
      if (s.type !== 'function' || s.address.isNull()) continue;
      const k = s.address.toString();
      if (seen.has(k)) continue;
      seen.add(k);
      out.push(s.address);
    }
    return out;
  }
  const byName = new Map();
  for (const s of Process.mainModule.enumerateSymbols()) byName.set(s.name, s.address);
  return cfg.symbols.map(n => {
    const a = byName.get(n);
    if (!a) throw new Error('no symbol ' + n);
    return a;
  });
}
const clockGettime = Module.getGlobalExportByName('clock_gettime');
let hooked = 0, failed = 0;
function hookAll(callbacks) {
  for (const a of targets()) {
    try { Interceptor.attach(a, callbacks); hooked++; } catch (e) { failed++; }
  }
}
function atExit(report) {
  Interceptor.attach(Module.getGlobalExportByName('exit'), {
    onEnter() { report(); send({done: true}); recv('ack', () => {}).wait(); }
  });
}
"""

JS_BY_KIND = {
    ("js", "counter"): r"""
let n = 0;
hookAll({ onEnter() { n++; } });
function report() { send({hits: n}); }
""",
    ("c", "counter"): r"""
const cell = Memory.alloc(8);
const cm = new CModule(`
#include <gum/guminterceptor.h>
extern volatile long n;
void on_enter(GumInvocationContext *ic) { n++; }
`, { n: cell });
hookAll({ onEnter: cm.on_enter });
function report() { send({hits: cell.readS64().toString()}); }
""",
    ("js", "hist"): r"""
const cg = new NativeFunction(clockGettime, 'int', ['int', 'pointer']);
const ts = Memory.alloc(16);
function now() { cg(1, ts); return ts.readS64().toNumber() * 1e9 + ts.add(8).readS64().toNumber(); }
const hist = new Array(64).fill(0);
let n = 0;
hookAll({
  onEnter() { this.t = now(); },
  onLeave() { const d = now() - this.t; hist[d < 1 ? 0 : Math.floor(Math.log2(d)) + 1]++; n++; }
});
function report() { send({hits: n, hist}); }
""",
    ("c", "hist"): r"""
const mem = Memory.alloc(65 * 8);
const cm = new CModule(`
#include <gum/guminterceptor.h>
struct ts { long s, ns; };
extern int clock_gettime(int, struct ts *);
extern volatile long mem[65];
static long now(void) { struct ts t; clock_gettime(1, &t); return t.s * 1000000000L + t.ns; }
void on_enter(GumInvocationContext *ic) { *GUM_IC_GET_INVOCATION_DATA(ic, long) = now(); }
void on_leave(GumInvocationContext *ic) {
  long d = now() - *GUM_IC_GET_INVOCATION_DATA(ic, long);
  int b = 0;
  while (d > 0) { b++; d >>= 1; }
  mem[b]++;
  mem[64]++;
}
`, { clock_gettime: clockGettime, mem });
hookAll({ onEnter: cm.on_enter, onLeave: cm.on_leave });
function report() {
  const hist = [];
  for (let i = 0; i < 64; i++) hist.push(mem.add(i * 8).readS64().toNumber());
  send({hits: mem.add(64 * 8).readS64().toString(), hist});
}
""",
    ("js", "chrome"): r"""
const cg = new NativeFunction(clockGettime, 'int', ['int', 'pointer']);
const ts = Memory.alloc(16);
function nowUs() { cg(1, ts); return (ts.readS64().toNumber() * 1e9 + ts.add(8).readS64().toNumber()) / 1000; }
const pid = Process.id;
let buf = [], n = 0;
function flush() { if (buf.length) { send({chrome: buf.join('')}); buf = []; } }
function ev(ph, tid) {
  buf.push('{"name":"work","ph":"' + ph + '","ts":' + nowUs().toFixed(3) + ',"pid":' + pid + ',"tid":' + tid + '},\n');
  if (buf.length >= 8192) flush();
}
hookAll({ onEnter() { ev('B', this.threadId); }, onLeave() { ev('E', this.threadId); n++; } });
function report() { flush(); send({hits: n}); }
""",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", choices=["js", "c"], required=True)
    ap.add_argument("--workload", choices=["counter", "hist", "chrome"], required=True)
    ap.add_argument("--symbols", default="work")
    ap.add_argument("--module-prefix")
    ap.add_argument("--chrome-out")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--spawn", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    key = (a.api, a.workload)
    if key not in JS_BY_KIND:
        sys.exit(f"frida_driver: no {a.api} variant of {a.workload}")
    cfg = {"symbols": a.symbols.split(","), "modulePrefix": a.module_prefix}
    source = JS_COMMON.replace("CONFIG", json.dumps(cfg)) + JS_BY_KIND[key]
    if a.spawn:
        source += "\natExit(report);\nsend({hooked, failed});\n"
    else:
        source += "\nsend({hooked, failed});\n"

    device = frida.get_local_device()
    ended = threading.Event()
    chrome = open(a.chrome_out, "w") if a.chrome_out else None
    if chrome:
        chrome.write("[\n")
    script_holder = {}

    def on_message(msg, data):
        if msg["type"] != "send":
            print(f"frida: {msg}", file=sys.stderr, flush=True)
            ended.set()
            return
        p = msg["payload"]
        if "chrome" in p:
            chrome.write(p["chrome"])
        if "hooked" in p:
            print(f"frida: hooks {p['hooked']} failed {p['failed']}", file=sys.stderr, flush=True)
        if "hits" in p:
            print(f"frida: hits {p['hits']}", file=sys.stderr, flush=True)
        if "hist" in p:
            for i, c in enumerate(p["hist"]):
                if c:
                    print(f"frida: hist [{(1 << i) >> 1}, {1 << i}) {c}", file=sys.stderr)
        if p.get("done"):
            script_holder["s"].post({"type": "ack"})

    pid = None
    session = None
    try:
        if a.spawn:
            pid = device.spawn(a.spawn, stdio="inherit")
        else:
            pid = a.pid
        session = device.attach(pid)
        session.on("detached", lambda *args: ended.set())
        script = session.create_script(source)
        script_holder["s"] = script
        script.on("message", on_message)
        script.load()
        if a.spawn:
            device.resume(pid)
            if not ended.wait(a.timeout):
                sys.exit("frida_driver: timeout")
            pid = None
        else:
            print("armed", flush=True)
            stop = threading.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *args: stop.set())
            threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
            stop.wait(a.timeout)
    finally:
        if session is not None and not ended.is_set():
            try:
                session.detach()
            except frida.InvalidOperationError:
                pass
        if a.spawn and pid is not None:
            try:
                device.kill(pid)
            except frida.ProcessNotFoundError:
                pass
        if chrome:
            # Replace the last event's ",\n" so the array is valid JSON.
            if chrome.tell() > 2:
                chrome.seek(chrome.tell() - 2)
            chrome.write("\n]\n")
            chrome.truncate()
            chrome.close()


if __name__ == "__main__":
    main()
