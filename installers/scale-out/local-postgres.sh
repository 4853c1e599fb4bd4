#!/usr/bin/env bash
# A PostgreSQL 15 server of its own for a Gleaner coordinator, on this machine: its cluster in a folder, listening
# on 127.0.0.1 only (and a unix socket in that folder), the role `gleaner` trusted from there. For trying the
# coordinator on PostgreSQL, for benchmarks, and as the first step of the recipe in docs/scale-out.md. It stops
# exactly the server it started (the process id in the cluster's postmaster.pid), never the system's own.
#
#   local-postgres.sh start DIR [--port PORT]   create the cluster in DIR when missing, start it; prints the URL
#                                               of the database `gleaner` (port: a free one unless given)
#   local-postgres.sh createdb DIR NAME         a new, empty database; prints its URL
#   local-postgres.sh url DIR [NAME]            the URL of a database of the running server (default gleaner)
#   local-postgres.sh stop DIR                  fast shutdown (SIGINT), SIGKILL after 15 s
#
# Run as root, the server runs as the `postgres` user that Debian's postgresql-15 package creates (PostgreSQL
# refuses to run as root). Needs postgresql-15 (installers/install-deps.sh installs it).
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/common.sh"
bin=/usr/lib/postgresql/15/bin

die() { echo "local-postgres: $*" >&2; exit 1; }
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
command=$1; shift
case "$command" in -h|--help) usage; exit 0 ;; esac
[[ $# -ge 1 ]] || die "$command needs the server's folder (local-postgres.sh --help)"
dir=$(realpath -m "$1"); shift
data="$dir/data"

[[ -x "$bin/postgres" ]] || die "PostgreSQL 15 is missing; install Debian's postgresql-15 (installers/install-deps.sh)"

as_owner() {
    if [[ $(id -u) -eq 0 ]]; then
        id postgres >/dev/null 2>&1 || die "running as root needs the postgres user of Debian's postgresql-15"
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

port_of() {
    [[ -f "$dir/port" ]] || die "$dir has no server started by this script (no $dir/port)"
    cat "$dir/port"
}

running_pid() { pid_running "$data/postmaster.pid" "$bin/postgres"; }

url_of() { echo "postgresql://gleaner@127.0.0.1:$(port_of)/$1"; }


psql_as_owner() { as_owner "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$(port_of)" -d postgres "$@"; }

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
        echo "local-postgres: already running (pid $pid)" >&2
        url_of gleaner
        exit 0
    fi
    mkdir -p "$dir"
    [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
    if [[ ! -f "$data/PG_VERSION" ]]; then
        as_owner "$bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
            || die "initdb failed; see $dir/initdb.log"
    fi
    port=${port:-$(free_port)}
    echo "$port" >"$dir/port"
    as_owner "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start >/dev/null \
        || die "the server did not start; see $dir/server.log"
    # The role and the database the coordinator uses; trusted from loopback and the socket only (listen_addresses).
    psql_as_owner -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'gleaner') THEN CREATE ROLE gleaner LOGIN; END IF; END \$\$;"
    if [[ -z $(psql_as_owner -tA -c "SELECT 1 FROM pg_database WHERE datname = 'gleaner'") ]]; then
        psql_as_owner -c "CREATE DATABASE gleaner OWNER gleaner"
    fi
    echo "local-postgres: running (pid $(running_pid)), log $dir/server.log" >&2
    url_of gleaner
    ;;
createdb)
    [[ $# -eq 1 && "$1" =~ ^[a-z_][a-z0-9_]*$ ]] || die "createdb needs a database name of lower-case letters, digits and _"
    running_pid >/dev/null || die "no server of this script runs in $dir"
    psql_as_owner -c "CREATE DATABASE $1 OWNER gleaner"
    url_of "$1"
    ;;
url)
    running_pid >/dev/null || die "no server of this script runs in $dir"
    url_of "${1:-gleaner}"
    ;;
stop)
    if ! pid=$(running_pid); then
        echo "local-postgres: no server of this script runs in $dir" >&2
        exit 0
    fi
    stop_pid local-postgres "$pid" INT # fast shutdown: open sessions end
    ;;
*)
    die "unknown command $command (local-postgres.sh --help)"
    ;;
esac
