#!/usr/bin/env bash
# Installs the Debian packages of a list that are missing, with apt-get (through sudo when not root). Safe to
# run again: it does nothing when everything is present.
#
#   install-deps.sh            the packages that building and testing Gleaner needs (debian-packages.txt)
#   install-deps.sh LIST       those of another list, e.g. installers/fuzz-packages.txt for the fuzz targets
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
list="${1:-$here/debian-packages.txt}"
if [[ ! -r "$list" ]]; then
    echo "install-deps: cannot read the package list $list" >&2
    exit 1
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: this script needs Debian 12 (dpkg and apt-get); install the packages of $list by hand" >&2
    exit 1
fi

mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^[[:space:]]*$/d' "$list")
missing=()
# A package counts as present when it is installed or an installed package provides it (a nodejs build that
# bundles npm provides and conflicts with Debian's npm: asking apt for npm would then fail).
provided=$(dpkg-query -W -f='${db:Status-Abbrev} ${Provides}\n' 2>/dev/null | awk '$1 == "ii" { $1 = ""; print }' \
           | tr ',' '\n' | sed -e 's/([^)]*)//g' -e 's/[[:space:]]//g' | sort -u)
for pkg in "${wanted[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] && continue
    grep -qx -- "$pkg" <<<"$provided" && continue
    missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-deps: all ${#wanted[@]} packages of $(basename "$list") are installed"
    exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "install-deps: missing packages (${missing[*]}) and not root; run as root or install sudo" >&2
    exit 1
fi

echo "install-deps: installing ${#missing[@]} package(s): ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -q
"${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
