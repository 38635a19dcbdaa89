#!/bin/sh
# Installs what receiver.py needs: a Python venv ./venv with the
# OpenTelemetry protos' official Python classes (PyPI's
# opentelemetry-proto, which brings protobuf). Idempotent.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
if [ ! -x "$HERE/venv/bin/python" ]; then
  "$PY" -m venv "$HERE/venv"
fi
"$HERE/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  'opentelemetry-proto==1.45.2' 'protobuf==7.36.2'
"$HERE/venv/bin/python" "$HERE/receiver.py" --check
