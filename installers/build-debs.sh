#!/usr/bin/env bash
# Builds Gleaner's Debian packages (gleaner-agent, gleaner-desktop, gleaner-coordinator) from a build folder,
# checks them with lintian and prints them with their sizes. docs/packages.md says what each holds.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: installers/build-debs.sh [--build-dir DIR] [--out DIR] [--version V] [--jobs N] [--no-lintian]

Builds the Debian packages gleaner-agent, gleaner-desktop and gleaner-coordinator with CPack.

  --build-dir DIR  the CMake build folder (default: build/ in the repository). A folder that is not configured
                   yet is configured (Ninja, RelWithDebInfo, no tests); either way it is (re)configured with
                   CMAKE_INSTALL_PREFIX=/usr, which recompiles nothing, and the four programs the packages hold
                   are built if they are not up to date.
  --out DIR        where the .deb files go (default: DIR/packages of the build folder)
  --version V      the Debian version, UPSTREAM-REVISION (default: the project's version with revision 1,
                   e.g. 0.1.0-1). The same build packaged as 0.1.0-2 upgrades 0.1.0-1.
  --jobs N         parallel compile jobs when something must be built (default: all cores)
  --no-lintian     do not run lintian (by default lintian runs, and a warning or error fails the script)
  --help           this text

Run as root on a Debian 12 machine missing dpkg-dev, file or lintian, it installs them with apt-get. Building
Gleaner itself needs the packages of installers/debian-packages.txt (installers/install-deps.sh).
EOF
}

die() {
    echo "build-debs: $*" >&2
    exit 1
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build"
out=""
version=""
jobs=$(nproc 2>/dev/null || echo 2)
run_lintian=1

while [[ $# -gt 0 ]]; do
    case "$1" in
    --build-dir) [[ $# -ge 2 ]] || die "--build-dir needs a folder"; build=$2; shift 2 ;;
    --out) [[ $# -ge 2 ]] || die "--out needs a folder"; out=$2; shift 2 ;;
    --version) [[ $# -ge 2 ]] || die "--version needs a version such as 0.1.0-2"; version=$2; shift 2 ;;
    --jobs) [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive number"; jobs=$2; shift 2 ;;
    --no-lintian) run_lintian=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1' (see --help)" ;;
    esac
done

if [[ -n "$version" && ! "$version" =~ ^[0-9][A-Za-z0-9.+~]*-[A-Za-z0-9.+~]+$ ]]; then
    die "--version '$version' is not a Debian version UPSTREAM-REVISION such as 0.1.0-2"
fi
mkdir -p "$build" || die "cannot create the build folder $build"
build=$(cd "$build" && pwd)
out=${out:-$build/packages}
mkdir -p "$out" || die "cannot create the output folder $out"
out=$(cd "$out" && pwd)

command -v dpkg >/dev/null 2>&1 || die "dpkg is missing: the packages are built on Debian 12"

# The tools the packaging steps need, by the package that holds them.
needed=(dpkg-shlibdeps:dpkg-dev file:file readelf:binutils)
[[ $run_lintian -eq 1 ]] && needed+=(lintian:lintian)
missing=()
for pair in "${needed[@]}"; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    if [[ $(id -u) -ne 0 ]]; then
        die "missing ${missing[*]}; install them (apt-get install ${missing[*]}) or run this script as root"
    fi
    echo "build-debs: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get could not install ${missing[*]} (try apt-get update first)"
fi
for tool in cmake cpack; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing; installers/install-deps.sh installs it"
done

# Configure: a new folder from scratch; an existing one keeps its settings and gets the /usr prefix.
if [[ -f "$build/CMakeCache.txt" ]]; then
    source_of_build=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
    [[ "$source_of_build" -ef "$repo" ]] \
        || die "$build was configured from $source_of_build, not from $repo; pass --build-dir of a build of this tree"
    cmake -S "$repo" -B "$build" -DCMAKE_INSTALL_PREFIX=/usr >/dev/null \
        || die "cmake could not reconfigure $build (run it by hand to see why)"
else
    command -v ninja >/dev/null 2>&1 || die "ninja is missing; installers/install-deps.sh installs it"
    echo "build-debs: configuring $build"
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGLEANER_BUILD_TESTS=OFF \
        -DCMAKE_INSTALL_PREFIX=/usr >/dev/null \
        || die "cmake could not configure $build; installers/install-deps.sh installs what building needs"
fi
# The tray app (gleaner-desktop) is configured only where Qt SVG is installed: say so before building.
targets=$(cmake --build "$build" --target help 2>/dev/null || true)
grep -q '^gleaner: ' <<<"$targets" \
    || die "$build has no tray app to package: Qt SVG is missing (installers/install-deps.sh installs it, with qt6-svg-dev), then run again"
echo "build-debs: building what the packages hold in $build (nothing, when it is up to date)"
cmake --build "$build" --parallel "$jobs" --target gleaner-agent gleaner-worker gleaner gleaner-coordinator \
    || die "the build in $build failed"

# Package. cpack stages each component under $out/_CPack_Packages; that goes afterwards.
for pkg in gleaner-agent gleaner-desktop gleaner-coordinator; do
    rm -f "$out/${pkg}_"*.deb
done
cpack_args=(--config "$build/CPackConfig.cmake" -B "$out")
[[ -n "$version" ]] && cpack_args+=(-D "GLEANER_DEB_VERSION=$version")
log="$out/cpack.log"
if ! (cd "$out" && cpack "${cpack_args[@]}") >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "cpack failed (the whole log: $log)"
fi
rm -rf "$out/_CPack_Packages"
mapfile -t debs < <(find "$out" -maxdepth 1 -name 'gleaner-*.deb' | sort)
[[ ${#debs[@]} -eq 3 ]] || die "cpack made ${#debs[@]} packages in $out instead of 3 (its log: $log)"

status=0
if [[ $run_lintian -eq 1 ]]; then
    echo "build-debs: lintian"
    # --fail-on warning: an error or a warning that no override explains fails the build.
    if lintian --fail-on error,warning --info "${debs[@]}"; then
        echo "build-debs: lintian found nothing beyond the explained overrides"
    else
        echo "build-debs: lintian reported the problems above" >&2
        status=1
    fi
fi

echo
printf '%-26s %-12s %12s %16s\n' package version "deb (KiB)" "installed (KiB)"
for deb in "${debs[@]}"; do
    printf '%-26s %-12s %12s %16s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
        "$(( $(stat -c %s "$deb") / 1024 ))" "$(dpkg-deb -f "$deb" Installed-Size)"
done
echo
printf '%s\n' "${debs[@]}"
exit "$status"
