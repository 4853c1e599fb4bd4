#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz in build-fuzz/ (clang 14, GLEANER_FUZZ=ON) and runs each over its
# seed corpus, one after the other, at the lowest CPU priority. Prints one JSON line per target and exits
# non-zero when any target found a crash, a leak, a timeout or a broken promise; the input that caused it is
# kept in build-fuzz/fuzz-work/TARGET/crashes/ and named in the JSON line.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: tests/fuzz/run-fuzzers.sh [--runs N] [--seconds S] [--build-dir DIR] [TARGET...]

Builds the fuzz targets with clang and runs each TARGET (all when none is named: safetensors, manifest,
envelope, key_rotation, jobspec, http_request, http_range, control, update_codec, numpy, torchscript_archive, torchscript_pickle) for N executions (-runs) or S seconds
(-max_total_time), whichever ends first; without either, for 60 seconds. The seeds come from
tests/fuzz/corpus/TARGET/ and are only read; inputs libFuzzer finds are kept in DIR/fuzz-work/TARGET/corpus
and reused by the next run.

Prints one JSON line per target:
  {"target":"control","executions":1000000,"seconds":61.2,"exec_per_s":16339,"crashes":0,"slow_units":0,"reproducer":null}
and exits 1 when a target crashed (its reproducer is the file named), 2 on a usage or build error.

Installs the missing packages of installers/fuzz-packages.txt first (as root, or through sudo).

  --runs N          stop each target after N executions
  --seconds S       stop each target after S seconds
  --build-dir DIR   the build folder (default: build-fuzz/ in the repository)
  -h, --help        this text

Reproduce a finding with: DIR/fuzz/fuzz_TARGET FILE
EOF
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
runs=""
seconds=""
build="$root/build-fuzz"
targets=()
while [[ $# -gt 0 ]]; do
    case "$1" in
    --runs) runs="${2:?--runs needs a number}"; shift 2 ;;
    --seconds) seconds="${2:?--seconds needs a number}"; shift 2 ;;
    --build-dir) build="${2:?--build-dir needs a folder}"; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "run-fuzzers: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
    esac
done
for number in "$runs" "$seconds"; do
    if [[ -n "$number" && ! "$number" =~ ^[1-9][0-9]*$ ]]; then
        echo "run-fuzzers: --runs and --seconds take a positive whole number, not \"$number\"" >&2
        exit 2
    fi
done
[[ -z "$runs" && -z "$seconds" ]] && seconds=60

"$root/installers/install-deps.sh" "$root/installers/fuzz-packages.txt" >&2

# The fuzz build is its own folder and its own configuration: the normal build stays with its compiler.
if [[ ! -f "$build/CMakeCache.txt" ]]; then
    cmake -S "$root" -B "$build" -G Ninja -DGLEANER_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++-14 \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2 || exit 2
fi
nice -n 19 cmake --build "$build" -j "$(nproc)" >&2 || exit 2

declare -A maxLen
while read -r name length; do
    [[ -n "$name" ]] && maxLen[$name]=$length
done <"$build/fuzz/targets.txt"
if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(cut -d' ' -f1 "$build/fuzz/targets.txt")
fi
for target in "${targets[@]}"; do
    if [[ -z "${maxLen[$target]:-}" ]]; then
        echo "run-fuzzers: no fuzz target \"$target\"; the targets are: ${!maxLen[*]}" >&2
        exit 2
    fi
done

# Symbolized stack traces in reports; a leak, like a crash, fails the run.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
command -v llvm-symbolizer-14 >/dev/null 2>&1 && export ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer-14)
[[ -z "${ASAN_SYMBOLIZER_PATH:-}" && -x /usr/lib/llvm-14/bin/llvm-symbolizer ]] &&
    export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer

failed=0
for target in "${targets[@]}"; do
    work="$build/fuzz-work/$target"
    mkdir -p "$work/corpus" "$work/crashes"
    log="$work/last-run.log"
    limits=()
    [[ -n "$runs" ]] && limits+=("-runs=$runs")
    [[ -n "$seconds" ]] && limits+=("-max_total_time=$seconds")
    # Findings are the inputs libFuzzer saves as crash-, timeout-, oom- or leak-; a slow-unit- file is only
    # an input that took longer than usual (a loaded machine makes those), reported apart.
    findings() { find "$work/crashes" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) | wc -l; }
    slow() { find "$work/crashes" -type f -name 'slow-unit-*' | wc -l; }
    before=$(findings)
    slowBefore=$(slow)
    start=$(date +%s.%N)
    status=0
    # One input over 10 s is a finding (a parser that loops), as is one over 2 GB of memory.
    nice -n 19 "$build/fuzz/fuzz_$target" "${limits[@]}" -max_len="${maxLen[$target]}" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/crashes/" \
        "$work/corpus" "$root/tests/fuzz/corpus/$target" >"$log" 2>&1 || status=$?
    end=$(date +%s.%N)
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if [[ -z "$executions" ]]; then # a crash ends the run before the final statistics
        executions=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
    fi
    executions=${executions:-0}
    elapsed=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    rate=$(awk -v n="$executions" -v s="$elapsed" 'BEGIN { printf "%d", (s > 0 ? n / s : 0) }')
    crashes=$(($(findings) - before))
    slowUnits=$(($(slow) - slowBefore))
    reproducer=null
    if [[ $status -ne 0 ]]; then
        newest=$(ls -t "$work/crashes" 2>/dev/null | grep -v '^slow-unit-' | head -n 1)
        [[ -n "$newest" ]] && reproducer="\"$work/crashes/$newest\""
        [[ $crashes -eq 0 ]] && crashes=1 # it died without saving an input (e.g. in its initialisation)
        failed=1
        echo "run-fuzzers: $target failed (exit $status); its report is in $log" >&2
        grep -E -m 5 'ERROR|fuzz check failed|SUMMARY' "$log" >&2 || true
    fi
    printf '{"target":"%s","executions":%s,"seconds":%s,"exec_per_s":%s,"crashes":%s,"slow_units":%s,"reproducer":%s}\n' \
        "$target" "$executions" "$elapsed" "$rate" "$crashes" "$slowUnits" "$reproducer"
done
exit $failed
