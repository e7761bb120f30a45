#!/usr/bin/env bash
# Print the path of an earlyoom binary for the footprint benchmark, fetching
# Debian's package into target/earlyoom/ (unpacked, never installed or
# started as a service) when none is in PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v earlyoom >/dev/null; then
    command -v earlyoom
    exit 0
fi
dir=$PWD/target/earlyoom
bin=$dir/root/usr/bin/earlyoom
if [ ! -x "$bin" ]; then
    mkdir -p "$dir"
    (cd "$dir" && apt-get download earlyoom >&2 && dpkg -x earlyoom_*.deb root)
fi
echo "$bin"
