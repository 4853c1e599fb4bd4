#!/usr/bin/env bash
# Gleaner's demo: installs what is missing, builds, starts a coordinator with the embedded default job (a CNN on
# Fashion-MNIST, 50 shards, adaptive-nesterov, target 88% test accuracy) and two local agents, shows the training until the
# target is reached, and exports the trained model. Ctrl-C stops what this script started, and nothing else.
#
#   ./demo.sh                   everything in ./demo (replaced on each run)
#   GLEANER_DEMO_DIR=/tmp/x ./demo.sh
#   GLEANER_BUILD_DIR=build-x ./demo.sh   another build folder (default build/, shared with test.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
root=$(pwd)

# What building and the demo need: the [demo] set of installers/debian-packages.txt (./test.sh installs all).
installers/install-deps.sh --demo

jobs=${GLEANER_JOBS:-2}
echo "demo: building (the first build takes a few minutes)..."
build=${GLEANER_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGLEANER_WERROR=ON >/dev/null
cmake --build "$build" --parallel "$jobs" --target gleaner-coordinator gleaner-agent gleaner-worker
bin=$(cd "$build" && pwd)/bin

demo=${GLEANER_DEMO_DIR:-$root/demo}
if [[ -e "$demo" && ! -e "$demo/.gleaner-demo" ]]; then
    echo "demo: $demo exists and was not made by demo.sh; set GLEANER_DEMO_DIR to another folder" >&2
    exit 1
fi
rm -rf "$demo"
mkdir -p "$demo/logs"
touch "$demo/.gleaner-demo"
job_spec=$root/resources/jobs/fashion-mnist-cnn.json
model_out=$demo/fashion-mnist-cnn.safetensors

pids=()
stop_all() {
    trap - INT TERM EXIT
    if ((${#pids[@]})); then
        echo
        echo "demo: stopping what it started (pids ${pids[*]})"
        # Agents first, so that their workers checkpoint; then the coordinator.
        for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
        for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    fi
}
trap 'stop_all; exit 130' INT TERM
trap stop_all EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
json() { python3 -c "import json, sys; d = json.load(sys.stdin); print($1)"; }

"$bin/gleaner-coordinator" init --data-dir "$demo/coordinator" --listen "127.0.0.1:$port" --json >"$demo/init.json"
ca=$(json 'd["ca_certificate"]' <"$demo/init.json")
"$bin/gleaner-coordinator" serve --data-dir "$demo/coordinator" >"$demo/logs/coordinator.out" 2>"$demo/logs/coordinator.log" &
pids+=($!)
for _ in $(seq 100); do
    grep -q '^port ' "$demo/logs/coordinator.out" 2>/dev/null && break
    kill -0 "${pids[0]}" 2>/dev/null || { cat "$demo/logs/coordinator.log" >&2; exit 1; }
    sleep 0.1
done
url=https://127.0.0.1:$port
echo "demo: coordinator at $url (log: $demo/logs/coordinator.log)"

job_id=$("$bin/gleaner-coordinator" job submit "$job_spec" --data-dir "$demo/coordinator" --json | json 'd["id"]')
token=$("$bin/gleaner-coordinator" token create --data-dir "$demo/coordinator" --uses 2 --json | json 'd["token"]')
echo "demo: job $job_id submitted from $job_spec"

for n in 1 2; do
    "$bin/gleaner-agent" enroll "$url" --token "$token" --ca "$ca" --name "demo-agent-$n" \
        --data-dir "$demo/agent-$n" --json >/dev/null
    # One thread each: two agents share this machine's cores.
    "$bin/gleaner-agent" run --data-dir "$demo/agent-$n" --dedicated --threads 1 \
        2>"$demo/logs/agent-$n.log" &
    pids+=($!)
    echo "demo: agent $n running (log: $demo/logs/agent-$n.log; gleaner-agent status --data-dir $demo/agent-$n)"
done

if python3 - "$port" <<'PY' 2>/dev/null; then
import ssl, sys, urllib.request
context = ssl.create_default_context()
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
with urllib.request.urlopen(f"https://127.0.0.1:{sys.argv[1]}/", context=context, timeout=5) as r:
    sys.exit(0 if r.status == 200 and b"<html" in r.read(4096).lower() else 1)
PY
    echo "demo: dashboard at $url/ (sign in with the admin token in $demo/init.json)"
fi

echo "demo: training until ${job_spec##*/} reaches its target (Ctrl-C stops the demo)"
start=$(date +%s)
last=""
last_validations=0
while :; do
    status=$("$bin/gleaner-coordinator" job status "$job_id" --data-dir "$demo/coordinator" --json) || {
        echo "demo: the coordinator stopped; its log: $demo/logs/coordinator.log" >&2
        exit 1
    }
    fields=$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
h = [e for e in d.get("history", []) if e.get("epoch_end")]
validated = ""
if h:
    validated = "epoch %d validated: test accuracy %.2f%% (target %.0f%%)" % (
        h[-1]["epoch"], 100 * h[-1]["accuracy"], 100 * d["target_accuracy"])
progress = "epoch %d: %d updates, %d agents" % (d["epoch"], d["updates"], d["agents"])
print("|".join([d["state"], str(len(h)), validated, progress]))' "$status")
    IFS="|" read -r state validations validated progress <<<"$fields"
    elapsed=$(($(date +%s) - start))
    if [[ "$validations" != "$last_validations" && -n "$validated" ]]; then
        printf 'demo: [%2d:%02d] %s\n' $((elapsed / 60)) $((elapsed % 60)) "$validated"
        last_validations=$validations
    elif [[ "$progress" != "$last" ]]; then
        printf 'demo: [%2d:%02d] %s\n' $((elapsed / 60)) $((elapsed % 60)) "$progress"
    fi
    last=$progress
    case "$state" in
        completed) break ;;
        failed | cancelled)
            echo "demo: the job ended $state: $(json 'd.get("reason", "")' <<<"$status")" >&2
            exit 1
            ;;
    esac
    for pid in "${pids[@]}"; do
        kill -0 "$pid" 2>/dev/null || { echo "demo: process $pid stopped; see $demo/logs" >&2; exit 1; }
    done
    sleep 1
done

"$bin/gleaner-coordinator" job export "$job_id" --out "$model_out" --data-dir "$demo/coordinator" >/dev/null
accuracy=$(json '"%.2f%%" % (100 * d["accuracy"])' <<<"$status")
echo
echo "demo: target reached: test accuracy $accuracy after $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
echo "demo: the trained model is $model_out"
echo "demo: open it in Python (pip install safetensors numpy):"
echo "        from safetensors.numpy import load_file"
echo "        weights = load_file(\"$model_out\")"
echo "        print({name: t.shape for name, t in weights.items()})"
