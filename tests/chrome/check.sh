#!/bin/sh
# Load a Chrome trace into Perfetto's trace processor (see README.md here)
# and print its JSON summary. Exit 77 when the checker is not installed
# (run tests/chrome/install.sh), 0 accepted, 1 rejected, 2 environment.
HERE=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$HERE/venv/bin/python" ] || ! command -v node >/dev/null 2>&1; then
  echo "chrome check not installed: run tests/chrome/install.sh" >&2
  exit 77
fi
exec "$HERE/venv/bin/python" "$HERE/chrome_check.py" "$@"
