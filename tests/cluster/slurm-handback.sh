#!/usr/bin/env bash
# Checks on a real, single-node Slurm that installers/slurm/gleaner-agent.sbatch, run as an array of 2 real agent
# jobs against a real coordinator, loses at most the work since the last checkpoint when one job is cancelled
# mid-subtask, and that the training job still completes:
#
#   tests/cluster/slurm-handback.sh [BIN]          BIN: the folder with the gleaner binaries (default build/bin)
#
#  1. A coordinator (`gleaner-coordinator init` on a free loopback port, `serve` in the background), an enrollment
#     token file, and a CNN job on Fashion-MNIST: 4 shards of 12,000 images, 4 local epochs (1,500 steps a subtask),
#     max_epochs 1, target 0.99 (never reached: the job completes after its one epoch of 4 workunits),
#     deadline_seconds 600, so that only a hand-back, not a lease's deadline, can give a workunit to another agent
#     within the test's time.
#  2. munged, slurmctld and slurmd as root in a scratch folder, on loopback ports picked at random.
#  3. `sbatch --array=0-1` of the batch script with GLEANER_AGENT=BIN/gleaner-agent, GLEANER_THREADS=1 (2 cores,
#     the node oversubscribed), GLEANER_GRACE=20 (under KillWait), GLEANER_IDLE_EXIT=60 and
#     GLEANER_AGENT_ARGS="--checkpoint-interval 5 --progress-interval 2".
#  4. Once an array task's agent (`gleaner-agent status --json`) has trained its subtask for more than a checkpoint
#     interval and is less than half-way through it, that task is cancelled: `scancel --batch --signal=TERM`
#     (what #SBATCH --signal=B:TERM@120 does at the time limit; the script's trap passes it on), or a plain
#     `scancel` with SLURM_HANDBACK_CANCEL=plain (Slurm signals every process of the job, the worker included).
#  5. Checks: the cancelled agent logs `lease L handed back: the next agent resumes it at step N` with N > 0 and N
#     at least the step it had reached a checkpoint interval before the cancel (what "at most the work since its
#     last checkpoint" allows), keeps no task folder, exits 0, and the script reports that; the other array task's
#     agent (not a requeue: scancel ends the task for good) logs `worker resumed from the checkpoint lease L handed
#     back, at step N`, the same N; the job is `completed` within 10 minutes of its submission with
#     updates_received = updates = shards (one fold per workunit, none from the hand-back); no agent has a timed-out or
#     failed lease; the surviving agent exits 0 once the coordinator has no work left (--until-empty).
#  Last line: a JSON summary (handed-back and resumed steps, seconds from the cancel to the resume, job seconds).
#
# SLURM_HANDBACK_SHARDS sets the number of shards (default 4; with 1, the second agent gets the workunit only from
# the hand-back), SLURM_HANDBACK_EPOCHS local_epochs (default 4), SLURM_HANDBACK_CANCEL=plain a plain scancel.
# SLURM_HANDBACK_KEEP=1 keeps the scratch folder.
# Exit status: 0 passed, 1 failed (with the logs' tails), 77 skipped (no Slurm, munge or jq, not root, no built
# binaries or no Fashion-MNIST). Every daemon it started (coordinator, munged, slurmctld, slurmd) is stopped by its
# pid on the way out, and any gleaner process left under the scratch folder is killed by its pid.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
sbatch_script="${SLURM_HANDBACK_SCRIPT:-$root/installers/slurm/gleaner-agent.sbatch}"
bin=$(cd "${1:-$root/build/bin}" 2>/dev/null && pwd) || bin="${1:-$root/build/bin}"
dataset="${GLEANER_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"
shards="${SLURM_HANDBACK_SHARDS:-4}"
local_epochs="${SLURM_HANDBACK_EPOCHS:-4}"
limit_train=$((12000 * shards)) # 12,000 images a shard: 1,500 steps of 32 a subtask, 35 to 60 s on one core
checkpoint_interval=5
progress_interval=2
grace=20
idle_exit=60 # with 1 shard the second agent waits for work from the start
job_limit_s=600 # from the job's submission to `completed`

skip() {
    echo "SKIP: $*"
    exit 77
}
for tool in munged slurmctld slurmd sbatch squeue scancel scontrol sinfo jq; do
    command -v "$tool" >/dev/null 2>&1 ||
        skip "$tool is not installed (Debian: apt-get install munge slurmctld slurmd slurm-client jq)"
done
[[ $(id -u) -eq 0 ]] || skip "slurmd must run as root to launch jobs; run this as root in a throwaway machine"
for program in gleaner-coordinator gleaner-agent gleaner-worker; do
    [[ -x "$bin/$program" ]] || skip "no $bin/$program: build first, or pass the folder of the binaries"
done
[[ -r "$dataset/train-images-idx3-ubyte.gz" ]] || skip "no Fashion-MNIST in $dataset (set GLEANER_FASHION_MNIST)"
[[ -r "$sbatch_script" ]] || { echo "FAIL: cannot read $sbatch_script"; exit 1; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/slurm-handback.XXXXXX")
chmod 0755 "$scratch" # munged wants every folder above its socket to be searchable
pids=()               # daemons, in the order started: coordinator, munged, slurmctld, slurmd
names=()
failures=0
array_job=""
coord="$scratch/coordinator"

# Every gleaner process (agent or worker) whose command line names the scratch folder.
gleaner_pids() {
    local dir pid argv
    for dir in /proc/[0-9]*; do
        pid=${dir#/proc/}
        argv=$(tr '\0' ' ' <"$dir/cmdline" 2>/dev/null) || continue
        [[ "$argv" =~ ^[^\ ]*gleaner-(agent|worker)\  && "$argv" == *"$scratch"* ]] && echo "$pid"
    done
    return 0
}

stop_all() {
    local rc=$? pid i
    trap - EXIT
    if [[ -n "${SLURM_CONF:-}" && -n "$array_job" && -n "$(squeue --noheader --format %i 2>/dev/null || true)" ]]; then
        scancel --full --signal=KILL "$array_job" 2>/dev/null || true
        sleep 2
    fi
    for pid in $(gleaner_pids); do kill -KILL "$pid" 2>/dev/null || true; done
    # Newest first: slurmd, slurmctld, munged, then the coordinator.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        pid=${pids[i]}
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 75); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$pid" 2>/dev/null; then
            echo "WARNING: ${names[i]} (pid $pid) still runs 15 s after SIGTERM; killing it"
            if [[ ${names[i]} == gleaner-coordinator ]] && command -v gdb >/dev/null 2>&1; then
                gdb -p "$pid" -batch -ex 'thread apply all bt' >"$scratch/coordinator-stuck.txt" 2>&1 || true
                echo "its threads' stacks: $scratch/coordinator-stuck.txt"
            fi
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
    if [[ "${SLURM_HANDBACK_KEEP:-0}" == 1 || $rc -ne 0 ]]; then
        echo "scratch folder kept: $scratch"
    else
        rm -rf -- "$scratch"
    fi
    exit "$rc"
}
trap stop_all EXIT

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
ok() { echo "ok: $*"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
        echo $((20000 + RANDOM % 40000))
}

out_of() { echo "$scratch/out/${array_job}_$1.txt"; }
log_tails() {
    local f
    for f in "$scratch/coordinator.log" "$scratch"/out/*.txt; do
        [[ -e "$f" ]] || continue
        echo "---- $f (last 30 lines)"
        tail -n 30 "$f"
    done
    echo "---- squeue"
    squeue 2>&1 || true
}
die() {
    fail "$*"
    log_tails
    exit 1
}

# ---- the coordinator and the training job ----------------------------------------------------------------------

export QT_MESSAGE_PATTERN='%{time hh:mm:ss.zzz} %{category}: %{message}'
coord_port=$(free_port)
"$bin/gleaner-coordinator" init --data-dir "$coord" --listen "127.0.0.1:$coord_port" --json >"$scratch/init.json" ||
    die "gleaner-coordinator init failed"
ca=$(jq -r .ca_certificate "$scratch/init.json")
[[ -r "$ca" ]] || die "gleaner-coordinator init named no readable CA certificate: $(cat "$scratch/init.json")"
"$bin/gleaner-coordinator" serve --data-dir "$coord" >"$scratch/coordinator.out" 2>>"$scratch/coordinator.log" &
pids+=($!) names+=(gleaner-coordinator)
announced() { [[ "$(head -n 1 "$scratch/coordinator.out" 2>/dev/null)" == "port $coord_port" ]] || ! kill -0 "${pids[0]}" 2>/dev/null; }
if ! wait_for 30 announced || ! kill -0 "${pids[0]}" 2>/dev/null; then
    die "gleaner-coordinator serve did not print \"port $coord_port\""
fi
url="https://127.0.0.1:$coord_port"
coordinator() { "$bin/gleaner-coordinator" "$@" --data-dir "$coord"; }

(umask 077 && coordinator token create --uses 4 --json | jq -r .token >"$scratch/enroll.token")
[[ -s "$scratch/enroll.token" && "$(cat "$scratch/enroll.token")" != null ]] || die "token create gave no token"

jq -n --arg dir "$dataset" --argjson limit "$limit_train" --argjson shards "$shards" --argjson epochs "$local_epochs" '{
    name: "slurm-handback", dataset: {format: "fashion-mnist", dir: $dir}, limit_train: $limit,
    model: {arch: "cnn", input_shape: [1, 28, 28], num_classes: 10},
    shards: $shards, local_epochs: $epochs, batch_size: 32,
    optimizer: {name: "sgd", lr: 0.05, momentum: 0.9}, aggregation: {rule: "vc-asgd", alpha: "epoch"},
    target_accuracy: 0.99, max_epochs: 1, deadline_seconds: 600, replication: 1, seed: 7}' >"$scratch/job.json"
job_id=$(coordinator job submit "$scratch/job.json" --json | jq -r .id)
[[ "$job_id" =~ ^[0-9]+$ ]] || die "job submit gave no id"
job_submitted=$(now)
job_status() { coordinator job status "$job_id" --json 2>/dev/null; }
# Seconds left of the job's limit (at least 1).
job_time_left() { awk -v a="$job_submitted" -v b="$(now)" -v l="$job_limit_s" 'BEGIN { x = int(l - (b - a)); print (x > 0 ? x : 1) }'; }
ok "coordinator on $url, job $job_id: CNN, $shards shards x $local_epochs local epochs, deadline 600 s"

# ---- munge and Slurm on loopback ----------------------------------------------------------------------------

mkdir -p "$scratch"/{munge,state,spool,log,data,out}
chmod 0700 "$scratch/munge"
head -c 1024 /dev/urandom >"$scratch/munge/munge.key"
chmod 0400 "$scratch/munge/munge.key"
munged --foreground --force --socket="$scratch/munge/munge.socket" --key-file="$scratch/munge/munge.key" \
    --pid-file="$scratch/munge/munged.pid" --seed-file="$scratch/munge/munge.seed" \
    --log-file="$scratch/log/munged.log" 2>>"$scratch/log/munged.log" &
pids+=($!) names+=(munged)
wait_for 10 test -S "$scratch/munge/munge.socket" || die "munged did not start: $(cat "$scratch/log/munged.log")"

node=$(hostname -s)
user=$(id -un)
export SLURM_CONF="$scratch/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=handback
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$scratch/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$scratch/state
SlurmdSpoolDir=$scratch/spool
SlurmctldPidFile=$scratch/slurmctld.pid
SlurmdPidFile=$scratch/slurmd.pid
SlurmctldLogFile=$scratch/log/slurmctld.log
SlurmdLogFile=$scratch/log/slurmd.log
PlugStackConfig=$scratch/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=30
MinJobAge=600
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=handback Nodes=$node Default=YES MaxTime=INFINITE OverSubscribe=YES State=UP
EOF
: >"$scratch/plugstack.conf"

slurmctld -D -i -f "$SLURM_CONF" 2>>"$scratch/log/slurmctld.log" &
pids+=($!) names+=(slurmctld)
slurmd -D -N "$node" -f "$SLURM_CONF" 2>>"$scratch/log/slurmd.log" &
pids+=($!) names+=(slurmd)
node_idle() { [[ "$(sinfo --noheader --nodes "$node" --format %T 2>/dev/null)" == idle ]]; }
if ! wait_for 60 node_idle; then
    grep -hiE 'error|fatal' "$scratch"/log/*.log | grep -v pmix | tail -n 20
    die "the Slurm node did not come up idle"
fi
ok "munged, slurmctld and slurmd $(slurmctld -V | awk '{print $2}') up on loopback, node $node with $(nproc) CPUs"

# ---- two agents as an array job -----------------------------------------------------------------------------------

export GLEANER_COORDINATOR="$url" GLEANER_TOKEN_FILE="$scratch/enroll.token" GLEANER_CA="$ca"
export GLEANER_AGENT="$bin/gleaner-agent" GLEANER_DATA_ROOT="$scratch/data" GLEANER_THREADS=1
export GLEANER_GRACE=$grace GLEANER_IDLE_EXIT=$idle_exit
export GLEANER_AGENT_ARGS="--checkpoint-interval $checkpoint_interval --progress-interval $progress_interval"
array_job=$(sbatch --parsable --array=0-1 --time=30 --oversubscribe --cpus-per-task=1 --chdir="$scratch" \
    --output="$scratch/out/%A_%a.txt" "$sbatch_script")
[[ "$array_job" =~ ^[0-9]+$ ]] || die "sbatch gave no job id: $array_job"
agent_dir() { echo "$scratch/data/agent-$array_job-$1"; }
agent_status() { "$bin/gleaner-agent" status --json --data-dir "$(agent_dir "$1")" 2>/dev/null; }

# Polls both agents until one has trained its subtask for longer than a checkpoint interval and is less than
# half-way through it (a stop then hands it back rather than finishing it). Each sample goes to
# $scratch/steps-INDEX as "time lease step of".
victim=""
pick_victim() {
    local i line t lease step of first
    for i in 0 1; do
        line=$(agent_status "$i" | jq -r '.subtasks[0] | select(. != null) | "\(.lease_id) \(.step) \(.of)"' 2>/dev/null) ||
            continue
        [[ -n "$line" ]] || continue
        read -r lease step of <<<"$line"
        t=$(now)
        echo "$t $lease $step $of" >>"$scratch/steps-$i"
        ((step > 0 && of > 0)) || continue
        first=$(awk -v l="$lease" '$2 == l && $3 > 0 { print $1; exit }' "$scratch/steps-$i")
        if ((2 * step >= of)); then
            continue # too far along: it would be finished, not handed back
        fi
        if awk -v a="$first" -v b="$t" -v w=$((checkpoint_interval + 2 * progress_interval)) 'BEGIN { exit !(b - a > w) }'; then
            victim=$i
            return 0
        fi
    done
    return 1
}
job_running() { [[ "$(job_status | jq -r .state)" == running ]]; }
pick_or_give_up() { pick_victim || ! job_running; }
if ! wait_for 300 pick_or_give_up || [[ -z "$victim" ]]; then
    die "no agent trained a subtask for ${checkpoint_interval}+ s while under half-way within 300 s (job: $(job_status | jq -r .state))"
fi
survivor=$((1 - victim))
read -r _ lease last_step of < <(tail -n 1 "$scratch/steps-$victim")
cancelled=$(now)
# The highest step reported at least a checkpoint interval (and a progress report) before the cancel: the worker
# had checkpointed at least that far.
checkpointed_step=$(awk -v l="$lease" -v before="$(elapsed $((checkpoint_interval + progress_interval)) "$cancelled")" \
    '$2 == l && $1 <= before && $3 > s { s = $3 } END { print s + 0 }' "$scratch/steps-$victim")
if [[ "${SLURM_HANDBACK_CANCEL:-batch}" == plain ]]; then
    cancel_how="scancel"
    scancel "${array_job}_$victim"
else
    cancel_how="scancel --batch --signal=TERM"
    scancel --batch --signal=TERM "${array_job}_$victim"
fi
ok "$cancel_how of array task $victim at step $last_step of $of of lease $lease (the worker had checkpointed step $checkpointed_step or later)"

# ---- the hand-back and the resume ---------------------------------------------------------------------------------

victim_out=$(out_of "$victim")
survivor_out=$(out_of "$survivor")
left_agent() { grep -qE ": lease $lease (handed back|could not be handed back)|the agent exited" "$victim_out"; }
wait_for $((grace + 30)) left_agent || die "array task $victim logged no hand-back of lease $lease within $((grace + 30)) s"
handed_line=$(grep -E ": lease $lease handed back" "$victim_out" | head -n 1 || true)
handed_step=""
if [[ "$handed_line" =~ "the next agent resumes it at step "([0-9]+) ]]; then
    handed_step=${BASH_REMATCH[1]}
    ((handed_step > 0)) || fail "the hand-back kept step 0: $handed_line"
    ((handed_step >= checkpointed_step)) ||
        fail "the hand-back is at step $handed_step, before step $checkpointed_step that a checkpoint had kept: work lost"
    ok "array task $victim: $handed_line"
else
    die "array task $victim did not hand lease $lease back with a checkpoint: ${handed_line:-$(grep -E "lease $lease" "$victim_out" | tail -n 3)}"
fi

resumed_re="lease ([0-9a-f]+): worker resumed from the checkpoint lease $lease handed back, at step ([0-9]+) of ([0-9]+)"
# A file of the successor's lease that the coordinator refuses to serve (404) is not retried into success: say so now.
refused_re="downloading the files of lease [0-9a-f]+ failed: .*(404|no such file)"
resumed_or_refused() { grep -qE "$resumed_re|$refused_re" "$survivor_out"; }
wait_for "$(job_time_left)" resumed_or_refused ||
    die "array task $survivor never resumed lease $lease from its checkpoint"
if ! grep -qE "$resumed_re" "$survivor_out"; then
    refused=$(grep -E "$refused_re" "$survivor_out" | head -n 1)
    echo "  the successor's lease: $(grep -E "leased [0-9a-f]+: " "$survivor_out" | tail -n 1)"
    echo "  the coordinator: $(grep -E "handed lease $lease back" "$scratch/coordinator.log")"
    die "array task $survivor cannot resume lease $lease: the coordinator will not serve a file its lease names: $refused"
fi
resumed_at=$(now)
resumed_line=$(grep -oE "$resumed_re" "$survivor_out" | head -n 1)
[[ "$resumed_line" =~ $resumed_re ]]
new_lease=${BASH_REMATCH[1]} resumed_step=${BASH_REMATCH[2]} resumed_of=${BASH_REMATCH[3]}
((resumed_step == handed_step)) || fail "array task $survivor resumed at step $resumed_step, not at the handed-back $handed_step"
((resumed_step < resumed_of)) || fail "the resume at step $resumed_step of $resumed_of left nothing to train"
if grep -qE ": lease $lease (handed back|could not be handed back)" "$survivor_out" ||
    grep -qE "worker resumed from the checkpoint lease [0-9a-f]+ handed back" "$victim_out"; then
    fail "the logs mix up the two array tasks"
fi
ok "array task $survivor: $resumed_line, $(elapsed "$cancelled" "$resumed_at") s after the cancel"

# ---- the job completes; the agents leave -------------------------------------------------------------------------

completed() { [[ "$(job_status | jq -r .state)" == completed ]]; }
wait_for "$(job_time_left)" completed || die "job $job_id is not completed within $job_limit_s s of its submission: $(job_status | jq -c 'del(.history)')"
job_done=$(now)
final=$(job_status)
received=$(jq -r .updates_received <<<"$final")
updates=$(jq -r .updates <<<"$final")
((received == shards && updates == shards)) ||
    fail "job $job_id has updates_received $received and updates $updates, not $shards each (one fold per workunit)"
ok "job $job_id completed $(elapsed "$job_submitted" "$job_done") s after its submission: updates_received $received, updates $updates, accuracy $(jq -r .accuracy <<<"$final")"

coordinator agent list --json >"$scratch/agents.json"
bad=$(jq -c '[.agents[] | select(.timed_out != 0 or .failed != 0 or .invalid != 0) | {name, done, timed_out, failed, invalid}]' "$scratch/agents.json")
[[ "$bad" == "[]" ]] || fail "agents with timed-out, failed or invalid leases: $bad"
[[ "$(jq '.agents | length' "$scratch/agents.json")" == 2 ]] || fail "not 2 agents enrolled: $(jq -c '[.agents[] | .name]' "$scratch/agents.json")"

gone() { [[ -z "$(squeue --noheader --jobs "$array_job" --format %i 2>/dev/null)" ]]; }
wait_for $((idle_exit + 90)) gone || fail "array job $array_job still runs $((idle_exit + 90)) s after the job completed"
job_field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
for i in 0 1; do
    out=$(out_of "$i")
    grep -q "the agent exited with status 0" "$out" ||
        fail "array task $i: the script did not report the agent's exit 0: $(grep 'the agent exited' "$out" || echo none)"
done
grep -q "got SIGTERM; passing it to the agent" "$victim_out" || fail "array task $victim: the script's trap did not run"
victim_state=$(job_field "${array_job}_$victim" JobState)
[[ "$cancel_how" == scancel && "$victim_state" == CANCELLED || "$cancel_how" != scancel && "$victim_state" == COMPLETED ]] ||
    fail "array task $victim ended $victim_state"
[[ "$(job_field "${array_job}_$survivor" JobState)" == COMPLETED ]] ||
    fail "array task $survivor ended $(job_field "${array_job}_$survivor" JobState), not COMPLETED"
leftover=$(find "$(agent_dir "$victim")/tasks" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | head -n 3)
[[ -z "$leftover" ]] || fail "array task $victim kept task folders after handing back: $leftover"
[[ -z "$(gleaner_pids)" ]] || fail "gleaner processes outlived the array job: $(gleaner_pids | tr '\n' ' ')"
((failures > 0)) || ok "both array tasks ended with the agent's exit 0 (task $victim $victim_state, task $survivor COMPLETED), no task folder left"

summary=$(jq -nc --arg cancel "$cancel_how" --arg lease "$lease" --arg new_lease "$new_lease" \
    --argjson last "$last_step" --argjson checkpointed "$checkpointed_step" --argjson handed "$handed_step" \
    --argjson resumed "$resumed_step" --argjson of "$resumed_of" \
    --argjson to_resume "$(elapsed "$cancelled" "$resumed_at")" --argjson job_s "$(elapsed "$job_submitted" "$job_done")" \
    --argjson received "$received" --argjson failures "$failures" \
    '{cancel: $cancel, lease: $lease, step_at_cancel: $last, checkpointed_step: $checkpointed, handed_back_step: $handed,
      resumed_lease: $new_lease, resumed_step: $resumed, of: $of, seconds_cancel_to_resume: $to_resume,
      job_seconds: $job_s, updates_received: $received, failures: $failures}')
if ((failures > 0)); then
    log_tails
    echo "FAILED: $failures checks"
    echo "$summary"
    exit 1
fi
echo "PASS"
echo "$summary"
