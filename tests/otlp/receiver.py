#!/usr/bin/env python3
"""An OTLP/HTTP receiver for tests/otlp.rs, decoding with the official
classes (PyPI's opentelemetry-proto).

It binds 127.0.0.1 on a port of the kernel's choosing and says
`port N` (its readiness). Until it listens, connections are refused:
it listens at once with --listen, or when the test writes `listen` on
its standard input. `quit` ends it (it says `end`). Each request is one
JSON line on standard output, written before the answer is sent:
{"path", "encoding", "resources": [{"attributes", "scope", "spans"}]},
each span {"name", "trace_id", "span_id", "parent", "kind", "start",
"end", "attributes"}. --status CODE answers every request with CODE
(and an empty body) instead of 200 with an empty
ExportTraceServiceResponse. --check only imports the classes."""

import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

STATUS = 200
LOCK = threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        encoding = self.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        line = {"path": self.path, "encoding": encoding,
                "type": self.headers.get("Content-Type", ""), "resources": []}
        if STATUS == 200:
            req = trace_service_pb2.ExportTraceServiceRequest()
            req.ParseFromString(body)
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    line["resources"].append({
                        "attributes": attrs(rs.resource.attributes),
                        "scope": [ss.scope.name, ss.scope.version],
                        "spans": [{
                            "name": s.name,
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent": s.parent_span_id.hex(),
                            "kind": s.kind,
                            "start": s.start_time_unix_nano,
                            "end": s.end_time_unix_nano,
                            "attributes": attrs(s.attributes),
                        } for s in ss.spans],
                    })
        with LOCK:
            print(json.dumps(line), flush=True)
        answer = (trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                  if STATUS == 200 else b"refused by the test")
        self.send_response(STATUS)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def main():
    global STATUS
    args = sys.argv[1:]
    if "--check" in args:
        return
    if "--status" in args:
        STATUS = int(args[args.index("--status") + 1])
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
    server.daemon_threads = True
    server.server_bind()
    print(f"port {server.server_address[1]}", flush=True)

    def listen():
        server.server_activate()
        threading.Thread(target=server.serve_forever, daemon=True).start()

    if "--listen" in args:
        listen()
    for cmd in sys.stdin:
        cmd = cmd.strip()
        if cmd == "listen":
            listen()
            with LOCK:
                print("listening", flush=True)
        elif cmd == "quit":
            break
    with LOCK:
        print("end", flush=True)


if __name__ == "__main__":
    main()
