#!/bin/sh
# with-xvfb.sh COMMAND [ARG...]: runs COMMAND with DISPLAY set to a private Xvfb server on a free display
# number, and stops that server (by its pid) when COMMAND ends, whatever way it ends. COMMAND's exit status is
# the script's. The tests of the idle detection and the tray app use it; nothing here touches a real display.
set -eu

if [ "$#" -eq 0 ]; then
    echo "usage: with-xvfb.sh COMMAND [ARG...]" >&2
    exit 2
fi
if ! command -v Xvfb >/dev/null 2>&1; then
    echo "with-xvfb.sh: Xvfb is not installed (Debian package xvfb; installers/install-deps.sh installs it)" >&2
    exit 2
fi

tmp=$(mktemp -d)
fifo="$tmp/display"
mkfifo "$fifo"
# -displayfd: Xvfb picks a free display number and writes it once it accepts connections.
Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp 3>"$fifo" 2>"$tmp/xvfb.log" &
xvfb_pid=$!
cleanup() {
    kill "$xvfb_pid" 2>/dev/null || true
    wait "$xvfb_pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

display=""
read -r display <"$fifo" || true
if [ -z "$display" ]; then
    echo "with-xvfb.sh: Xvfb did not start:" >&2
    cat "$tmp/xvfb.log" >&2
    exit 2
fi

export DISPLAY=":$display"
unset WAYLAND_DISPLAY
status=0
"$@" || status=$?
exit "$status"
