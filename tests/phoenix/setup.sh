#!/usr/bin/env bash
# Builds the isolated virtual environment that runs Arize Phoenix for the
# end-to-end OTel test (tests/test_otel_phoenix.py). Phoenix pins many heavy
# dependencies, so it never shares the project's own venv.
# Usage: bash tests/phoenix/setup.sh [VENV_DIR]   (default: .phoenix-venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python3}"
VENV="${1:-${PHOENIX_VENV:-.phoenix-venv}}"
STAMP="$VENV/.installed"
# Bump together with the test's expectations of Phoenix's REST API.
SPEC="${PHOENIX_SPEC:-arize-phoenix>=12,<21}"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$SPEC" ]; then
    exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "$SPEC"
"$VENV/bin/python" -c "import phoenix; print('phoenix', phoenix.__version__)"
printf '%s' "$SPEC" > "$STAMP"
