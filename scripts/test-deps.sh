#!/usr/bin/env bash
# Installs what the tests need beyond Go: from Debian packages, chromium
# for the browser tests, poppler-utils (pdfsig, the document seals'
# independent verifier), systemd-analyze and Prometheus (the deploy
# files' checks), PostgreSQL's server binaries for the tests of the
# PostgreSQL backend (each test binary starts its own throwaway server
# from them, see internal/testkit/pgtest), Redmine on SQLite with WEBrick
# for the tests of the Redmine connector (likewise, see
# internal/testkit/redminetest) and npm; from the npm registry, axe-core
# for the browser tests' accessibility check, pinned by
# internal/testkit/browsertest/axe/package-lock.json. Idempotent and quiet when
# all is there. With KEYGATE_TEST_POSTGRES set (a DSN, or "off"), no
# PostgreSQL is installed. `test-deps.sh redmine` installs only Redmine,
# for `make redmine`.
set -euo pipefail

only=${1:-}
# want all: the group is wanted unless only Redmine was asked for.
want() { [ -z "$only" ] || [ "$only" = "$1" ]; }

root=$(cd "$(dirname "$0")/.." && pwd)
axe="$root/internal/testkit/browsertest/axe"

need=()
if want all && ! command -v chromium >/dev/null 2>&1; then
	need+=(chromium fonts-dejavu-core)
fi
have_postgres() {
	command -v postgres >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1 && return 0
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1
}
if want all && [ -z "${KEYGATE_TEST_POSTGRES:-}" ] && ! have_postgres; then
	need+=(postgresql)
fi
if want all && ! command -v npm >/dev/null 2>&1; then
	need+=(nodejs npm)
fi
# poppler's pdfsig checks the document seals as an independent verifier;
# openssl makes the PKCS#12 file the seal tests load.
if want all && ! command -v pdfsig >/dev/null 2>&1; then
	need+=(poppler-utils)
fi
if want all && ! command -v openssl >/dev/null 2>&1; then
	need+=(openssl)
fi
# NSS's certutil makes the database in which pdfsig is told to trust the
# self-made seal's root, as a relying party does.
if want all && ! command -v certutil >/dev/null 2>&1; then
	need+=(libnss3-tools)
fi
# The deploy files are checked by their own tools: systemd-analyze verify
# (the service unit), promtool (the alert rules and their tests),
# Prometheus itself (every dashboard panel's query and the scrape config,
# against a gateway) and logrotate (the audit log's example).
if want all && ! command -v systemd-analyze >/dev/null 2>&1; then
	need+=(systemd)
fi
if want all && { ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; }; then
	need+=(prometheus)
fi
if want all && ! command -v logrotate >/dev/null 2>&1 && [ ! -x /usr/sbin/logrotate ]; then
	need+=(logrotate)
fi
# Redmine for the tests of the Redmine connector; redminetest serves it
# with WEBrick, which Ruby 3 no longer bundles.
for pkg in redmine redmine-sqlite ruby-webrick; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q ' installed$'; then
		need+=("$pkg")
	fi
done
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		echo "test-deps: missing ${need[*]} and cannot install here (needs root and apt-get)" >&2
		exit 1
	fi
	echo "test-deps: installing ${need[*]} (Debian packages)" >&2
	export DEBIAN_FRONTEND=noninteractive
	# The tests start their own servers: Debian's default cluster, which
	# the package would create and start on port 5432, is not wanted.
	mkdir -p /etc/postgresql-common
	if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
		echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
	fi
	# Nor is a Redmine database of the machine's, which dbconfig-common
	# would make and migrate: the tests prepare their own.
	echo "redmine redmine/instances/default/dbconfig-install boolean false" | debconf-set-selections
	# Nor are the services the packages would start (Prometheus on :9090):
	# policy-rc.d answers "not now" while they install.
	policy=/usr/sbin/policy-rc.d
	own_policy=
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && own_policy=1
		trap 'rm -f "$policy"' EXIT
	fi
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"${need[@]}" >/dev/null
	if [ -n "$own_policy" ]; then
		rm -f "$policy"
		trap - EXIT
	fi
fi

# npm ci installs exactly the lock file's axe-core (its integrity hash
# checked), again when the lock file changed since; no package script runs.
if want all && { [ ! -e "$axe/node_modules/axe-core/axe.min.js" ] || [ "$axe/package-lock.json" -nt "$axe/node_modules/.package-lock.json" ]; }; then
	echo "test-deps: installing axe-core (npm ci in internal/testkit/browsertest/axe)" >&2
	(cd "$axe" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
fi
