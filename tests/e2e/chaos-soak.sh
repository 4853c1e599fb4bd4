#!/usr/bin/env bash
# chaos-soak.sh [--build DIR] [--minutes M] [--nice N] [CHAOS_SOAK_OPTION...]: builds what the chaos soak needs
# (gleaner-coordinator, gleaner-agent, gleaner-worker, chaos_soak) in DIR (default build/, configured if it is
# not) and runs tests/e2e/ChaosSoak for M minutes (default 10) at nice N (default 10), with the data and the
# HOME/XDG folders of every process under a scratch folder, never the user's. Other options go to chaos_soak
# (--agents, --seed, --kill-interval-ms, --down-ms, --coordinator-kill-probability, --job, --keep, --json; see
# --help). Exit status: chaos_soak's (0 every invariant held, 1 one broke and the scratch folder is kept).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build="$root/build"
minutes=10
niceness=10
pass=()

usage() {
    sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

while [ "$#" -gt 0 ]; do
    case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --minutes) minutes=$2; shift 2 ;;
    --nice) niceness=$2; shift 2 ;;
    -h | --help)
        usage
        if [ -x "$build/tests/chaos_soak" ]; then echo; "$build/tests/chaos_soak" --help; fi
        exit 0 ;;
    *) pass+=("$1"); shift ;;
    esac
done
case "$minutes" in '' | *[!0-9]*) echo "chaos-soak.sh: --minutes \"$minutes\": expected a whole number" >&2; exit 2 ;; esac

if [ ! -f "$build/build.ninja" ]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGLEANER_WERROR=ON >&2
fi
# The build's output goes to stderr: stdout is chaos_soak's alone (its --json report).
cmake --build "$build" --parallel "${GLEANER_JOBS:-2}" \
    --target gleaner-coordinator gleaner-agent gleaner-worker chaos_soak >&2

home=$(mktemp -d "${TMPDIR:-/tmp}/gleaner-soak-home-XXXXXX")
trap 'rm -rf "$home"' EXIT
export HOME="$home" XDG_CONFIG_HOME="$home/config" XDG_CACHE_HOME="$home/cache" XDG_DATA_HOME="$home/data" \
    XDG_RUNTIME_DIR="$home/run" QT_QPA_PLATFORM=offscreen
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
echo "chaos-soak.sh: $minutes minute(s) of chaos at nice $niceness; progress on stderr" >&2
status=0
nice -n "$niceness" "$build/tests/chaos_soak" --seconds $((minutes * 60)) "${pass[@]}" || status=$?
exit "$status"
