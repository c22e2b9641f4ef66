#!/usr/bin/env bash
# Fetch Debian's chromium for the results site's browser test into a folder of the project,
# installing nothing on the system:
#
#     tests/web/fetch_chromium.sh .tools
#
# The packages are those `apt-get install --no-install-recommends chromium` would add to
# this system (chromium and the libraries it lacks; about 190 MB to fetch, 700 MB
# unpacked), downloaded with `apt-get download` and unpacked with `dpkg -x` into
# TOOLS/chromium; apt's package lists are fetched into TOOLS/apt, not /var/lib/apt. No
# maintainer script runs, so no service is enabled. tests/web/chromium.py starts
# TOOLS/chromium/usr/lib/chromium/chromium with its libraries and fonts from there.
#
# Needs apt-get and dpkg (Debian, Ubuntu), not root. Exit codes: 0 fetched (or already
# there), 1 could not fetch (what apt said is on stderr), 2 no apt-get or dpkg here.
set -euo pipefail

tools=${1:?usage: fetch_chromium.sh TOOLS_FOLDER}
mkdir -p "$tools"
tools=$(cd "$tools" && pwd)
here=(-o "Dir::State::Lists=$tools/apt/lists" -o "Dir::Cache=$tools/apt/cache")
target=$tools/chromium

if [[ -x $target/usr/lib/chromium/chromium ]]; then
    exit 0
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
    echo "fetch_chromium: no apt-get or dpkg here" >&2
    exit 2
fi

# What apt would install here, by its package lists; fetched again once where a download
# fails (lists of an earlier day name files the mirror no longer has).
packages() {
    apt-get "${here[@]}" install -s --no-install-recommends chromium | awk '/^Inst /{print $2}'
}
fetch() {
    rm -rf "$tools/chromium-debs" && mkdir -p "$tools/chromium-debs"
    (cd "$tools/chromium-debs" && apt-get "${here[@]}" download $(packages))
}
mkdir -p "$tools/apt/lists/partial" "$tools/apt/cache/archives/partial"
if ! ls "$tools"/apt/lists/*_Packages* >/dev/null 2>&1 || ! fetch; then
    apt-get "${here[@]}" update
    fetch
fi

# Unpacked beside, then moved into place: an interrupted fetch leaves no half a browser.
rm -rf "$target.partial"
count=0
for deb in "$tools"/chromium-debs/*.deb; do
    dpkg -x "$deb" "$target.partial"
    count=$((count + 1))
done
mv "$target.partial" "$target"
rm -rf "$tools/chromium-debs"
echo "fetch_chromium: $count packages (chromium and what it needs) unpacked in $target"
