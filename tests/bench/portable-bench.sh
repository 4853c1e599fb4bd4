#!/usr/bin/env bash
# Runs the scale-out benchmarks (bench_lease, bench_shared_weights) on a machine that has none of Debian's
# packages, such as a larger scratch machine lent for a benchmark: `pack` makes one archive, on the Debian 12
# machine that built the benchmarks, of the two programs, every library they load (glibc included), Qt's SQL and
# TLS plugins, PostgreSQL 15 and Redis; `run`, on the other machine, unpacks it and runs the benchmarks against
# PostgreSQL and Redis started by installers/scale-out's own scripts. The figures in docs/scale-out.md, "On 16
# cores", came from it.
#
#   portable-bench.sh pack ARCHIVE.tar.xz   (here: needs build/bench, patchelf, xz, gcc, python3)
#   portable-bench.sh run ARCHIVE.tar.xz [RESULTS_DIR]   (there, as root, from the repository's root)
#
# `run` writes into the machine's root: /opt/gleaner-bench, /usr/lib/postgresql/15, /usr/share/postgresql/15,
# /usr/local/bin/redis-server and /usr/share/zoneinfo's UTC, Etc/UTC and GMT (the directories above them keep
# their owners and modes). Use it on a scratch machine only. It prints each figure as it goes and appends
# every benchmark's JSON, labelled, to RESULTS_DIR/results.jsonl (default $OUT or /tmp/portable-bench).
# Environment for `run`: PS (coordinator counts, default "1 2 4 8"), RESULT_SECONDS (20), LEASE_SECONDS (3),
# LEASE_CLIENTS (400: 16 leases each, so that more coordinators do not reach the cap within the run), WAITS (the
# lease_wait_for_own_update_ms values to run --results with, default "2000 0"), DEADLINE (seconds, default 420:
# later runs are skipped), UNPACKED=1 (the archive is already unpacked, by an earlier run on this machine).
#
# The programs run with the archive's own loader and libraries (an ELF interpreter and search path under
# /opt/gleaner-bench), whatever the machine's glibc. To fit the archive into what can be carried, libraries that
# the measured paths link but never call (libtorch's image, video and oneDNN libraries, LAPACK, X11 and OpenGL
# behind Qt's Gui, systemd, LDAP and Kerberos) are replaced by stubs of the same names, symbols and versions whose
# functions return 0; libtorch's links to OpenCV and FFmpeg are removed. The benchmarks' paths call none of them
# (docs/scale-out.md, "On 16 cores", compares the archive's figures with the build's). PostgreSQL's client then
# asks for no GSSAPI encryption (PGGSSENCMODE=disable), which a client without Kerberos credentials skips anyway.
set -euo pipefail

die() { echo "portable-bench: $*" >&2; exit 1; }
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
[[ $# -ge 1 ]] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac

PREFIX=/opt/gleaner-bench
PG=/usr/lib/postgresql/15
LIBDIR=/lib/x86_64-linux-gnu

# stub LIBRARY OUTPUT: a library with LIBRARY's soname, dynamic symbols and symbol versions.
stub() {
    python3 - "$1" "$2" <<'EOF'
import collections, os, subprocess, sys
lib, out = sys.argv[1], sys.argv[2]
soname = subprocess.run(['sh', '-c', f"readelf -d '{lib}' | sed -n 's/.*SONAME.*\\[\\(.*\\)\\]/\\1/p'"],
                        capture_output=True, text=True).stdout.strip() or os.path.basename(lib)
rows = subprocess.run(['nm', '-D', '-S', '--defined-only', lib], capture_output=True, text=True, check=True).stdout
asm = ['.data', '.balign 64', 'stub_handle:', '.zero 4096']
nodes, seen = collections.OrderedDict(), set()
for row in rows.split('\n'):
    p = row.split()
    if len(p) == 4: _, size, kind, name = p
    elif len(p) == 3: _, kind, name = p; size = '0'
    else: continue
    name, _, version = name.partition('@')
    version = version.lstrip('@')
    if kind == 'A':  # a version node
        nodes.setdefault(name, []); continue
    if name in seen: continue
    seen.add(name)
    if version: nodes.setdefault(version, []).append(name)
    bind = '.weak' if kind in 'VWvw' else '.globl'
    if kind in 'TtWwi':
        body = ['xorl %eax,%eax', 'ret']
        # oneDNN's handle constructors run in libtorch's static initialisers: give them a handle.
        if name.startswith('dnnl_') and name.endswith(('_create', '_clone')):
            body = ['leaq stub_handle(%rip),%rax', 'movq %rax,(%rdi)', 'xorl %eax,%eax', 'ret']
        asm += ['.text', f'{bind} {name}', f'.type {name},@function', f'{name}:'] + body
    else:
        n = min(max(int(size, 16), 8), 1 << 16)
        kind_name = '@gnu_unique_object' if kind == 'u' else '@object'
        asm += ['.data', '.balign 16', f'{bind} {name}', f'.type {name},{kind_name}', f'.size {name},{n}',
                f'{name}:', f'.zero {n}']
open(out + '.s', 'w').write('\n'.join(asm) + '\n')
command = ['gcc', '-shared', '-nostdlib', '-Wl,-soname,' + soname, '-o', out, out + '.s']
script = ''.join((f'{v} {{ global: {"; ".join(s)}; }};\n' if s else f'{v} {{ }};\n')
                 for v, s in nodes.items() if s or v != 'HIDDEN')
if script:
    open(out + '.map', 'w').write(script)
    command.append('-Wl,--version-script=' + out + '.map')
subprocess.run(command, check=True)
for leftover in (out + '.s', out + '.map'):
    if os.path.exists(leftover): os.remove(leftover)
EOF
}

pack() {
    local archive=$1 root=$(dirname "$0")/../..
    root=$(realpath "$root")
    for tool in patchelf xz gcc python3 readelf nm strip; do
        command -v $tool >/dev/null || die "pack needs $tool (apt-get install patchelf xz-utils gcc python3 binutils)"
    done
    for program in bench_lease bench_shared_weights; do
        [[ -x "$root/build/bench/$program" ]] || die "build/bench/$program is missing: build the project first"
    done
    [[ -x $PG/bin/postgres && -x /usr/bin/redis-check-rdb ]] || die "needs postgresql-15 and redis-server (installers/install-deps.sh)"
    work=$(mktemp -d) # global: the trap below runs after pack has returned or died
    trap 'rm -rf --one-file-system "$work"' EXIT
    local top=$work/root g=$work/root$PREFIX own=$work/own
    mkdir -p "$g"/{glibc,lib,bin,plugins/sqldrivers,plugins/tls,locale} "$top$PG"/{bin,lib} "$top/usr/share/postgresql" \
        "$top/usr/local/bin" "$top/usr/share/zoneinfo/Etc" "$own"
    echo "portable-bench: collecting" >&2
    for program in bench_lease bench_shared_weights; do strip --strip-debug -o "$g/bin/$program" "$root/build/bench/$program"; done
    local plugins=/usr/lib/x86_64-linux-gnu/qt6/plugins
    cp "$plugins"/sqldrivers/libqsqlite.so "$plugins"/sqldrivers/libqsqlpsql.so "$g/plugins/sqldrivers/"
    cp "$plugins"/tls/libqopensslbackend.so "$g/plugins/tls/"
    for program in postgres initdb pg_ctl psql; do cp "$PG/bin/$program" "$top$PG/bin/"; done
    cp "$PG"/lib/*.so "$top$PG/lib/"
    rm -f "$top$PG"/lib/llvmjit*.so # the JIT: LLVM alone is larger than the rest
    cp -a /usr/share/postgresql/15 "$top/usr/share/postgresql/"
    rm -rf "$top/usr/share/postgresql/15/man"
    cp /usr/bin/redis-check-rdb "$top/usr/local/bin/redis-server" # one program; its name says which
    for zone in UTC Etc/UTC GMT; do cp /usr/share/zoneinfo/UTC "$top/usr/share/zoneinfo/$zone"; done
    cp -a /usr/lib/locale/C.utf8 "$g/locale/"
    # libtorch_cpu without its links to OpenCV, FFmpeg and OpenCL, and the stubs: looked up first below.
    cp -L $LIBDIR/libtorch_cpu.so.1.13 "$own/"
    local drop=()
    for needed in $(readelf -d $LIBDIR/libtorch_cpu.so.1.13 | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do
        case $needed in libopencv*|libav*|libsw*|libOpenCL*|libleveldb*|liblmdb*|libsnappy*|libzmq*) drop+=(--remove-needed "$needed") ;; esac
    done
    patchelf "${drop[@]}" "$own/libtorch_cpu.so.1.13"
    for lib in libdnnl.so.2 liblapack.so.3 libsystemd.so.0 libldap-2.5.so.0 libgssapi_krb5.so.2 libEGL.so.1 \
        libfontconfig.so.1 libX11.so.6 libQt6DBus.so.6 libxkbcommon.so.0 libGLX.so.0 libOpenGL.so.0 \
        libharfbuzz.so.0 libmd4c.so.0 libfreetype.so.6 libpng16.so.16; do
        stub "$LIBDIR/$lib" "$own/$lib"
    done
    local elfs
    elfs=$(find "$top" -type f \( -name '*.so' -o -perm -u+x \) -exec sh -c 'head -c4 "$1" | grep -q ELF && echo "$1"' _ {} \;)
    local closure=$work/closure
    for e in $elfs; do
        LD_LIBRARY_PATH=$own:$PG/lib ldd "$e" | awk '/not found/ {print "MISSING " $1} /=>/ && $3 ~ /^\// {print $3} /ld-linux/ && $1 ~ /^\// {print $1}'
    done | sort -u >"$closure"
    ! grep MISSING "$closure" || die "libraries missing here"
    while read -r lib; do
        case $(basename "$lib") in
            ld-linux*|libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*|libanl.so*|libmvec.so*)
                cp -L "$lib" "$g/glibc/" ;;
            *) cp -L "$lib" "$g/lib/" ;;
        esac
    done <"$closure"
    cp "$own"/* "$g/lib/"
    # The archive's loader and libraries, whatever the machine has (DT_RPATH also covers what they load).
    for e in $elfs; do
        if readelf -l "$e" | grep INTERP >/dev/null; then patchelf --set-interpreter $PREFIX/glibc/ld-linux-x86-64.so.2 "$e"; fi
        patchelf --force-rpath --set-rpath $PREFIX/lib:$PREFIX/glibc:$PG/lib "$e"
    done
    for lib in "$g"/lib/*; do
        if readelf -d "$lib" | grep RUNPATH >/dev/null; then patchelf --force-rpath --set-rpath $PREFIX/lib:$PREFIX/glibc "$lib"; fi
    done
    echo "portable-bench: compressing $(du -sh "$top" | cut -f1) (a few minutes)" >&2
    tar -C "$top" --owner=0 --group=0 --numeric-owner -cf - opt usr | xz -9e -T2 >"$archive"
    echo "portable-bench: $archive, $(du -h "$archive" | cut -f1)" >&2
}

run() {
    local archive=$1 out=${2:-${OUT:-/tmp/portable-bench}}
    [[ $(id -u) -eq 0 ]] || die "run needs root: it unpacks into / and starts PostgreSQL as the postgres user"
    [[ -f installers/scale-out/local-postgres.sh ]] || die "run from the repository's root"
    mkdir -p "$out"
    local results=$out/results.jsonl t0
    t0=$(date +%s)
    elapsed() { echo $(($(date +%s) - t0)); }
    echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(free -g | awk '/Mem/ {print $2}') GiB"
    echo "   4 KiB synchronous writes: $(dd if=/dev/zero of=/tmp/portable-bench.dd bs=4k count=2000 oflag=dsync 2>&1 | tail -1)"
    rm -f /tmp/portable-bench.dd
    if [[ -n ${UNPACKED:-} ]]; then
        [[ -x $PREFIX/bin/bench_lease ]] || die "UNPACKED is set, but $PREFIX/bin/bench_lease is missing"
    elif command -v xz >/dev/null; then
        tar --no-overwrite-dir -xJf "$archive" -C /
    else
        python3 -c "
import sys, tarfile
with tarfile.open(sys.argv[1]) as archive:
    # Files only: the directories above them keep their owners and modes.
    archive.extractall('/', members=[m for m in archive if not m.isdir()])
" "$archive"
    fi
    export LOCPATH=$PREFIX/locale QT_PLUGIN_PATH=$PREFIX/plugins PGGSSENCMODE=disable LC_ALL=C
    id postgres >/dev/null 2>&1 || useradd -r -M -d /nonexistent -s /bin/false postgres
    local lease=$PREFIX/bin/bench_lease pg=installers/scale-out/local-postgres.sh rd=installers/scale-out/local-redis.sh
    "$lease" --help >/dev/null || die "bench_lease does not start from the archive"
    "$pg" start /tmp/portable-bench-pg >/dev/null || die "PostgreSQL did not start; see /tmp/portable-bench-pg"
    trap "\"$pg\" stop /tmp/portable-bench-pg >/dev/null 2>&1 || true" EXIT # \$pg expanded now: it is run's own
    local n=0
    one() { # LABEL PROGRAM ARGS...
        local label=$1 started rc
        shift
        if (($(elapsed) > ${DEADLINE:-420})); then
            echo "-- $label: skipped (past ${DEADLINE:-420} s)"
            return
        fi
        started=$(date +%s)
        rc=0
        timeout 150 "$@" >"$out/last.json" 2>"$out/last.err" || rc=$?
        echo "-- $label: exit $rc, $(($(date +%s) - started)) s"
        [[ $rc -eq 0 ]] || tail -5 "$out/last.err"
        python3 -c "import json, sys; d = json.load(open(sys.argv[1])); d['label'] = sys.argv[2]; print(json.dumps(d, sort_keys=True))" \
            "$out/last.json" "$label" >>"$results" || true
        grep -oE '"(leases_per_second|requests|accepted_per_second|p50_ms|p99_ms|result_p50_ms|results_refused)": [0-9.]+' \
            "$out/last.json" | tr '\n' ' ' || true
        echo
    }
    shared() { # LABEL P ARGS...: a new database and an empty Redis for each run
        local label=$1 p=$2 url redis
        shift 2
        n=$((n + 1))
        # A name of this run's own: the cluster outlives a run.
        url=$("$pg" createdb /tmp/portable-bench-pg "bench_${t0}_$n") || { echo "-- $label: no database (createdb failed)"; return; }
        redis=$("$rd" start /tmp/portable-bench-redis$n) || { echo "-- $label: Redis did not start"; return; }
        one "$label" "$lease" --database "$url" --redis "$redis" --coordinators "$p" "$@"
        "$rd" stop /tmp/portable-bench-redis$n 2>/dev/null || true
        rm -rf /tmp/portable-bench-redis$n
    }
    local p w rs=${RESULT_SECONDS:-20} ls=${LEASE_SECONDS:-3} lc=${LEASE_CLIENTS:-400}
    echo "== accepted updates, 32 agents, $rs s"
    for w in ${WAITS:-2000 0}; do
        one "results embedded wait=$w" "$lease" --results --seconds "$rs" --lease-wait-ms "$w"
        for p in ${PS:-1 2 4 8}; do shared "results P=$p wait=$w" "$p" --results --seconds "$rs" --lease-wait-ms "$w"; done
    done
    echo "== leases, $lc agents, $ls s"
    one "leases embedded" "$lease" --clients "$lc" --seconds "$ls"
    for p in ${PS:-1 2 4 8}; do shared "leases P=$p" "$p" --clients "$lc" --seconds "$ls"; done
    echo "== a fold through Redis"
    PATH=/usr/local/bin:$PATH one "shared_weights" $PREFIX/bin/bench_shared_weights
    echo "== done in $(elapsed) s; $results"
}

command=$1
shift
case "$command" in
    pack) [[ $# -eq 1 ]] || die "pack needs the archive's name (portable-bench.sh --help)"; pack "$1" ;;
    run) [[ $# -ge 1 ]] || die "run needs the archive (portable-bench.sh --help)"; run "$@" ;;
    *) die "unknown command $command (portable-bench.sh --help)" ;;
esac
