#!/usr/bin/env bash
# The aggregation lab checked against the real system (docs/aggregation.md): a real coordinator and C real agents
# (one worker thread each, on this machine) train the default job with its target out of reach; the script reads
# when each validation happened, measures the agents' speed, their overhead per subtask (download, worker start,
# upload) and how much a subtask's time varies, runs gleaner-sim with them for the same C, and prints JSON:
# wall-clock and simulated time to the baseline's one-pass accuracy, the best accuracy per epoch of both, and their
# ratio.
#
#   tests/bench/convergence-real.sh [--agents C] [--epochs E] [--rule JSON] [--upload JSON] [--download DENSITY]
#                                   [--target ACCURACY] [--out DIR]
#
# --target defaults to the one-pass accuracy of `gleaner-sim JOB --baseline` (run once and kept in DIR).
# --upload and --download set the job's "upload" object and "download" density; the JSON then also gives the
# bytes an update and a subtask's weights cost, on the wire (the coordinator's counts) and in the lab.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${GLEANER_BIN:-$root/build/bin}
agents=1
epochs=2
rule=""
upload=""
download=""
target=""
out=$root/build/convergence
while [[ $# -gt 0 ]]; do
    case "$1" in
        --agents) agents=$2; shift 2 ;;
        --epochs) epochs=$2; shift 2 ;;
        --rule) rule=$2; shift 2 ;;
        --upload) upload=$2; shift 2 ;;
        --download) download=$2; shift 2 ;;
        --target) target=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "convergence-real: unknown option $1 (--help lists them)" >&2; exit 2 ;;
    esac
done
for tool in gleaner-coordinator gleaner-agent gleaner-worker gleaner-sim; do
    [[ -x "$bin/$tool" ]] || { echo "convergence-real: $bin/$tool is missing; build first" >&2; exit 1; }
done
mkdir -p "$out"
run=$out/c$agents
rm -rf "$run"
mkdir -p "$run/logs"

# The job: the default one, with the target out of reach, E epochs and the rule asked for.
python3 - "$root/resources/jobs/fashion-mnist-cnn.json" "$run/job.json" "$epochs" "$rule" "$upload" "$download" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec.update({"target_accuracy": 0.999, "max_epochs": int(sys.argv[3])})
if sys.argv[4]:
    rule = json.loads(sys.argv[4])
    # The job's average stays unless the rule names its own (as gleaner-sim --rule does).
    if "ema_decay" in spec.get("aggregation", {}) and "ema_decay" not in rule:
        rule["ema_decay"] = spec["aggregation"]["ema_decay"]
    spec["aggregation"] = rule
if sys.argv[5]:
    spec["upload"] = json.loads(sys.argv[5])
if sys.argv[6]:
    spec["download"] = {"density": float(sys.argv[6])}
json.dump(spec, open(sys.argv[2], "w"), indent=1)
PY

if [[ -z "$target" ]]; then
    # The baseline validates what the job validates (the average of its weights when it keeps one): one per
    # ema_decay, kept in DIR.
    ema=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("aggregation", {}).get("ema_decay", 0))' \
          "$run/job.json")
    baseline=$out/baseline-ema$ema.json
    [[ -s "$baseline" ]] || "$bin/gleaner-sim" "$run/job.json" --baseline --epochs 1 --ignore-target --quiet \
        --json "$baseline"
    target=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["epochs"][0]["accuracy"])' "$baseline")
fi

pids=()
stop_all() {
    trap - INT TERM EXIT
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap 'stop_all; exit 130' INT TERM
trap stop_all EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
data=$run/coordinator
"$bin/gleaner-coordinator" init --data-dir "$data" --listen "127.0.0.1:$port" --json >"$run/init.json"
# Intermediate validations as often as the lab's (every shards / 5 updates).
python3 - "$data/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config["validate_every_updates"] = 10
json.dump(config, open(sys.argv[1], "w"), indent=1)
PY
ca=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ca_certificate"])' "$run/init.json")
"$bin/gleaner-coordinator" serve --data-dir "$data" >"$run/logs/coordinator.out" 2>"$run/logs/coordinator.log" &
pids+=($!)
for _ in $(seq 100); do
    grep -q '^port ' "$run/logs/coordinator.out" 2>/dev/null && break
    sleep 0.1
done
job=$("$bin/gleaner-coordinator" job submit "$run/job.json" --data-dir "$data" --json |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])')
token=$("$bin/gleaner-coordinator" token create --data-dir "$data" --uses "$agents" --json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')
for n in $(seq "$agents"); do
    "$bin/gleaner-agent" enroll "https://127.0.0.1:$port" --token "$token" --ca "$ca" --name "bench-$n" \
        --data-dir "$run/agent-$n" --json >/dev/null
    "$bin/gleaner-agent" run --data-dir "$run/agent-$n" --dedicated --threads 1 2>"$run/logs/agent-$n.log" &
    pids+=($!)
done
echo "convergence-real: $agents agent(s) training job $job for $epochs epoch(s); logs in $run/logs" >&2
while :; do
    state=$("$bin/gleaner-coordinator" job status "$job" --data-dir "$data" --json |
            python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["state"], d["epoch"], d["updates"])')
    echo "convergence-real: $state" >&2
    case "$state" in completed*|failed*|cancelled*) break ;; esac
    sleep 5
done
# The bytes the coordinator counted (its job status; the download counts live in its memory).
"$bin/gleaner-coordinator" job status "$job" --data-dir "$data" --json >"$run/status.json"
"$bin/gleaner-coordinator" agent list --data-dir "$data" --json >"$run/agents.json"
stop_all

python3 - "$data/gleaner.db" "$run/agents.json" "$agents" "$target" "$run/status.json" >"$run/real.json" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
start = db.execute("SELECT MIN(issued_ms) FROM leases").fetchone()[0]
points = [{"seconds": (at - start) / 1000, "epoch": e, "epoch_end": bool(end), "accuracy": acc, "updates": upd}
          for at, e, end, acc, upd in db.execute(
              "SELECT at_ms, epoch, epoch_end, accuracy, updates FROM validations ORDER BY at_ms")]
durations = [ms / 1000 for (ms,) in db.execute("SELECT u.received_ms - l.issued_ms FROM updates u "
                                               "JOIN leases l ON l.id = u.lease_id")]
subtasks, busy = len(durations), sum(durations) * 1000
# How much a subtask's time varies: gleaner-sim's --jitter J draws a factor from 1 - J to 1 + J, whose standard
# deviation is J / sqrt(3).
mean = busy / 1000 / subtasks if subtasks else 0
jitter = (3 * sum((d - mean) ** 2 for d in durations) / subtasks) ** 0.5 / mean if mean else 0
# As the coordinator answers it: the versions folded in between the lease's base and the update's own fold.
staleness = db.execute("SELECT AVG(applied_version - 1 - base_version) FROM updates "
                       "WHERE applied_version IS NOT NULL AND applied_version > 0").fetchone()[0]
agents = json.load(open(sys.argv[2]))["agents"]
samples = sum(a["samples"] for a in agents)
train = sum(a["train_seconds"] for a in agents)
rate = samples / train if train else 0
overhead = (busy / 1000 - train) / subtasks if subtasks else 0
target = float(sys.argv[4])
reached = next((p["seconds"] for p in points if p["accuracy"] >= target), None)
transfer = json.load(open(sys.argv[5])).get("transfer", {})
leases = db.execute("SELECT COUNT(*) FROM leases").fetchone()[0]
by_role = transfer.get("downloaded_bytes_by_role", {})
weights_down = by_role.get("weights", 0) + by_role.get("weights-patch", 0)
print(json.dumps({"agents": int(sys.argv[3]), "target": target, "time_to_target": reached,
                  "upload_bytes_per_update": transfer.get("upload_bytes_per_update"),
                  "weights_bytes": transfer.get("weights_bytes"),
                  "weights_download_bytes_per_subtask": weights_down / leases if leases else None,
                  "rate": rate, "overhead_seconds": overhead, "jitter": jitter, "subtasks": subtasks, "mean_staleness": staleness,
                  "best_per_epoch": {str(e): max(p["accuracy"] for p in points if p["epoch"] == e)
                                     for e in sorted({p["epoch"] for p in points})},
                  "validations": points}, indent=1))
PY
rate=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["rate"])' "$run/real.json")
overhead=$(python3 -c 'import json, sys; print(max(0.0, json.load(open(sys.argv[1]))["overhead_seconds"]))' "$run/real.json")
jitter=$(python3 -c 'import json, sys; print(min(0.9, json.load(open(sys.argv[1]))["jitter"]))' "$run/real.json")
"$bin/gleaner-sim" "$run/job.json" --agents "$agents" --rate "$rate" --network "$overhead" --jitter "$jitter" \
    --validate-every 10 \
    --ignore-target --quiet --json "$run/sim.json"
python3 - "$run/real.json" "$run/sim.json" <<'PY'
import json, sys
real = json.load(open(sys.argv[1]))
sim = json.load(open(sys.argv[2]))
target = real["target"]
sim_time = next((p["sim_seconds"] for p in sim["validations"] if p["accuracy"] >= target), None)
report = {
    "agents": real["agents"], "target_accuracy": target, "rate_samples_per_second": round(real["rate"], 1),
    "overhead_seconds_per_subtask": round(real["overhead_seconds"], 3), "jitter": round(real["jitter"], 3),
    "real_seconds_to_target": real["time_to_target"], "sim_seconds_to_target": sim_time,
    "sim_over_real": round(sim_time / real["time_to_target"], 3) if sim_time and real["time_to_target"] else None,
    "real_mean_staleness": round(real["mean_staleness"] or 0, 2), "sim_mean_staleness": round(sim["mean_staleness"], 2),
    "weights_bytes": real["weights_bytes"],
    "real_upload_bytes_per_update": real["upload_bytes_per_update"],
    "sim_upload_bytes_per_update": sim["upload_bytes_per_update"],
    "real_weights_download_bytes_per_subtask": round(real["weights_download_bytes_per_subtask"] or 0),
    "sim_weights_download_bytes_per_subtask": sim["download_bytes_per_subtask"],
    "real_best_per_epoch": real["best_per_epoch"],
    "sim_best_per_epoch": {str(e["epoch"]): max(p["accuracy"] for p in sim["validations"] if p["epoch"] == e["epoch"])
                           for e in sim["epochs"]},
}
print(json.dumps(report, indent=1))
PY
