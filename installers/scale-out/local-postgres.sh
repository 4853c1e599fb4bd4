#!/usr/bin/env bash
# A PostgreSQL 15 server of its own for a Gleaner coordinator, on this machine: its cluster in a folder (0700),
# listening on 127.0.0.1 only (and a unix socket in that folder), every connection authenticated with a password
# (scram-sha-256), for the role `gleaner` and for the superuser alike. For trying the coordinator on PostgreSQL,
# for benchmarks, and as the first step of the recipe in docs/scale-out.md. It stops exactly the server it started
# (the process id in the cluster's postmaster.pid), never the system's own.
#
#   local-postgres.sh start DIR [--port PORT]   create the cluster in DIR when missing, start it; prints the URL
#                                               of the database `gleaner` (port: a free one unless given)
#   local-postgres.sh createdb DIR NAME         a new, empty database; prints its URL
#   local-postgres.sh url DIR [NAME]            the URL of a database of the running server (default gleaner)
#   local-postgres.sh stop DIR                  fast shutdown (SIGINT), SIGKILL after 15 s
#
# The passwords are random, made when the cluster is: the coordinator's in DIR/gleaner.pgpass, the superuser's
# (for this script) in DIR/superuser.pgpass, both 0600 in libpq's password-file format. The URL printed names
# the coordinator's file (?passfile=...), which is how the coordinator reads it; no password is ever on a command
# line. Run as root, the server runs as the `postgres` user that Debian's postgresql-15 package creates
# (PostgreSQL refuses to run as root). Needs postgresql-15 (installers/install-deps.sh installs it).
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/common.sh"
bin=/usr/lib/postgresql/15/bin

die() { echo "local-postgres: $*" >&2; exit 1; }
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
command=$1; shift
case "$command" in -h|--help) usage; exit 0 ;; esac
[[ $# -ge 1 ]] || die "$command needs the server's folder (local-postgres.sh --help)"
dir=$(realpath -m "$1"); shift
data="$dir/data"

[[ -x "$bin/postgres" ]] || die "PostgreSQL 15 is missing; install Debian's postgresql-15 (installers/install-deps.sh)"
umask 077 # the cluster, its socket and the password files are its user's alone

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

url_of() {
    [[ -s "$dir/gleaner.pgpass" ]] || die "$dir has no password file for the coordinator (gleaner.pgpass)"
    echo "postgresql://gleaner@127.0.0.1:$(port_of)/$1?passfile=$(url_encode "$dir/gleaner.pgpass")"
}

# As the superuser, over the socket; the password from the superuser's file (an environment variable names the
# file; the password is in no argument).
psql_as_owner() {
    as_owner env PGPASSFILE="$dir/superuser.pgpass" "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$(port_of)" \
        -d postgres "$@"
}

# A file of the server's user (postgres, when we are root), 0600.
owned_by_server() {
    chmod 600 "$1"
    [[ $(id -u) -eq 0 ]] && chown postgres: "$1"
    return 0
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
        echo "local-postgres: already running (pid $pid)" >&2
        url_of gleaner
        exit 0
    fi
    mkdir -p "$dir"
    chmod 700 "$dir" # also the socket's folder: only the server's user reaches the socket
    [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
    if [[ ! -f "$data/PG_VERSION" ]]; then
        # Every connection, over the socket or TCP, authenticates with a password: no local user is trusted.
        superuser=$(random_password)
        printf '%s\n' "$superuser" >"$dir/superuser.password"
        owned_by_server "$dir/superuser.password"
        as_owner "$bin/initdb" -D "$data" -U postgres --auth-local=scram-sha-256 --auth-host=scram-sha-256 \
            --pwfile="$dir/superuser.password" --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
            || { rm -f "$dir/superuser.password"; die "initdb failed; see $dir/initdb.log"; }
        rm -f "$dir/superuser.password"
        printf '*:*:*:postgres:%s\n' "$superuser" >"$dir/superuser.pgpass"
        owned_by_server "$dir/superuser.pgpass"
        rm -f "$dir/gleaner.pgpass" # a new cluster: a new password for the coordinator too
    elif [[ ! -f "$dir/superuser.pgpass" ]]; then
        die "$dir holds a cluster made by an earlier local-postgres.sh, which trusted every local connection; stop it (local-postgres.sh stop $dir) and move the folder away to start a new one, or use its data with PostgreSQL's own tools"
    fi
    port=${port:-$(free_port)}
    echo "$port" >"$dir/port"
    as_owner "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start >/dev/null \
        || die "the server did not start; see $dir/server.log"
    # The role and the database the coordinator uses. Its password goes to psql on standard input, not on the
    # command line, and into the coordinator's password file, which the URL names.
    if [[ ! -s "$dir/gleaner.pgpass" ]]; then
        printf '*:*:*:gleaner:%s\n' "$(random_password)" >"$dir/gleaner.pgpass"
        chmod 600 "$dir/gleaner.pgpass"
    fi
    password=$(cut -d: -f5 "$dir/gleaner.pgpass")
    psql_as_owner -f - <<SQL
DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'gleaner') THEN CREATE ROLE gleaner LOGIN; END IF; END \$\$;
ALTER ROLE gleaner PASSWORD '$password';
SQL
    if [[ -z $(psql_as_owner -tA -c "SELECT 1 FROM pg_database WHERE datname = 'gleaner'") ]]; then
        psql_as_owner -c "CREATE DATABASE gleaner OWNER gleaner"
    fi
    echo "local-postgres: running (pid $(running_pid)), log $dir/server.log; the coordinator's password is in" \
        "$dir/gleaner.pgpass, which the URL names" >&2
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
