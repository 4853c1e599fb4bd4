#!/usr/bin/env bash
# installers/scale-out's local PostgreSQL and Redis let nobody in without their passwords, keep those passwords in
# private files and off every command line, and the coordinator gets in with them through the URLs the scripts
# print: `gleaner-coordinator init` with both (it opens the database and authenticates to Redis).
#
#   local-servers-credentials.sh GLEANER_COORDINATOR
#
# Exits 77 (skipped) where PostgreSQL 15 or Redis is not installed, or where root has no postgres user to run
# PostgreSQL as.
set -euo pipefail
coordinator=$(readlink -f "$1")
here=$(dirname "$(readlink -f "$0")")
scripts=$here/../../installers/scale-out
pg=$scripts/local-postgres.sh
rd=$scripts/local-redis.sh
bin=/usr/lib/postgresql/15/bin

[[ -x $bin/postgres && -x $bin/psql ]] || { echo "skipped: PostgreSQL 15 is not installed (postgresql-15)"; exit 77; }
command -v redis-server >/dev/null || { echo "skipped: Redis is not installed (redis-server)"; exit 77; }
if [[ $(id -u) -eq 0 ]] && ! id postgres >/dev/null 2>&1; then
    echo "skipped: root needs the postgres user of postgresql-15 to run PostgreSQL"
    exit 77
fi

top=$(mktemp -d "${TMPDIR:-/tmp}/gleaner-credentials-XXXXXX")
chmod 755 "$top" # the postgres user (when we are root) must reach its folder inside
cleanup() {
    "$rd" stop "$top/redis" >/dev/null 2>&1 || true
    "$pg" stop "$top/pg" >/dev/null 2>&1 || true
    rm -rf "$top"
}
trap cleanup EXIT
failures=0
check() { # WHAT COMMAND...: the command must succeed
    local what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
mode() { stat -c %a "$1"; }

# Redis ------------------------------------------------------------------------------------------------------
redis=$("$rd" start "$top/redis")
port=$(cat "$top/redis/port")
password=$(cat "$top/redis/password")
check "the Redis URL names the password file" [ "$redis" = "redis://127.0.0.1:$port/0?password_file=$top/redis/password" ]
check "the Redis folder is 0700" [ "$(mode "$top/redis")" = 700 ]
check "the Redis password file is 0600" [ "$(mode "$top/redis/password")" = 600 ]
check "the Redis configuration file is 0600" [ "$(mode "$top/redis/redis.conf")" = 600 ]
check "the Redis password is on no command line" bash -c "! tr '\0' ' ' </proc/$(cat "$top/redis/redis.pid")/cmdline | grep -q '$password'"
redis_answer() { # the first line Redis answers to $1
    local answer
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf '%s\r\n' "$1" >&3
    read -r -t 5 answer <&3 || answer=""
    exec 3>&-
    echo "$answer"
}
check "Redis refuses a client that does not authenticate" [ "$(redis_answer "SET gleaner:intruder 1")" = $'-NOAUTH Authentication required.\r' ]
check "Redis takes the password" [ "$(redis_answer "AUTH $password")" = $'+OK\r' ]

# PostgreSQL -------------------------------------------------------------------------------------------------
database=$("$pg" start "$top/pg")
pgport=$(cat "$top/pg/port")
check "the PostgreSQL URL names the password file" \
    [ "$database" = "postgresql://gleaner@127.0.0.1:$pgport/gleaner?passfile=$top/pg/gleaner.pgpass" ]
check "the PostgreSQL folder (and socket folder) is 0700" [ "$(mode "$top/pg")" = 700 ]
check "the coordinator's PostgreSQL password file is 0600" [ "$(mode "$top/pg/gleaner.pgpass")" = 600 ]
check "the superuser's PostgreSQL password file is 0600" [ "$(mode "$top/pg/superuser.pgpass")" = 600 ]
check "pg_hba.conf trusts nobody" bash -c "! grep -E '^[^#]*\\btrust\\b' '$top/pg/data/pg_hba.conf'"
as_server=() # the server's own system user: postgres when we are root
[[ $(id -u) -eq 0 ]] && as_server=(runuser -u postgres --)
refused() { # psql ARGS...: refused for want of a password
    local out
    out=$("${as_server[@]}" env PGPASSFILE=/dev/null "$bin/psql" -X -w "$@" -c 'SELECT 1' 2>&1) && return 1
    [[ $out == *"no password supplied"* ]] || { echo "$out"; return 1; }
}
check "PostgreSQL refuses the coordinator's role over TCP without the password" \
    refused -h 127.0.0.1 -p "$pgport" -U gleaner -d gleaner
check "PostgreSQL refuses the superuser over TCP without the password" \
    refused -h 127.0.0.1 -p "$pgport" -U postgres -d postgres
check "PostgreSQL refuses the server's own system user on the socket without the password" \
    refused -h "$top/pg" -p "$pgport" -U postgres -d postgres
check "the password file lets the coordinator's role in" \
    env PGPASSFILE="$top/pg/gleaner.pgpass" "$bin/psql" -X -w -q -h 127.0.0.1 -p "$pgport" -U gleaner -d gleaner \
    -c 'SELECT 1' -o /dev/null

# The coordinator ---------------------------------------------------------------------------------------------
out=$("$coordinator" init --data-dir "$top/c1" --redis "redis://127.0.0.1:$port/0" 2>&1) && status=0 || status=$?
says() { [[ $status -ne 0 && $out == *"$1"* ]] || { echo "$out"; return 1; }; }
check "init without Redis's password refuses, saying what to do" says "asks for a password"
out=$("$coordinator" init --data-dir "$top/c3" --database "$database" --redis "$redis" 2>&1) && status=0 || status=$?
check "the coordinator gets into both with the URLs the scripts print (init)" [ "$status" = 0 ]
[[ $status -eq 0 ]] || echo "$out"
check "config.json names the files, holds no password" \
    bash -c "grep -q 'passfile=' '$top/c3/config.json' && grep -q 'password_file=' '$top/c3/config.json' && ! grep -q '$password' '$top/c3/config.json'"

[[ $failures -eq 0 ]] || { echo "$failures check(s) failed"; exit 1; }
echo "all checks passed"
