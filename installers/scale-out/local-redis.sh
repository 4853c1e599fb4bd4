#!/usr/bin/env bash
# A Redis 7 server of its own for Gleaner's coordinators, on this machine: its files in a folder of its own (0700),
# listening on 127.0.0.1 only, with a password, every write in its append-only file (fsynced every second). It
# holds the server weights of running jobs that several coordinators fold into (config "redis",
# docs/scale-out.md). It stops exactly the server it started (the process id in its pid file), never the system's
# own.
#
#   local-redis.sh start DIR [--port PORT]   start the server on DIR (its data kept there across restarts); prints
#                                            its URL (port: a free one unless given; then the one used before)
#   local-redis.sh url DIR                   the URL of the running server
#   local-redis.sh stop DIR                  SIGTERM (Redis writes its append-only file and exits), SIGKILL after 15 s
#
# Every client must authenticate: the password, random and made at the first start, is in DIR/password (0600,
# the password alone), and the URL printed names that file (?password_file=...), which is how the coordinator
# reads it; the password itself is never on a command line. Needs redis-server (installers/install-deps.sh).
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/common.sh"

die() { echo "local-redis: $*" >&2; exit 1; }
usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; }

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
command=$1; shift
case "$command" in -h|--help) usage; exit 0 ;; esac
[[ $# -ge 1 ]] || die "$command needs the server's folder (local-redis.sh --help)"
dir=$(realpath -m "$1"); shift
server=$(command -v redis-server || true)
[[ -n "$server" ]] || die "Redis is missing; install Debian's redis-server (installers/install-deps.sh)"
umask 077 # the password, the configuration and the data are this user's alone

port_of() {
    [[ -f "$dir/port" ]] || die "$dir has no server started by this script (no $dir/port)"
    cat "$dir/port"
}

# The pid in our pid file, when that process is a Redis server (redis-server is a link to redis-check-rdb).
running_pid() { pid_running "$dir/redis.pid" "$server"; }

url_of() {
    [[ -s "$dir/password" ]] || die "$dir has no password file (DIR/password); start the server with this script"
    echo "redis://127.0.0.1:$(port_of)/0?password_file=$(url_encode "$dir/password")"
}

case "$command" in
start)
    port=""
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --port) port=$2; shift 2 ;;
            *) die "start: unknown option $1" ;;
        esac
    done
    if pid=$(running_pid); then
        echo "local-redis: already running (pid $pid)" >&2
        url_of
        exit 0
    fi
    mkdir -p "$dir"
    chmod 700 "$dir"
    [[ -z "$port" && -f "$dir/port" ]] && port=$(cat "$dir/port")
    port=${port:-$(free_port)}
    [[ "$port" =~ ^[0-9]+$ ]] || die "--port needs a number"
    echo "$port" >"$dir/port"
    rm -f "$dir/redis.pid"
    [[ -s "$dir/password" ]] || random_password >"$dir/password"
    chmod 600 "$dir/password"
    password=$(head -1 "$dir/password")
    # The password goes in through a configuration file (0600), not the command line, which every local user
    # can read in /proc.
    printf 'requirepass %s\n' "$password" >"$dir/redis.conf"
    chmod 600 "$dir/redis.conf"
    # Nothing of the machine's /etc/redis; the rest on the command line.
    # Every fold appends the job's whole weights (20 MB at 5 M parameters) to the append-only file. Redis's
    # default rewrites that file each time it doubles, every few folds, compressing floats that barely compress:
    # a quarter of the accepted updates per second (bench_lease --results, docs/scale-out.md). Rewritten when it
    # has grown to 9 times its last rewrite, uncompressed, it costs disk instead (up to 10 copies of the weights).
    "$server" "$dir/redis.conf" --port "$port" --bind 127.0.0.1 --protected-mode yes --dir "$dir" --daemonize yes \
        --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --appendonly yes --appendfsync everysec --save "" \
        --auto-aof-rewrite-percentage 800 --rdbcompression no \
        || die "redis-server did not start; see $dir/redis.log"
    for _ in $(seq 100); do
        if running_pid >/dev/null && { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
            printf 'AUTH %s\r\nPING\r\n' "$password" >&3 # printf is bash's own: no process, no command line
            read -r -t 2 answer <&3 || answer=""
            [[ "$answer" == +OK* ]] && { read -r -t 2 answer <&3 || answer=""; }
            exec 3>&-
            [[ "$answer" == +PONG* ]] && break
        fi
        sleep 0.1
    done
    pid=$(running_pid) || die "the server did not start; see $dir/redis.log"
    [[ "$answer" == +PONG* ]] || die "the server (pid $pid) does not answer with the password in $dir/password; see $dir/redis.log"
    echo "local-redis: running (pid $pid), log $dir/redis.log; its password is in $dir/password, which the URL names" >&2
    url_of
    ;;
url)
    running_pid >/dev/null || die "no server of this script runs in $dir"
    url_of
    ;;
stop)
    if ! pid=$(running_pid); then
        echo "local-redis: no server of this script runs in $dir" >&2
        exit 0
    fi
    stop_pid local-redis "$pid" TERM
    ;;
*)
    die "unknown command $command (local-redis.sh --help)"
    ;;
esac
