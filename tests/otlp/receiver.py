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
"end", "attributes"}. Logs (/v1/logs): "logs": [{"attributes", "scope",
"records": [{"time", "body", "event_name", "attributes"}]}]. Profiles: a POST to /v1development/profiles is
decoded as an ExportProfilesServiceRequest, its line with "profiles":
[{"attributes", "scope", "sample_type", "period", "time", "duration",
"samples": [{"stack" (function names, leaf first), "value", "time",
"attributes"}]}]; a Pyroscope POST to /ingest has its query in "query"
and its multipart field `profile` saved in the --save directory, named
in "file". With --count, a request's line is only {"path", "spans",
"samples"}: how many it held (for long sessions). --status CODE answers every request with CODE (and an empty
body) instead of 200 with an empty Export*ServiceResponse. --check only
imports the classes."""

import gzip
import json
import os
import sys
import threading
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

STATUS = 200
SAVE = None
COUNT = False
SAVED = 0
LOCK = threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def dict_attrs(d, indices):
    out = {}
    for i in indices:
        kv = d.attribute_table[i]
        out[d.string_table[kv.key_strindex]] = value(kv.value)
    return out


def profiles(body):
    """An ExportProfilesServiceRequest, resolved through its dictionary."""
    req = profiles_service_pb2.ExportProfilesServiceRequest()
    req.ParseFromString(body)
    d = req.dictionary
    s = d.string_table

    def stack(i):
        names = []
        for li in d.stack_table[i].location_indices:
            loc = d.location_table[li]
            for line in loc.lines:
                names.append(s[d.function_table[line.function_index].name_strindex])
        # Location order is leaf first.
        return names

    out = []
    for rp in req.resource_profiles:
        for sp in rp.scope_profiles:
            for p in sp.profiles:
                out.append({
                    "attributes": attrs(rp.resource.attributes),
                    "scope": [sp.scope.name, sp.scope.version],
                    "sample_type": [s[p.sample_type.type_strindex], s[p.sample_type.unit_strindex]],
                    "period": p.period,
                    "time": p.time_unix_nano,
                    "duration": p.duration_nano,
                    "samples": [{
                        "stack": stack(x.stack_index),
                        "value": list(x.values),
                        "time": list(x.timestamps_unix_nano),
                        "attributes": dict_attrs(d, x.attribute_indices),
                    } for x in p.samples],
                })
    return out


def logs(body):
    """An ExportLogsServiceRequest: per resource, its records."""
    req = logs_service_pb2.ExportLogsServiceRequest()
    req.ParseFromString(body)
    out = []
    for rl in req.resource_logs:
        for sl in rl.scope_logs:
            out.append({
                "attributes": attrs(rl.resource.attributes),
                "scope": [sl.scope.name, sl.scope.version],
                "records": [{
                    "time": r.time_unix_nano,
                    "body": value(r.body) if r.HasField("body") else None,
                    "event_name": r.event_name,
                    "attributes": attrs(r.attributes),
                } for r in sl.log_records],
            })
    return out


def form_file(content_type, body, field):
    """The bytes of a multipart/form-data body's `field`."""
    msg = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    for part in msg.iter_parts():
        if part.get_param("name", header="content-disposition") == field:
            return part.get_payload(decode=True)
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global SAVED
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        encoding = self.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        line = {"path": self.path, "encoding": encoding,
                "type": self.headers.get("Content-Type", ""), "resources": []}
        url = urlsplit(self.path)
        if STATUS == 200 and COUNT:
            line = {"path": url.path, "spans": 0, "samples": 0}
            if url.path.endswith("/v1/traces"):
                req = trace_service_pb2.ExportTraceServiceRequest()
                req.ParseFromString(body)
                line["spans"] = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            elif url.path.endswith("/v1/logs"):
                line["logs"] = sum(len(r["records"]) for r in logs(body))
                answer = logs_service_pb2.ExportLogsServiceResponse().SerializeToString()
            elif url.path.endswith("/v1development/profiles"):
                req = profiles_service_pb2.ExportProfilesServiceRequest()
                req.ParseFromString(body)
                line["samples"] = sum(len(p.samples) for rp in req.resource_profiles
                                      for sp in rp.scope_profiles for p in sp.profiles)
                answer = profiles_service_pb2.ExportProfilesServiceResponse().SerializeToString()
            else:
                answer = b""
        elif STATUS == 200 and url.path.endswith("/v1/logs"):
            line["logs"] = logs(body)
            answer = logs_service_pb2.ExportLogsServiceResponse().SerializeToString()
        elif STATUS == 200 and url.path.endswith("/v1development/profiles"):
            line["profiles"] = profiles(body)
            answer = profiles_service_pb2.ExportProfilesServiceResponse().SerializeToString()
        elif STATUS == 200 and url.path.endswith("/ingest"):
            line["query"] = {k: v[0] for k, v in parse_qs(url.query).items()}
            data = form_file(line["type"], body, "profile")
            if data is not None and SAVE:
                with LOCK:
                    SAVED += 1
                    name = os.path.join(SAVE, f"ingest-{SAVED}.pb.gz")
                with open(name, "wb") as f:
                    f.write(data)
                line["file"] = name
            answer = b""
        elif STATUS == 200:
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
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
        else:
            answer = b"refused by the test"
        with LOCK:
            print(json.dumps(line), flush=True)
        self.send_response(STATUS)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def main():
    global STATUS, SAVE, COUNT
    args = sys.argv[1:]
    if "--check" in args:
        return
    if "--status" in args:
        STATUS = int(args[args.index("--status") + 1])
    COUNT = "--count" in args
    if "--save" in args:
        SAVE = args[args.index("--save") + 1]
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
