#!/usr/bin/env bash
# The aggregation lab's sweep (docs/aggregation.md): gleaner-sim over rules x agent counts on one job, one JSON and
# one CSV per run, then the table of speedups. Runs JOBS at a time (default 2); a run whose JSON exists is kept, so
# an interrupted sweep continues where it stopped.
#
#   tests/bench/aggregation-lab.sh [--job FILE] [--out DIR] [--epochs E] [--agents "1 2 4 8 16"]
#                                  [--rules "vc-asgd fedbuff ..."] [--speeds SPEEDS] [--seed S] [--jobs N]
#
# Each rule is a name (its defaults) or NAME=JSON for a variant, e.g. 'dn09={"rule":"delayed-nesterov","momentum":0.9}'.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
job="$root/resources/jobs/fashion-mnist-cnn.json"
out="$root/build/lab"
epochs=3
agents="1 2 4 8 16"
rules="vc-asgd fedasync fedbuff delayed-nesterov"
speeds=1
seed=1
jobs=2
sim="${GLEANER_SIM:-$root/build/bin/gleaner-sim}"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --job) job=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --epochs) epochs=$2; shift 2 ;;
        --agents) agents=$2; shift 2 ;;
        --rules) rules=$2; shift 2 ;;
        --speeds) speeds=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "aggregation-lab: unknown option $1 (--help lists them)" >&2; exit 2 ;;
    esac
done
[[ -x "$sim" ]] || { echo "aggregation-lab: $sim is missing; build first (cmake --build build)" >&2; exit 1; }
mkdir -p "$out"
tag=$(echo "$speeds" | tr ':,' '__')

runs=()
runs+=("baseline|--baseline")
for rule in $rules; do
    name=${rule%%=*}
    spec=${rule#*=}
    for c in $agents; do
        runs+=("$name-c$c-s$tag|--agents $c --speeds $speeds --rule $spec")
    done
done

run_one() {
    local name=${1%%|*} args=${1#*|}
    [[ -s "$out/$name.json" ]] && return 0
    echo "aggregation-lab: $name" >&2
    # shellcheck disable=SC2086
    "$sim" "$job" $args --epochs "$epochs" --seed "$seed" --ignore-target --quiet \
        --json "$out/$name.json.part" --csv "$out/$name.csv" && mv "$out/$name.json.part" "$out/$name.json"
}
export -f run_one
export sim job epochs seed out
printf '%s\n' "${runs[@]}" | xargs -d '\n' -P "$jobs" -I{} bash -c 'run_one "$@"' _ {}
python3 "$here/aggregation-table.py" "$out"
