#!/usr/bin/env bash
# Installs what the tests need beyond Go: Debian's chromium for the
# signing-page browser test. Idempotent and quiet when all is there.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "test-deps: chromium is missing and cannot be installed here (needs root and apt-get)" >&2
	exit 1
fi
echo "test-deps: installing chromium (Debian package)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
