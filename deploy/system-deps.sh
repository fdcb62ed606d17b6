#!/bin/sh
# Install the Debian packages of deploy/system-packages.txt that are missing (`make test` runs
# this first). Needs root and apt-get; where it cannot install, it says so in one line per
# package and exits 0: the tests that need a missing package skip, naming it.
#   MUSTER_SYSTEM_DEPS=skip   do nothing (for machines where you manage packages yourself)
set -u
LIST="$(dirname "$0")/system-packages.txt"
[ "${MUSTER_SYSTEM_DEPS:-}" = "skip" ] && exit 0
command -v dpkg-query >/dev/null 2>&1 || { echo "system-deps: not a Debian system; skipping $LIST"; exit 0; }

missing=""
for pkg in $(sed -e 's/#.*//' "$LIST"); do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing="$missing $pkg"
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    for pkg in $missing; do echo "system-deps: $pkg is not installed and this user cannot apt-get it; tests that need it will skip"; done
    exit 0
fi
echo "system-deps: installing$missing (apt-get)"
export DEBIAN_FRONTEND=noninteractive
# Packages with a daemon (redis-server) would start it on the host; the tests start their own,
# inside nodes. Tell invoke-rc.d not to start anything while we install (policy-rc.d, exit 101).
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
# A machine's package lists may be missing or stale: install, and on failure update and retry.
if ! apt-get install -y -qq --no-install-recommends $missing >/tmp/muster-system-deps.log 2>&1; then
    apt-get update -qq >>/tmp/muster-system-deps.log 2>&1
    if ! apt-get install -y -qq --no-install-recommends $missing >>/tmp/muster-system-deps.log 2>&1; then
        for pkg in $missing; do
            dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" ||
                echo "system-deps: could not install $pkg (see /tmp/muster-system-deps.log); tests that need it will skip"
        done
    fi
fi
exit 0
