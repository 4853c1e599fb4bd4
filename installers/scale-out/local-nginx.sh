#!/usr/bin/env bash
# nginx of its own in front of Gleaner coordinators, on this machine: its files in a folder, listening on 127.0.0.1
# only, terminating TLS with the deployment's certificate (the one agents trust) and passing requests on over TLS to
# the coordinators, round robin, with the client's address in X-Forwarded-For. Give the coordinators
# `--public-url https://127.0.0.1:PORT --trusted-proxy 127.0.0.1` at init (docs/scale-out.md). It stops exactly the
# nginx it started (the process id in its pid file), never the system's own.
#
#   local-nginx.sh start DIR --cert CERT --key KEY --upstream HOST:PORT [--upstream HOST:PORT ...] [--port PORT]
#                    [--blobs BLOBS]
#                                   write DIR/nginx.conf and start nginx; prints its URL. CERT and KEY: the
#                                   coordinator's data directory's tls/cert.pem and tls/key.pem. The coordinators'
#                                   certificate is also what nginx checks them against (as "localhost").
#                                   --blobs: the deployment's blob folder (SHARED_DIR/blobs), which nginx then
#                                   serves at /_gleaner/blobs/ for coordinators made with
#                                   `init --accel-redirect /_gleaner/blobs/`; nginx's workers must read it.
#   local-nginx.sh url DIR          the URL of the running nginx
#   local-nginx.sh stop DIR         SIGQUIT (finish what is in flight), SIGKILL after 15 s
#
# Needs nginx (installers/install-deps.sh installs it).
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/common.sh"

die() { echo "local-nginx: $*" >&2; exit 1; }
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }

[[ $# -ge 1 ]] || { usage >&2; exit 2; }
command=$1; shift
case "$command" in -h|--help) usage; exit 0 ;; esac
[[ $# -ge 1 ]] || die "$command needs nginx's folder (local-nginx.sh --help)"
dir=$(realpath -m "$1"); shift
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[[ -x "$nginx" ]] || die "nginx is missing; install Debian's nginx (installers/install-deps.sh)"

port_of() {
    [[ -f "$dir/port" ]] || die "$dir has no nginx started by this script (no $dir/port)"
    cat "$dir/port"
}

running_pid() { pid_running "$dir/nginx.pid" "$nginx"; }

url_of() { echo "https://127.0.0.1:$(port_of)"; }

case "$command" in
start)
    cert="" key="" port="" blobs="" upstreams=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --cert) cert=$(realpath "$2"); shift 2 ;;
            --key) key=$(realpath "$2"); shift 2 ;;
            --upstream) upstreams+=("$2"); shift 2 ;;
            --port) port=$2; shift 2 ;;
            --blobs) blobs=$(realpath -m "$2"); shift 2 ;;
            *) die "start: unknown option $1" ;;
        esac
    done
    [[ -r "$cert" && -r "$key" ]] || die "start needs --cert and --key, readable PEM files"
    [[ ${#upstreams[@]} -ge 1 ]] || die "start needs at least one --upstream HOST:PORT (a coordinator)"
    host_port='^[][A-Za-z0-9.:-]+:[0-9]+$'
    for upstream in "${upstreams[@]}"; do
        [[ "$upstream" =~ $host_port ]] || die "--upstream $upstream: expected HOST:PORT"
    done
    if [[ -n "$blobs" ]]; then
        [[ -d "$blobs" ]] || die "--blobs $blobs: no such folder (the blob folder is SHARED_DIR/blobs)"
        # nginx's workers open the files: as www-data when this runs as root, else as this user.
        if [[ $(id -u) -eq 0 ]] && ! setpriv --reuid www-data --regid www-data --clear-groups test -x "$blobs"; then
            die "--blobs $blobs: nginx's workers (www-data) cannot open it; give them its group along the way," \
                "e.g. chgrp www-data SHARED_DIR && chmod g+x SHARED_DIR (docs/scale-out.md)"
        fi
    fi
    if pid=$(running_pid); then
        echo "local-nginx: already running (pid $pid)" >&2
        url_of
        exit 0
    fi
    mkdir -p "$dir/tmp"
    [[ -z "$port" && -f "$dir/port" ]] && port=$(cat "$dir/port")
    port=${port:-$(free_port)}
    [[ "$port" =~ ^[0-9]+$ ]] || die "--port needs a number"
    echo "$port" >"$dir/port"
    # Run as root, nginx's workers run as www-data: they write only its temporary files (the certificates and the
    # logs are opened by the master).
    user_line=""
    if [[ $(id -u) -eq 0 ]]; then
        user_line="user www-data;"
        chown www-data "$dir/tmp"
    fi
    servers=""
    for upstream in "${upstreams[@]}"; do servers+="        server $upstream;"$'\n'; done
    # The coordinators decide who may download what; nginx sends the bytes (X-Accel-Redirect). Only a
    # coordinator's answer reaches this location (internal), and it keeps the coordinator's entity tag, which
    # the agents' resumed downloads name in If-Range.
    blob_location=""
    [[ -n "$blobs" ]] && blob_location="
        location /_gleaner/blobs/ {
            internal;
            alias $blobs/;
            etag off;
            add_header ETag \$upstream_http_etag;
            sendfile on;
            tcp_nopush on;
        }"
    cat >"$dir/nginx.conf" <<CONF
# Written by local-nginx.sh: nginx in front of Gleaner coordinators (docs/scale-out.md).
$user_line
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
    # Which coordinator answered each request (upstream=HOST:PORT), and where nginx sent a file from in its
    # place (accel=URI, X-Accel-Redirect), for the admin and the tests.
    log_format gleaner '\$remote_addr [\$time_local] "\$request" \$status \$body_bytes_sent '
                       'upstream=\$upstream_addr \$request_time accel=\$upstream_http_x_accel_redirect';
    access_log $dir/access.log gleaner;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    upstream gleaner_coordinators {
$servers        keepalive 32;
    }
    server {
        listen 127.0.0.1:$port ssl;
        ssl_certificate $cert;
        ssl_certificate_key $key;
        ssl_protocols TLSv1.2 TLSv1.3;
        # The coordinators hold bodies to their own limits, and stream them to disk as they come.
        client_max_body_size 0;
        proxy_request_buffering off;
        location / {
            proxy_pass https://gleaner_coordinators;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$http_host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_ssl_trusted_certificate $cert;
            proxy_ssl_verify on;
            proxy_ssl_name localhost;
            proxy_ssl_server_name on;
            proxy_ssl_session_reuse on;
            # Long uploads, downloads and the dashboard's event stream (which asks for no buffering itself).
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }$blob_location
    }
}
CONF
    "$nginx" -t -q -c "$dir/nginx.conf" -p "$dir" -g "daemon on;" 2>"$dir/config-test.log" \
        || die "nginx refused the configuration it was given ($dir/nginx.conf): $(tail -3 "$dir/config-test.log")"
    "$nginx" -c "$dir/nginx.conf" -p "$dir" -g "daemon on;" || die "nginx did not start; see $dir/error.log"
    for _ in $(seq 50); do running_pid >/dev/null && break; sleep 0.1; done
    pid=$(running_pid) || die "nginx did not start; see $dir/error.log"
    echo "local-nginx: running (pid $pid), log $dir/error.log" >&2
    url_of
    ;;
url)
    running_pid >/dev/null || die "no nginx of this script runs in $dir"
    url_of
    ;;
stop)
    if ! pid=$(running_pid); then
        echo "local-nginx: no nginx of this script runs in $dir" >&2
        exit 0
    fi
    stop_pid local-nginx "$pid" QUIT
    ;;
*)
    die "unknown command $command (local-nginx.sh --help)"
    ;;
esac
