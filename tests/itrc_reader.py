#!/usr/bin/env python3
"""An ITRC reader written from the format description alone (the seed
document on Frida's itracer format), independent of the Rust reader, so the
tests can check that what telco-stap writes is what the format says.

    python3 tests/itrc_reader.py FILE

prints one JSON object:

    {"registers": [[name, size], ...],
     "start": {name: "0x...", ...},
     "blocks": {"0x...": {"size": n, "name": s, "writes": [[off, idx], ...],
                          "code": "hex" | null}},
     "records": [{"address": "0x...", "writes": [[off, name, "0x..."], ...]}],
     "lost": n | null, "end": bool, "messages": [type, ...],
     "python_json": bool}

"python_json" says whether every message's JSON is byte for byte what
Python's json.dumps writes for it, as Frida's itracer.py writes messages.

Layout (the seed): magic "ITRC"; then records, each a big-endian u32 type:
1 = MESSAGE (u32be length, UTF-8 JSON, u32be data size, data), 2 = CHUNK
(u32be size, bytes). The chunks concatenate into a stream of block records:
u64 block address (little-endian), then one value per entry of the block's
"writes" (from its itrace:compile), the first being the link register. The
seed writes the values as uint64; a value is as wide as its register's
"size" in itrace:start (8 for every register the seed's uint64 covers).

Exit status 1 with a message on stderr if the file is malformed.
"""

import json
import struct
import sys


class Malformed(Exception):
    pass


def take(buf, pos, n, what):
    if pos + n > len(buf):
        raise Malformed(f"truncated: {what} at byte {pos} needs {n} bytes, {len(buf) - pos} left")
    return buf[pos:pos + n], pos + n


def parse_address(v):
    if isinstance(v, str):
        return int(v, 16)
    return int(v)


def read(path):
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:4] != b"ITRC":
        raise Malformed(f"bad magic {buf[:4]!r}")
    pos = 4
    registers = None
    start = None
    blocks = {}
    stream = bytearray()
    messages = []
    lost = None
    end = False
    python_json = True
    while pos < len(buf):
        raw, pos = take(buf, pos, 4, "record type")
        (kind,) = struct.unpack(">I", raw)
        if kind == 1:
            raw, pos = take(buf, pos, 4, "message length")
            (n,) = struct.unpack(">I", raw)
            text, pos = take(buf, pos, n, "message JSON")
            raw, pos = take(buf, pos, 4, "message data size")
            (n,) = struct.unpack(">I", raw)
            data, pos = take(buf, pos, n, "message data")
            msg = json.loads(text.decode("utf-8"))
            python_json = python_json and json.dumps(msg).encode("utf-8") == text
            mtype = msg["type"]
            messages.append(mtype)
            payload = msg.get("payload")
            if mtype == "itrace:start":
                registers = [(r["name"], r["size"]) for r in payload]
                start = {}
                p = 0
                for name, size in registers:
                    if p + size > len(data):
                        raise Malformed("itrace:start data too short")
                    start[name] = int.from_bytes(data[p:p + size], "little")
                    p += size
                if p != len(data):
                    raise Malformed("itrace:start data too long")
            elif mtype == "itrace:compile":
                addr = parse_address(payload["address"])
                blocks[addr] = {
                    "size": payload["size"],
                    "name": payload.get("name"),
                    "writes": [list(w) for w in payload["writes"]],
                    "code": data.hex() if data else None,
                }
            elif mtype == "itrace:lost":
                lost = payload["lost"]
            elif mtype == "itrace:end":
                end = True
        elif kind == 2:
            raw, pos = take(buf, pos, 4, "chunk size")
            (n,) = struct.unpack(">I", raw)
            data, pos = take(buf, pos, n, "chunk")
            stream += data
        else:
            raise Malformed(f"unknown record type {kind}")

    records = []
    p = 0
    while p < len(stream):
        if registers is None:
            raise Malformed("block records without itrace:start")
        if p + 8 > len(stream):
            raise Malformed("stream ends inside a block address")
        (addr,) = struct.unpack("<Q", stream[p:p + 8])
        p += 8
        if addr not in blocks:
            raise Malformed(f"record for undeclared block {addr:#x}")
        writes = []
        for off, idx in blocks[addr]["writes"]:
            name, size = registers[idx]
            if p + size > len(stream):
                raise Malformed("stream ends inside a block record")
            writes.append([off, name, hex(int.from_bytes(stream[p:p + size], "little"))])
            p += size
        records.append({"address": hex(addr), "writes": writes})

    return {
        "registers": [list(r) for r in registers or []],
        "start": {k: hex(v) for k, v in (start or {}).items()},
        "blocks": {hex(a): b for a, b in blocks.items()},
        "records": records,
        "lost": lost,
        "end": end,
        "messages": messages,
        "python_json": python_json,
    }


def main():
    if len(sys.argv) != 2:
        print("usage: itrc_reader.py FILE", file=sys.stderr)
        sys.exit(2)
    try:
        out = read(sys.argv[1])
    except (Malformed, ValueError, KeyError, TypeError) as e:
        print(f"itrc_reader.py: {sys.argv[1]}: {e}", file=sys.stderr)
        sys.exit(1)
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
