#!/bin/sh
# Installs the independent readers tests/profile.rs checks the profile
# files with (tests/profile/README.md). Idempotent; re-running is cheap.
#   - pprof-format 2.3.2 (npm): Datadog's JavaScript pprof decoder, as its
#     Node profiler uses it;
#   - ajv 8.17.1 (npm): a JSON Schema validator;
#   - speedscope 1.25.0's file-format-schema.json (npm package speedscope).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
D="$HERE/node"
if [ -e "$D/.ready" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "tests/profile/install.sh: npm not found on PATH (apt-get install npm)" >&2
  exit 1
fi
rm -rf "$D"
mkdir -p "$D"
cd "$D"
npm install --silent --no-audit --no-fund --no-save --prefix "$D" pprof-format@2.3.2 ajv@8.17.1 >/dev/null
npm pack --silent speedscope@1.25.0 >/dev/null
tar xzf speedscope-1.25.0.tgz package/dist/release/file-format-schema.json
mv package/dist/release/file-format-schema.json speedscope-schema.json
rm -rf package speedscope-1.25.0.tgz
touch .ready
echo "profile-check: ready (pprof-format, ajv, speedscope's schema)"
