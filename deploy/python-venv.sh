#!/usr/bin/env bash
# A Python venv with pinned requirements, for the tests that drive the project with the
# official MCP SDKs:
#
#   bash deploy/python-venv.sh VENV REQUIREMENTS
#
# Makes VENV if missing (installing Debian's python3-venv through apt-get when the
# interpreter lacks venv), then installs REQUIREMENTS from PyPI, again only when the file
# changed since. Environment: PYTHON (default python3, 3.10 or later: the MCP SDK's).
set -euo pipefail

VENV=${1:?usage: deploy/python-venv.sh VENV REQUIREMENTS}
REQUIREMENTS=${2:?usage: deploy/python-venv.sh VENV REQUIREMENTS}
PYTHON=${PYTHON:-python3}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "$PYTHON is older than 3.10; the MCP SDK needs 3.10 or later (set PYTHON)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    # Debian's python3 ships venv separately.
    echo "== installing python3-venv"
    rm -rf "$VENV"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3-venv >/dev/null
    "$PYTHON" -m venv "$VENV"
  fi
fi
pins=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
if [ "$(cat "$VENV/.pins" 2>/dev/null)" != "$pins" ]; then
  echo "== pip install -r $REQUIREMENTS into $VENV"
  nice "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQUIREMENTS"
  echo "$pins" >"$VENV/.pins"
fi
