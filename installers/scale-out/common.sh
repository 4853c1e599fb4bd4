# What installers/scale-out's local-*.sh scripts share (sourced, not run): a free loopback port, a random
# password, a path as a URL may hold it, and finding and stopping exactly the process a script started, by the
# pid it wrote, never another with the same name.

# A TCP port on 127.0.0.1 that nobody listens on right now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
        || echo $((20000 + RANDOM % 20000))
}

# 32 random letters and digits (190 bits): nothing in it needs quoting in SQL, a URL, a .pgpass line or a Redis
# configuration file.
random_password() {
    local password
    password=$(LC_ALL=C tr -dc 'A-Za-z0-9' </dev/urandom | head -c 32) || true
    [[ ${#password} -eq 32 ]] || { echo "cannot read random bytes from /dev/urandom" >&2; return 1; }
    echo "$password"
}

# url_encode TEXT: TEXT with every byte but letters, digits and -._~/ percent-encoded, for a URL's query.
url_encode() {
    local text=$1 out="" c i
    local LC_ALL=C
    for ((i = 0; i < ${#text}; i++)); do
        c=${text:i:1}
        case "$c" in
            [A-Za-z0-9._~/-]) out+=$c ;;
            *) printf -v c '%%%02X' "'$c"; out+=$c ;;
        esac
    done
    echo "$out"
}

# pid_running PIDFILE PROGRAM: prints the pid in PIDFILE's first line when that process runs PROGRAM (links
# followed); fails otherwise.
pid_running() {
    local file=$1 program=$2 pid
    [[ -f "$file" ]] || return 1
    pid=$(head -1 "$file")
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null \
        && [[ $(readlink -f "/proc/$pid/exe" 2>/dev/null) == $(readlink -f "$program") ]] && echo "$pid"
}

# stop_pid NAME PID SIGNAL: sends SIGNAL (the program's own graceful stop), waits 15 s at most, then SIGKILLs the
# process and its children. NAME prefixes what it says on stderr.
stop_pid() {
    local name=$1 pid=$2 signal=$3
    kill -"$signal" "$pid"
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        pkill -KILL -P "$pid" 2>/dev/null || true
        kill -KILL "$pid"
        echo "$name: it did not stop within 15 s; killed" >&2
    fi
    echo "$name: stopped (pid $pid)" >&2
}
