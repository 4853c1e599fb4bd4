# What installers/scale-out's local-*.sh scripts share (sourced, not run): a free loopback port, and finding and
# stopping exactly the process a script started, by the pid it wrote, never another with the same name.

# A TCP port on 127.0.0.1 that nobody listens on right now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
        || echo $((20000 + RANDOM % 20000))
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
