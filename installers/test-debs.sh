#!/usr/bin/env bash
# The install test of Gleaner's Debian packages, in a fresh `debootstrap --variant=minbase bookworm` root:
# install with apt (dependencies from Debian), check files, users, modes and units, run the coordinator and the
# agent exactly as their units would (same user, ExecStart line, environment, priorities), enroll the agent from
# /etc/gleaner/policy.json, train until a subtask is uploaded, upgrade to a newer version keeping the subtask in
# flight, hand work back on a plain stop, purge. Prints a JSON summary. docs/packages.md describes it.
set -eEuo pipefail

usage() {
    cat <<'EOF'
Usage: installers/test-debs.sh [options]

Tests the packages gleaner-agent, gleaner-desktop and gleaner-coordinator in a fresh Debian 12 root. Needs root,
debootstrap, python3 and network access to Debian's archive; takes a few minutes (the first run longer: it makes
the bare root, cached as a tarball, and downloads the dependencies, cached too).

  --build-dir DIR      the build to package (default build/; installers/build-debs.sh configures and builds it)
  --debs DIR           take version A's three packages from DIR instead of building them
  --upgrade-debs DIR   take version B's (a higher version) from DIR; default: the same build packaged as A+test1
  --enroll-with HOW    policy (default): the agent enrolls itself from the url, token and certificate_sha256 keys
                       of /etc/gleaner/policy.json; cli: `gleaner-agent enroll` as the user gleaner first
  --cache DIR          where the bare root and the downloaded packages are kept (default /var/tmp/gleaner-test-debs)
  --cold               do not reuse downloaded packages: the install time is that of a first installation
  --keep               keep the work folder (the root, the logs) afterwards
  --json FILE          also write the JSON summary to FILE
  --help               this text

Exit status: 0 all steps passed, 1 a step failed (the summary names it), 77 skipped (not root, no debootstrap).
EOF
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build"
debs_a=""
debs_b=""
enroll_with=policy
cache=/var/tmp/gleaner-test-debs
cold=0
keep=0
json_out=""

say() { echo "test-debs: $*" >&2; }
usage_error() {
    say "$*"
    exit 2
}

while [[ $# -gt 0 ]]; do
    case "$1" in
    --build-dir) [[ $# -ge 2 ]] || usage_error "--build-dir needs a folder"; build=$2; shift 2 ;;
    --debs) [[ $# -ge 2 ]] || usage_error "--debs needs a folder"; debs_a=$2; shift 2 ;;
    --upgrade-debs) [[ $# -ge 2 ]] || usage_error "--upgrade-debs needs a folder"; debs_b=$2; shift 2 ;;
    --enroll-with)
        [[ $# -ge 2 && ($2 == policy || $2 == cli) ]] || usage_error "--enroll-with takes policy or cli"
        enroll_with=$2; shift 2 ;;
    --cache) [[ $# -ge 2 ]] || usage_error "--cache needs a folder"; cache=$2; shift 2 ;;
    --cold) cold=1; shift ;;
    --keep) keep=1; shift ;;
    --json) [[ $# -ge 2 ]] || usage_error "--json needs a file"; json_out=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; usage_error "unknown argument '$1'" ;;
    esac
done

if [[ $(id -u) -ne 0 ]]; then
    say "skipped: needs root (it makes a root with debootstrap, mounts /proc, /sys and /dev in it and runs chroot)"
    exit 77
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    say "skipped: debootstrap is missing (apt-get install debootstrap)"
    exit 77
fi
for tool in python3 openssl chroot mount dpkg-deb; do
    command -v "$tool" >/dev/null 2>&1 || usage_error "$tool is missing; install it (python3 reads JSON, openssl certificates)"
done

work=$(mktemp -d /var/tmp/gleaner-test-debs.XXXXXX)
root="$work/root"
mounted=()
step_names=()
step_results=()
step_seconds=()
current=""
current_started=0
install_seconds=null
upgrade_seconds=null
failure=""

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

fail() {
    failure="$*"
    say "FAILED ($current): $*"
    exit 1
}
expect() {
    local message=$1
    shift
    "$@" || fail "$message"
}

# --- the root ---------------------------------------------------------------------------------------------------

in_root() { chroot "$root" "$@"; }

# Runs a command in the root as USER, with the environment systemd gives a service of that user.
as_user() {
    local user=$1
    shift
    local home
    home=$(in_root getent passwd "$user" | cut -d: -f6)
    in_root /usr/bin/setpriv --reuid="$user" --regid="$user" --init-groups \
        /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin HOME="$home" USER="$user" \
        LOGNAME="$user" LANG=C.UTF-8 "$@"
}

# Every process whose root is the test's root: the test made that root, so they are all its own.
root_pids() {
    local pid
    for pid in /proc/[0-9]*; do
        [[ "$(readlink "$pid/root" 2>/dev/null)" == "$root" ]] && echo "${pid#/proc/}"
    done
    return 0
}

stop_root_processes() {
    local pids pid
    mapfile -t pids < <(root_pids)
    [[ ${#pids[@]} -eq 0 ]] && return 0
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for _ in $(seq 50); do
        mapfile -t pids < <(root_pids)
        [[ ${#pids[@]} -eq 0 ]] && return 0
        sleep 0.2
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

mount_into_root() {
    local kind=$1 what=$2 where="$root$3"
    mkdir -p "$where"
    if [[ $kind == bind ]]; then
        mount --bind "$what" "$where"
    else
        mount -t "$kind" "$what" "$where"
    fi
    mounted+=("$where")
}

cleanup() {
    local status=$? i
    set +e
    trap - EXIT INT TERM
    if [[ -n "$current" ]]; then
        record "$current" fail "$(elapsed "$current_started")"
        current=""
    fi
    [[ -d "$root" ]] && stop_root_processes
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}"
    done
    summary "$status"
    if [[ $keep -eq 1 ]]; then
        say "kept $work"
    else
        rm -rf "$work"
    fi
    exit "$status"
}
trap cleanup EXIT
# The command that stopped the test, when no check named the failure.
trap 'failure=${failure:-"line $LINENO: $BASH_COMMAND"}' ERR
trap 'exit 130' INT TERM

# --- steps and the summary ----------------------------------------------------------------------------------------

all_steps=(packages root prerequisites install files units coordinator enroll train stop_keep upgrade resume
    stop_handback purge reinstall_purge)

record() {
    step_names+=("$1")
    step_results+=("$2")
    step_seconds+=("$3")
}

step() {
    local name=$1
    shift
    current=$name
    current_started=$(now)
    say "== $name"
    "$@"
    record "$name" pass "$(elapsed "$current_started")"
    current=""
}

summary() {
    local status=$1
    python3 - "$status" "$install_seconds" "$upgrade_seconds" "$failure" "$work/packages.tsv" \
        "${#step_names[@]}" "${step_names[@]}" "${step_results[@]}" "${step_seconds[@]}" "${all_steps[@]}" \
        <<'EOF' | tee "${json_out:-/dev/null}"
import json, sys
status, install, upgrade, failure, packages_file, n = sys.argv[1:7]
n = int(n)
rest = sys.argv[7:]
names, results, seconds, every = rest[:n], rest[n:2 * n], rest[2 * n:3 * n], rest[3 * n:]
steps = [{"step": a, "result": b, "seconds": float(c)} for a, b, c in zip(names, results, seconds)]
steps += [{"step": s, "result": "not-run"} for s in every if s not in names]
packages = []
try:
    for line in open(packages_file):
        name, version, size, installed = line.split()
        packages.append({"package": name, "version": version, "deb_bytes": int(size),
                         "installed_kib": int(installed)})
except FileNotFoundError:
    pass
out = {"result": "pass" if status == "0" else "fail", "packages": packages,
       "install_seconds": None if install == "null" else float(install),
       "upgrade_seconds": None if upgrade == "null" else float(upgrade), "steps": steps}
if failure:
    out["failure"] = failure
print(json.dumps(out, indent=2))
EOF
}

json_field() { python3 -c 'import json, sys; print(eval("j" + sys.argv[1], {"j": json.load(sys.stdin)}))' "$1"; }

# --- units, read as systemd reads them ----------------------------------------------------------------------------

unit_file() { echo "$root/usr/lib/systemd/system/$1"; }

# The last value of KEY= in SECTION of a unit file.
unit_value() {
    awk -v section="[$2]" -v key="$3" '
        /^\[/ { inside = ($0 == section) }
        inside && index($0, key "=") == 1 { value = substr($0, length(key) + 2) }
        END { print value }' "$1"
}

# Starts the unit's ExecStart as systemd would: its User and Group, StateDirectory and RuntimeDirectory made with
# their modes, the environment of a service, UMask, Nice, CPUSchedulingPolicy, IOSchedulingClass, LimitNOFILE and
# NoNewPrivileges. Sets unit_pid; the output goes to LOG.
start_unit() {
    local name=$1 log=$2 file
    file=$(unit_file "$name")
    local user group exec umask nice cpu io nofile state state_mode run run_mode nnp home shell
    user=$(unit_value "$file" Service User)
    group=$(unit_value "$file" Service Group)
    exec=$(unit_value "$file" Service ExecStart)
    umask=$(unit_value "$file" Service UMask)
    nice=$(unit_value "$file" Service Nice)
    cpu=$(unit_value "$file" Service CPUSchedulingPolicy)
    io=$(unit_value "$file" Service IOSchedulingClass)
    nofile=$(unit_value "$file" Service LimitNOFILE)
    state=$(unit_value "$file" Service StateDirectory)
    state_mode=$(unit_value "$file" Service StateDirectoryMode)
    run=$(unit_value "$file" Service RuntimeDirectory)
    run_mode=$(unit_value "$file" Service RuntimeDirectoryMode)
    nnp=$(unit_value "$file" Service NoNewPrivileges)
    [[ -n "$user" && -n "$exec" ]] || fail "$file has no User= or ExecStart="
    home=$(in_root getent passwd "$user" | cut -d: -f6)
    shell=$(in_root getent passwd "$user" | cut -d: -f7)
    local env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin HOME="$home" USER="$user" LOGNAME="$user"
        SHELL="$shell" LANG=C.UTF-8 INVOCATION_ID="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')")
    if [[ -n "$state" ]]; then
        # systemd gives the folder to the user when its owner differs (and then everything in it).
        if [[ "$(in_root stat -c %U "/var/lib/$state")" != "$user" ]]; then
            in_root chown -R "$user:${group:-$user}" "/var/lib/$state"
        fi
        in_root chmod "${state_mode:-0755}" "/var/lib/$state"
        env+=(STATE_DIRECTORY="/var/lib/$state")
    fi
    if [[ -n "$run" ]]; then
        in_root install -d -o "$user" -g "${group:-$user}" -m "${run_mode:-0755}" "/run/$run"
        env+=(RUNTIME_DIRECTORY="/run/$run")
    fi
    local cmd=(chroot "$root" /usr/bin/env -i "${env[@]}")
    if [[ -n "$nofile" ]]; then
        if ! prlimit "--nofile=$nofile:$nofile" true 2>/dev/null; then
            # Some sandboxes refuse even root a higher hard limit; systemd on a real machine does not.
            say "this machine does not let root raise the open-file limit to LimitNOFILE=$nofile;" \
                "the unit runs with $(ulimit -Hn) instead"
            nofile=$(ulimit -Hn)
        fi
        cmd+=(/usr/bin/prlimit "--nofile=$nofile:$nofile")
        unit_nofile=$nofile
    fi
    [[ -n "$nice" ]] && cmd+=(/usr/bin/nice -n "$nice")
    [[ "$cpu" == idle ]] && cmd+=(/usr/bin/chrt --idle 0)
    [[ "$io" == idle ]] && cmd+=(/usr/bin/ionice -c 3)
    cmd+=(/usr/bin/setpriv --reuid="$user" --regid="${group:-$user}" --init-groups --inh-caps=-all
        --bounding-set=-all)
    [[ "$nnp" == yes ]] && cmd+=(--no-new-privs)
    local words
    read -r -a words <<<"$exec"
    cmd+=(/bin/sh -c "umask ${umask:-0022} && exec \"\$@\"" sh "${words[@]}")
    say "starting $name as $user: $exec"
    "${cmd[@]}" >>"$log" 2>&1 &
    unit_pid=$!
}

# Stops a unit's process as `systemctl stop` would: ExecStop (with MAINPID) as the unit's user, then SIGTERM to
# the main process (KillMode=mixed), then waits up to TimeoutStopSec.
stop_unit() {
    local name=$1 pid=$2 file user stop timeout
    file=$(unit_file "$name")
    user=$(unit_value "$file" Service User)
    stop=$(unit_value "$file" Service ExecStop)
    timeout=$(unit_value "$file" Service TimeoutStopSec)
    if [[ -n "$stop" ]]; then
        # A unit file writes a literal $ as $$; the words are split as systemd splits this line (one quoted
        # argument for sh -c).
        local program script
        program=${stop%% *}
        script=$(sed -e "s/^[^']*'//" -e "s/'\$//" <<<"$stop")
        script=${script//\$\$/\$}
        say "ExecStop of $name: $program -c '$script'"
        as_user "$user" MAINPID="$pid" "$program" -c "$script" || say "ExecStop exited $? (systemd goes on)"
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq "$((${timeout:-90} * 5))"); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"
        fail "$name did not stop within TimeoutStopSec=${timeout:-90}"
    fi
    wait "$pid" 2>/dev/null || true
}

# The unit's ConditionPathExists= lines hold: the plain ones all, and one of the |triggering ones if any.
unit_conditions_hold() {
    local file=$1 line path any_trigger=0 trigger_held=0
    while IFS= read -r line; do
        path=${line#ConditionPathExists=}
        if [[ $path == \|* ]]; then
            any_trigger=1
            [[ -e "$root${path#|}" ]] && trigger_held=1
        else
            [[ -e "$root$path" ]] || return 1
        fi
    done < <(grep '^ConditionPathExists=' "$file")
    [[ $any_trigger -eq 0 || $trigger_held -eq 1 ]]
}

wait_for() {
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@"; do
        ((SECONDS < deadline)) || fail "waited ${seconds}s for $what"
        sleep 1
    done
}

# --- the steps ------------------------------------------------------------------------------------------------------

packages() {
    if [[ -z "$debs_a" ]]; then
        debs_a="$work/debs-a"
        "$here/build-debs.sh" --build-dir "$build" --out "$debs_a" >"$work/build-debs-a.log" 2>&1 \
            || fail "installers/build-debs.sh failed (its output: $work/build-debs-a.log)"
    fi
    local a
    a=$(find "$debs_a" -maxdepth 1 -name 'gleaner-agent_*.deb' | head -n1)
    [[ -n "$a" ]] || fail "no gleaner-agent_*.deb in $debs_a"
    version_a=$(dpkg-deb -f "$a" Version)
    if [[ -z "$debs_b" ]]; then
        debs_b="$work/debs-b"
        "$here/build-debs.sh" --build-dir "$build" --out "$debs_b" --version "$version_a+test1" --no-lintian \
            >"$work/build-debs-b.log" 2>&1 \
            || fail "installers/build-debs.sh --version $version_a+test1 failed (its output: $work/build-debs-b.log)"
    fi
    local b
    b=$(find "$debs_b" -maxdepth 1 -name 'gleaner-agent_*.deb' | head -n1)
    [[ -n "$b" ]] || fail "no gleaner-agent_*.deb in $debs_b"
    version_b=$(dpkg-deb -f "$b" Version)
    dpkg --compare-versions "$version_b" gt "$version_a" || fail "version B $version_b is not newer than A $version_a"
    local deb
    : >"$work/packages.tsv"
    for deb in "$debs_a"/gleaner-*.deb; do
        printf '%s %s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
            "$(stat -c %s "$deb")" "$(dpkg-deb -f "$deb" Installed-Size)" >>"$work/packages.tsv"
    done
    [[ $(wc -l <"$work/packages.tsv") -eq 3 ]] || fail "$debs_a does not hold exactly the three packages"
    say "version A $version_a, version B $version_b"
}

bare_root() {
    local tarball="$cache/bookworm-minbase.tar.gz"
    if [[ ! -f "$tarball" ]]; then
        say "making the bare root once (debootstrap --variant=minbase bookworm), cached as $tarball"
        mkdir -p "$cache"
        local fresh="$cache/root.new"
        rm -rf "$fresh"
        debootstrap --variant=minbase bookworm "$fresh" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
            || fail "debootstrap failed (its log: $work/debootstrap.log); is http://deb.debian.org reachable?"
        chroot "$fresh" apt-get clean
        tar --numeric-owner -C "$fresh" -czf "$tarball.new" .
        mv "$tarball.new" "$tarball"
        rm -rf "$fresh"
    fi
    mkdir -p "$root"
    tar --numeric-owner -p -C "$root" -xzf "$tarball"
    root=$(cd "$root" && pwd -P)
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    # No service of any package starts in the root (there is no systemd running anyway).
    printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
    chmod 0755 "$root/usr/sbin/policy-rc.d"
    mount_into_root proc proc /proc
    mount_into_root sysfs sysfs /sys
    mount_into_root bind /dev /dev
    mount_into_root bind /dev/pts /dev/pts
    mount_into_root tmpfs tmpfs /run
    mount_into_root tmpfs tmpfs /tmp
    if [[ $cold -eq 0 ]]; then
        mkdir -p "$cache/apt-archives/partial"
        mount_into_root bind "$cache/apt-archives" /var/cache/apt/archives
    fi
    mkdir -p "$root/tmp/debs-a" "$root/tmp/debs-b"
    cp "$debs_a"/gleaner-*.deb "$root/tmp/debs-a/"
    cp "$debs_b"/gleaner-*.deb "$root/tmp/debs-b/"
}

# A field of an installed package's record in the root (Status, Version).
dpkg_field() { in_root dpkg-query -W -f="\${$2}" "$1" 2>/dev/null; }

# apt-get install of the three packages of a set (debs-a or debs-b, copied into the root's /tmp).
install_set() {
    local set=$1 deb
    local debs=()
    for deb in "$root/tmp/$set"/gleaner-*.deb; do
        debs+=("/tmp/$set/${deb##*/}")
    done
    apt_in_root install "${debs[@]}"
}

apt_in_root() {
    in_root /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Use-Pty=0 "$@"
}

prerequisites() {
    # What a Debian 12 machine has (systemd: units, targets, deb-systemd-helper) and what the test job trains on.
    apt_in_root update >"$work/apt-update.log" 2>&1 || fail "apt-get update failed in the root ($work/apt-update.log)"
    apt_in_root install systemd dataset-fashion-mnist >"$work/apt-prerequisites.log" 2>&1 \
        || fail "could not install systemd and dataset-fashion-mnist in the root ($work/apt-prerequisites.log)"
}

install_a() {
    local started
    started=$(now)
    install_set debs-a >"$work/apt-install.log" 2>&1 \
        || fail "apt-get install of version A failed ($work/apt-install.log)"
    install_seconds=$(elapsed "$started")
    say "installed in ${install_seconds}s"
    local pkg
    for pkg in gleaner-agent gleaner-desktop gleaner-coordinator; do
        [[ "$(dpkg_field "$pkg" Status) $(dpkg_field "$pkg" Version)" == "install ok installed $version_a" ]] \
            || fail "$pkg $version_a is not installed"
    done
}

# mode and owner of a path in the root, e.g. "0750 gleaner:gleaner"
mode_owner() { in_root stat -c '%04a %U:%G' "$1"; }

files() {
    local path
    for path in /usr/bin/gleaner-agent /usr/libexec/gleaner/gleaner-worker /usr/bin/gleaner \
        /usr/bin/gleaner-coordinator; do
        [[ "$(mode_owner "$path")" == "0755 root:root" ]] || fail "$path is $(mode_owner "$path"), not 0755 root:root"
        if in_root ldd "$path" | grep -q 'not found'; then
            fail "$path misses libraries: $(in_root ldd "$path" | grep 'not found' | tr -s ' \n' ' ')"
        fi
    done
    [[ ! -e "$root/usr/bin/gleaner-worker" ]] || fail "gleaner-worker is on the PATH; it belongs in /usr/libexec/gleaner"
    for path in /usr/lib/systemd/system/gleaner-agent.service /usr/lib/systemd/user/gleaner-agent.service \
        /usr/lib/systemd/system/gleaner-coordinator.service /usr/share/doc/gleaner-agent/examples/policy.json \
        /usr/share/gleaner-coordinator/jobs/fashion-mnist-cnn.json /usr/share/applications/gleaner.desktop \
        /etc/xdg/autostart/gleaner.desktop /etc/xdg/autostart/gleaner-session.desktop \
        /usr/share/icons/hicolor/scalable/apps/gleaner.svg; do
        [[ -f "$root$path" ]] || fail "$path is missing"
    done
    for pkg in gleaner-agent gleaner-desktop gleaner-coordinator; do
        for path in copyright changelog.Debian.gz; do
            [[ -f "$root/usr/share/doc/$pkg/$path" ]] || fail "/usr/share/doc/$pkg/$path is missing"
        done
    done
    [[ "$(mode_owner /etc/gleaner)" == "0755 root:root" ]] || fail "/etc/gleaner is $(mode_owner /etc/gleaner)"
    [[ ! -e "$root/etc/gleaner/policy.json" ]] || fail "a package installed /etc/gleaner/policy.json"
    python3 -m json.tool "$root/usr/share/doc/gleaner-agent/examples/policy.json" >/dev/null \
        || fail "the example policy is not JSON"
    # The system users: no login, home in their data folder, which they own.
    local user dir mode entry
    for entry in gleaner:/var/lib/gleaner:0750 gleaner-coordinator:/var/lib/gleaner-coordinator:0700; do
        IFS=: read -r user dir mode <<<"$entry"
        local passwd uid shell home
        passwd=$(in_root getent passwd "$user") || fail "no user $user"
        IFS=: read -r _ _ uid _ _ home shell <<<"$passwd"
        ((uid < 1000)) || fail "$user is not a system user (uid $uid)"
        [[ "$home" == "$dir" && "$shell" == /usr/sbin/nologin ]] || fail "$user: home $home, shell $shell"
        in_root getent group "$user" >/dev/null || fail "no group $user"
        [[ "$(mode_owner "$dir")" == "$mode $user:$user" ]] || fail "$dir is $(mode_owner "$dir"), not $mode $user:$user"
    done
    [[ -z "$(ls -A "$root/var/lib/gleaner-coordinator")" ]] || fail "/var/lib/gleaner-coordinator is not empty"
    # Enabled as deb-systemd-helper enables units (the root has systemd installed, not running); the user unit is
    # left to each user.
    for path in /etc/systemd/system/multi-user.target.wants/gleaner-agent.service \
        /etc/systemd/system/multi-user.target.wants/gleaner-coordinator.service; do
        [[ -L "$root$path" ]] || fail "$path is missing: the unit was not enabled"
    done
    [[ ! -e "$root/etc/systemd/user/default.target.wants/gleaner-agent.service" ]] \
        || fail "the user unit was enabled for every user"
    as_user gleaner /usr/bin/gleaner-agent --help >/dev/null || fail "gleaner-agent --help fails as gleaner"
    as_user gleaner-coordinator /usr/bin/gleaner-coordinator --help >/dev/null \
        || fail "gleaner-coordinator --help fails as gleaner-coordinator"
}

units() {
    # The root's own systemd-analyze (systemd is installed there, not running): ExecStart programs, users and
    # targets are those of the root.
    local unit out
    for unit in gleaner-agent.service gleaner-coordinator.service; do
        if ! out=$(in_root systemd-analyze verify "/usr/lib/systemd/system/$unit" 2>&1) || [[ -n "$out" ]]; then
            fail "systemd-analyze verify $unit: $out"
        fi
    done
    mkdir -p "$root/tmp/xdg-runtime"
    if ! out=$(in_root /usr/bin/env XDG_RUNTIME_DIR=/tmp/xdg-runtime systemd-analyze --user verify \
        /usr/lib/systemd/user/gleaner-agent.service 2>&1) || [[ -n "$out" ]]; then
        fail "systemd-analyze --user verify gleaner-agent.service (the user unit): $out"
    fi
    # Before init, the coordinator's unit would not start (and so not fail); nor would the agent's, unenrolled and
    # without a policy.
    ! unit_conditions_hold "$(unit_file gleaner-coordinator.service)" \
        || fail "gleaner-coordinator.service would start before init"
    ! unit_conditions_hold "$(unit_file gleaner-agent.service)" \
        || fail "gleaner-agent.service would start with neither enrollment nor policy"
}

coordinator_serving() { [[ -f "$root/var/lib/gleaner-coordinator/server.json" ]] && kill -0 "$coordinator_pid"; }

start_coordinator() {
    unit_conditions_hold "$(unit_file gleaner-coordinator.service)" \
        || fail "gleaner-coordinator.service's conditions do not hold after init"
    start_unit gleaner-coordinator.service "$work/coordinator.log"
    coordinator_pid=$unit_pid
    wait_for 60 "the coordinator to serve ($work/coordinator.log)" coordinator_serving
}

coordinator() {
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # The admin's step, as docs/packages.md gives it.
    local out
    out=$(as_user gleaner-coordinator /usr/bin/gleaner-coordinator init --data-dir /var/lib/gleaner-coordinator \
        --listen "127.0.0.1:$port") || fail "gleaner-coordinator init into the package's empty folder failed: $out"
    fingerprint=$(sed -n 's/^ *certificate SHA-256: *//p' <<<"$out")
    [[ "$fingerprint" =~ ^([0-9A-F]{2}:){31}[0-9A-F]{2}$ ]] || fail "init printed no certificate fingerprint: $out"
    [[ "$(mode_owner /var/lib/gleaner-coordinator)" == "0700 gleaner-coordinator:gleaner-coordinator" ]] \
        || fail "after init /var/lib/gleaner-coordinator is $(mode_owner /var/lib/gleaner-coordinator)"
    start_coordinator
    [[ "$(in_root stat -c %U "/proc/$coordinator_pid")" == gleaner-coordinator ]] \
        || fail "the coordinator does not run as gleaner-coordinator"
    [[ "$(awk '/Max open files/ { print $4 }' "/proc/$coordinator_pid/limits")" == "$unit_nofile" ]] \
        || fail "the coordinator's open-file limit is not its unit's LimitNOFILE ($unit_nofile)"
    local job
    job=$(as_user gleaner-coordinator /usr/bin/gleaner-coordinator job submit --data-dir /var/lib/gleaner-coordinator \
        /usr/share/gleaner-coordinator/jobs/fashion-mnist-cnn.json) || fail "job submit failed: $job"
    token=$(as_user gleaner-coordinator /usr/bin/gleaner-coordinator token create \
        --data-dir /var/lib/gleaner-coordinator --uses 1) || fail "token create failed: $token"
    [[ "$token" == gle_* ]] || fail "token create printed '$token'"
    url="https://127.0.0.1:$port"
}

# The preferences of the test's policy: compute although no idle time can be known in the root (no logind, no
# desktop), whatever the other programs do, and slowly, so that a subtask is in flight when the agent stops.
test_preferences='"preferences": {"only_when_idle": false, "other_cpu_limit_percent": 100, "cpu_share_percent": 10}'

# The fleet recipe: one policy file, and the token beside it readable by the service only (docs/fleet.md). The
# agent, started unenrolled, enrolls itself from the enrollment keys and pins the certificate with that fingerprint.
enroll_from_policy() {
    printf '%s\n' "$token" >"$root/etc/gleaner/enrollment-token"
    in_root chown root:gleaner /etc/gleaner/enrollment-token
    in_root chmod 0640 /etc/gleaner/enrollment-token
    cat >"$root/etc/gleaner/policy.json" <<EOF
{
  "enrollment": {"url": "$url", "token_file": "/etc/gleaner/enrollment-token", "certificate_sha256": "$fingerprint"},
  $test_preferences
}
EOF
    chmod 0644 "$root/etc/gleaner/policy.json"
}

# Enrollment by hand, as the user gleaner, with the certificate the admin handed out.
enroll_with_cli() {
    printf '{%s}\n' "$test_preferences" >"$root/etc/gleaner/policy.json"
    chmod 0644 "$root/etc/gleaner/policy.json"
    install -m 0644 "$root/var/lib/gleaner-coordinator/tls/cert.pem" "$root/tmp/coordinator.pem"
    local out
    out=$(as_user gleaner /usr/bin/gleaner-agent enroll "$url" --token "$token" --ca /tmp/coordinator.pem \
        --data-dir /var/lib/gleaner 2>&1) || fail "gleaner-agent enroll failed: $out"
    grep -q "$fingerprint" <<<"$out" || fail "enroll pinned another certificate than init made: $out"
}

agent_status() { as_user gleaner /usr/bin/gleaner-agent status --system --json 2>/dev/null; }
job_updates() {
    as_user gleaner-coordinator /usr/bin/gleaner-coordinator job list --data-dir /var/lib/gleaner-coordinator --json |
        json_field '["jobs"][0]["updates_received"]'
}
agent_enrolled() {
    kill -0 "$agent_pid" 2>/dev/null || fail "the agent exited: $(tail -n 3 "$work/agent.log" | tr '\n' ' ')"
    [[ -f "$root/var/lib/gleaner/agent.json" ]]
}

enroll() {
    if [[ $enroll_with == policy ]]; then
        enroll_from_policy
    else
        enroll_with_cli
    fi
    unit_conditions_hold "$(unit_file gleaner-agent.service)" || fail "gleaner-agent.service's conditions do not hold"
    start_unit gleaner-agent.service "$work/agent.log"
    agent_pid=$unit_pid
    wait_for 60 "the agent to be enrolled (its log: $work/agent.log)" agent_enrolled
    local pinned
    pinned=$(openssl x509 -in "$root/var/lib/gleaner/coordinator-ca.pem" -noout -fingerprint -sha256 | sed 's/.*=//')
    [[ "$pinned" == "$fingerprint" ]] || fail "the agent pinned the certificate $pinned, not init's $fingerprint"
    [[ "$(mode_owner /var/lib/gleaner/agent-token)" == "0600 gleaner:gleaner" ]] \
        || fail "the agent token is $(mode_owner /var/lib/gleaner/agent-token)"
}

# A desk user of the managed machine: every way around the organisation's policy is refused, naming its file;
# the session socket takes the user's idle report and shows the system agent's state, and the agent's own
# control socket is closed to them.
locks() {
    in_root id desk >/dev/null 2>&1 || in_root useradd --create-home --shell /bin/sh desk
    printf '{}\n' >"$root/tmp/lax.json"
    chmod 0644 "$root/tmp/lax.json"
    local out how
    for how in "--policy-file /tmp/lax.json" "--dedicated" "env"; do
        if [[ $how == env ]]; then
            out=$(as_user desk /usr/bin/env GLEANER_POLICY_FILE=/tmp/lax.json /usr/bin/gleaner-agent run 2>&1) && \
                fail "GLEANER_POLICY_FILE lifted the policy for a desk user: $out"
        else
            # shellcheck disable=SC2086 # the flag and its value are two words on purpose
            out=$(as_user desk /usr/bin/gleaner-agent run $how 2>&1) && fail "$how lifted the policy for a desk user: $out"
        fi
        grep -q "/etc/gleaner/policy.json sets this machine's policy" <<<"$out" \
            || fail "the refusal of \"$how\" does not name the policy file: $out"
    done
    out=$(as_user desk /usr/bin/gleaner-agent status --system 2>&1) && fail "a desk user reached the system agent's control socket: $out"
    [[ "$(in_root stat -c %a /run/gleaner/sessions.sock)" == 666 ]] || fail "the session socket is not 0666"
    out=$(as_user desk /usr/bin/gleaner-agent session-report --once --session 7 2>/dev/null) \
        || fail "the session helper of a desk user was refused: $out"
    grep -q '"state"' <<<"$out" || fail "the session helper got no state back: $out"
    say "a desk user's overrides were refused; its session report was heard ($out)"
}

uploaded_one() { (($(job_updates) >= 1)); }
holds_training_subtask() {
    agent_status | python3 -c 'import json, sys
subtasks = json.load(sys.stdin)["subtasks"]
sys.exit(0 if any(s["state"] == "training" and (s.get("step") or 0) >= 1 for s in subtasks) else 1)'
}

train() {
    wait_for 300 "a subtask trained and uploaded (the agent's log: $work/agent.log)" uploaded_one
    # As the unit runs it: the user gleaner, Nice=19, SCHED_IDLE, idle I/O, its worker from /usr/libexec.
    [[ "$(in_root stat -c %U "/proc/$agent_pid")" == gleaner ]] || fail "the agent does not run as gleaner"
    [[ "$(awk '{ print $19 }' "/proc/$agent_pid/stat")" == 19 ]] || fail "the agent's nice value is not 19"
    chrt -p "$agent_pid" | grep -q SCHED_IDLE || fail "the agent is not SCHED_IDLE: $(chrt -p "$agent_pid")"
    ionice -p "$agent_pid" | grep -q idle || fail "the agent's I/O class is not idle: $(ionice -p "$agent_pid")"
    grep -q "starting /usr/libexec/gleaner/gleaner-worker" "$work/agent.log" \
        || fail "the agent did not run /usr/libexec/gleaner/gleaner-worker"
    say "uploads so far: $(job_updates)"
}

snapshot() {
    in_root sh -c 'cd /var/lib/gleaner && sha256sum agent.json agent-token coordinator-ca.pem coordinator-key.pem \
        && stat -c "%n %04a %U:%G" . agent.json agent-token && ls tasks && sha256sum tasks/*/checkpoint.safetensors \
        && find cache -type f | sort'
}

stop_keep() {
    # The package's stop for an upgrade (prerm upgrade): the marker in the RuntimeDirectory makes ExecStop skip
    # the hand-back; SIGTERM with --keep-on-stop keeps the subtasks in flight.
    wait_for 120 "a subtask in training" holds_training_subtask
    : >"$root/run/gleaner/keep-leases"
    stop_unit gleaner-agent.service "$agent_pid"
    rm -rf "$root/run/gleaner" # systemd removes the RuntimeDirectory when the unit stops
    grep -q "the subtasks are kept for the next start" "$work/agent.log" || fail "the agent did not keep its subtasks"
    kept=$(ls "$root/var/lib/gleaner/tasks")
    [[ -n "$kept" ]] || fail "no subtask in flight was kept"
    snapshot >"$work/before-upgrade.txt"
    say "kept for the upgrade: $kept"
}

upgrade() {
    local started
    started=$(now)
    install_set debs-b >"$work/apt-upgrade.log" 2>&1 \
        || fail "apt-get install of version B over A failed ($work/apt-upgrade.log)"
    upgrade_seconds=$(elapsed "$started")
    local pkg
    for pkg in gleaner-agent gleaner-desktop gleaner-coordinator; do
        [[ "$(dpkg_field "$pkg" Version)" == "$version_b" ]] || fail "$pkg was not upgraded"
    done
    snapshot >"$work/after-upgrade.txt"
    diff -u "$work/before-upgrade.txt" "$work/after-upgrade.txt" >&2 \
        || fail "the upgrade changed the agent's enrollment, subtasks in flight or cache"
    # postinst restarts the coordinator with the new version: the same data directory serves again.
    stop_unit gleaner-coordinator.service "$coordinator_pid"
    rm -f "$root/var/lib/gleaner-coordinator/server.json"
    start_coordinator
}

resumed_kept() {
    local lease
    for lease in $kept; do
        grep -q "resuming lease $lease" "$work/agent.log" || return 1
        grep -q "lease $lease: result accepted" "$work/agent.log" || return 1
    done
}

resume() {
    start_unit gleaner-agent.service "$work/agent.log"
    agent_pid=$unit_pid
    wait_for 180 "the kept subtasks resumed and uploaded by version B (log: $work/agent.log)" resumed_kept
}

stop_handback() {
    # A plain stop (systemctl stop, shutdown): ExecStop asks the agent to leave, handing its subtasks back.
    wait_for 120 "a subtask in training" holds_training_subtask
    stop_unit gleaner-agent.service "$agent_pid"
    rm -rf "$root/run/gleaner"
    grep -q "leaving (finish --now)" "$work/agent.log" || fail "ExecStop did not make the agent leave"
    [[ -z "$(ls "$root/var/lib/gleaner/tasks" 2>/dev/null)" ]] \
        || fail "the agent still holds subtasks after a plain stop: $(ls "$root/var/lib/gleaner/tasks")"
}

purged_cleanly() {
    local pkg path
    for pkg in gleaner-agent gleaner-desktop gleaner-coordinator; do
        if dpkg_field "$pkg" Status | grep -qv "not-installed"; then
            fail "$pkg is still known to dpkg: $(dpkg_field "$pkg" Status)"
        fi
    done
    for path in gleaner gleaner-coordinator; do
        ! in_root getent passwd "$path" >/dev/null || fail "the user $path is left"
        ! in_root getent group "$path" >/dev/null || fail "the group $path is left"
    done
    for path in /var/lib/gleaner /usr/libexec/gleaner /usr/lib/systemd/system/gleaner-agent.service \
        /usr/lib/systemd/user/gleaner-agent.service /usr/lib/systemd/system/gleaner-coordinator.service \
        /etc/systemd/system/multi-user.target.wants/gleaner-agent.service \
        /etc/systemd/system/multi-user.target.wants/gleaner-coordinator.service \
        /var/lib/systemd/deb-systemd-helper-enabled/gleaner-agent.service.dsh-also \
        /var/lib/systemd/deb-systemd-helper-enabled/gleaner-coordinator.service.dsh-also \
        /etc/xdg/autostart/gleaner.desktop /etc/xdg/autostart/gleaner-session.desktop \
        /usr/share/gleaner-coordinator; do
        [[ ! -e "$root$path" && ! -L "$root$path" ]] || fail "$path is left after purge"
    done
}

purge() {
    stop_unit gleaner-coordinator.service "$coordinator_pid"
    apt_in_root purge gleaner-desktop gleaner-agent gleaner-coordinator >"$work/apt-purge.log" 2>&1 \
        || fail "apt-get purge failed ($work/apt-purge.log)"
    purged_cleanly
    # The admin's files stay: the organisation's policy, and the coordinator's data directory that init made.
    [[ -f "$root/etc/gleaner/policy.json" ]] || fail "purge removed the admin's /etc/gleaner/policy.json"
    [[ -f "$root/var/lib/gleaner-coordinator/config.json" ]] \
        || fail "purge removed the data directory that gleaner-coordinator init made"
    grep -q "kept /var/lib/gleaner-coordinator" "$work/apt-purge.log" || fail "purge did not say what it kept"
}

reinstall_purge() {
    # What is left is the admin's to remove; then a fresh installation, purged at once, leaves nothing at all.
    rm -rf "$root/var/lib/gleaner-coordinator" "$root/etc/gleaner/policy.json" "$root/etc/gleaner/enrollment-token"
    install_set debs-a >"$work/apt-reinstall.log" 2>&1 \
        || fail "installing again after a purge failed ($work/apt-reinstall.log)"
    in_root getent passwd gleaner >/dev/null || fail "installing again did not make the user gleaner"
    apt_in_root purge gleaner-desktop gleaner-agent gleaner-coordinator >>"$work/apt-reinstall.log" 2>&1 \
        || fail "the second purge failed ($work/apt-reinstall.log)"
    purged_cleanly
    [[ ! -e "$root/var/lib/gleaner-coordinator" ]] || fail "purge left the empty /var/lib/gleaner-coordinator"
    [[ ! -e "$root/etc/gleaner" ]] || fail "purge left the empty /etc/gleaner"
}

step packages packages
step root bare_root
step prerequisites prerequisites
step install install_a
step files files
step units units
step coordinator coordinator
step enroll enroll
step locks locks
step train train
step stop_keep stop_keep
step upgrade upgrade
step resume resume
step stop_handback stop_handback
step purge purge
step reinstall_purge reinstall_purge
