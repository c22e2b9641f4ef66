#!/usr/bin/env bash
# Fetch one of Debian's packages for the tests into a folder of the project, installing
# nothing on the system:
#
#     tests/fetch_debian.sh .tools chromium     # also: haproxy, prometheus (promtool)
#
# The packages are those `apt-get install --no-install-recommends PACKAGE` would add to
# this system (the package and the libraries it lacks), downloaded with `apt-get
# download` and unpacked with `dpkg -x` into TOOLS/PACKAGE; apt's package lists are
# fetched into TOOLS/apt, not /var/lib/apt. No maintainer script runs, so no service is
# enabled. The tests find what they run there (tests/web/chromium.py, tests/edge.py,
# tests/integration/test_monitoring.py).
#
# Needs apt-get and dpkg (Debian, Ubuntu), not root. Exit codes: 0 fetched (or already
# there), 1 could not fetch (what apt said is on stderr), 2 no apt-get or dpkg here.
set -euo pipefail

usage="usage: fetch_debian.sh TOOLS_FOLDER PACKAGE"
tools=${1:?$usage}
package=${2:?$usage}
mkdir -p "$tools"
tools=$(cd "$tools" && pwd)
# apt's logs too (`install -s` rewrites /var/log/apt/eipp.log.xz): nothing outside $tools.
here=(-o "Dir::State::Lists=$tools/apt/lists" -o "Dir::Cache=$tools/apt/cache"
      -o "Dir::Log=$tools/apt/log")
mkdir -p "$tools/apt/log"
target=$tools/$package
debs=$tools/$package-debs
trap 'rm -rf "$debs" "$target.partial"' EXIT  # the downloads, and half a package

if [[ -d $target ]]; then
    exit 0
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
    echo "fetch_debian: no apt-get or dpkg here" >&2
    exit 2
fi

# What apt would install here, by its package lists; fetched again once where a download
# fails (lists of an earlier day name files the mirror no longer has).
packages() {
    apt-get "${here[@]}" install -s --no-install-recommends "$package" |
        awk '/^Inst /{print $2}'
}
fetch() {
    local wanted
    rm -rf "$debs" && mkdir -p "$debs"
    wanted=$(packages) || return 1
    [[ -z $wanted ]] || (cd "$debs" && apt-get "${here[@]}" download $wanted)
}
mkdir -p "$tools/apt/lists/partial" "$tools/apt/cache/archives/partial"
if ! ls "$tools"/apt/lists/*_Packages* >/dev/null 2>&1 || ! fetch; then
    apt-get "${here[@]}" update
    fetch
fi
if ! compgen -G "$debs/*.deb" >/dev/null; then
    echo "fetch_debian: $package is installed on this system: nothing to fetch" >&2
    exit 0
fi

# Unpacked beside, then moved into place: an interrupted fetch leaves no half a package.
rm -rf "$target.partial"
count=0
for deb in "$debs"/*.deb; do
    dpkg -x "$deb" "$target.partial"
    count=$((count + 1))
done
mv "$target.partial" "$target"
echo "fetch_debian: $count packages ($package and what it needs) unpacked in $target"
