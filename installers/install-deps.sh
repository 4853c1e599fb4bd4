#!/usr/bin/env bash
# Installs the Debian packages of a list that are missing, with apt-get (through sudo when not root). Safe to
# run again: it does nothing when everything is present.
#
#   install-deps.sh            the packages that building and testing Gleaner needs (debian-packages.txt)
#   install-deps.sh --demo     only its [demo] set: what building Gleaner and running ./demo.sh need
#   install-deps.sh LIST       those of another list, e.g. installers/fuzz-packages.txt for the fuzz targets
#   install-deps.sh --demo LIST
# A list's `[NAME]` lines start its sets (debian-packages.txt says what each holds); without --demo every set is
# installed, and the lines before the first `[NAME]` belong to every selection.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
only=""
if [[ "${1:-}" == "--demo" ]]; then
    only=demo
    shift
fi
if [[ $# -gt 1 || "${1:-}" == -* ]]; then
    echo "install-deps: usage: install-deps.sh [--demo] [LIST]" >&2
    exit 2
fi
list="${1:-$here/debian-packages.txt}"
if [[ ! -r "$list" ]]; then
    echo "install-deps: cannot read the package list $list" >&2
    exit 1
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: this script needs Debian 12 (dpkg and apt-get); install the packages of $list by hand" >&2
    exit 1
fi

# One name per line, comments and blank lines dropped; a `[NAME]` line switches the set the names below it go to.
names=$(sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$list" \
    | awk -v only="$only" '/^\[[a-z0-9-]+\]$/ { set = substr($0, 2, length($0) - 2); seen[set] = 1; next }
                           only == "" || set == "" || set == only { print }
                           END { if (only != "" && !(only in seen)) exit 3 }') || {
    echo "install-deps: $list has no [$only] set; install-deps.sh without --demo installs all of it" >&2
    exit 1
}
wanted=()
[[ -n "$names" ]] && mapfile -t wanted <<<"$names"
what=$(basename "$list")
[[ -n "$only" ]] && what="the [$only] set of $what"
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
    echo "install-deps: all ${#wanted[@]} packages of $what are installed"
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
