#!/usr/bin/env bash
# bench/run-tcp.sh — L4 (TCP) load benchmark: switchboard's proxy/tcpproxy vs
# nginx `stream` vs HAProxy `mode tcp` vs no proxy at all, on loopback, on
# this machine.
#
# Usage (from anywhere; as root on a fresh Debian machine, or as any user
# when nginx with its stream module, haproxy and strace are installed):
#
#   bench/run-tcp.sh
#   ROUNDS=1 DURATION=3s BULK_BYTES=268435456 bench/run-tcp.sh   # quick smoke run
#   TARGETS="switchboard nginx direct" bench/run-tcp.sh           # subset
#   TARGETS="switchboard-loop switchboard-goroutine nginx" bench/run-tcp.sh  # both engines
#   PROFILE=1 bench/run-tcp.sh                                   # + CPU profile
#
# What is measured, per target and round:
#   bulk      one connection sends BULK_BYTES (default 1 GiB) to a sink
#             backend, which answers with its byte count after the EOF;
#             MiB/s from connect to that answer; and the CPU time per GiB
#             of the whole machine (/proc/stat) and of the proxy, which
#             bounds what any proxy could reach here (see the table notes).
#   connrate  CONNS clients (default 64) for DURATION (default 10s) each
#             loop: connect, write 8 bytes, read their echo, close;
#             connections per second, p50/p99 of one such cycle, errors.
#
# switchboard is `switchboard serve` (built from ./cmd/switchboard, or
# SWITCHBOARD_BIN) with one `protocol: tcp` listener, round_robin over the
# two backends, on the engine ENGINE names; the config is written out below.
# switchboard-loop and switchboard-goroutine are the same, each a process of
# its own, with engine: eventloop and engine: goroutine: both engines in one
# run, their CPU apart. HARNESS=1 measures
# bench/tcpproxy instead: one proxy/tcpproxy Listener on a static pool, built
# straight on the package (it served before the config wiring existed, and
# it is what the splice check traces).
#
# Environment (all optional):
#   ROUNDS=3             measurement rounds; each measures every target once,
#                        the order rotating by one each round
#   BULK_BYTES=1073741824
#   DURATION=10s         connrate length per run (s or m suffix)
#   CONNS=64             connrate concurrent clients
#   SOURCES=16           connrate source addresses (127.0.0.2 and on): the
#                        clients' connects spread over them. With 1 (the
#                        kernel's choice) each connect searches one
#                        address's ports crowded with TIME_WAIT, which
#                        bounded every target, no proxy included, at the
#                        same rate (about 14,000 conn/s here)
#   TARGETS="switchboard nginx haproxy direct"
#                        (also: switchboard-loop switchboard-goroutine)
#   ENGINE=auto          the switchboard target's listener engine: auto (the
#                        event loop on Linux), eventloop or goroutine
#   NGINX_WORKERS=1      worker_processes of nginx stream
#   HAPROXY_THREADS=2    nbthread of HAProxy
#   HAPROXY_SPLICE=1     1: HAProxy gets `option splice-auto` (its kernel
#                        splicing, as switchboard splices); 0: its default
#   SWITCHBOARD_BIN      prebuilt switchboard; default: go build ./cmd/switchboard
#                        (-> bench/out/switchboard-tcp)
#   HARNESS=0            1: measure bench/tcpproxy instead of switchboard serve
#   PROFILE=0            1: one extra connrate run against switchboard while
#                        a 10s CPU profile is taken from 127.0.0.1:19911
#                        /debug/pprof (bench/out/tcp-*/cpu.pprof)
#   SPLICE_CHECK=1       1: after the rounds, run BULK_BYTES/4 through a fresh
#                        harness under `strace -f -e trace=splice` and report
#                        how many bytes splice(2) moved
#   SKIP_INSTALL=0       1: never call apt-get; fail if a tool is missing
#
# Installs (apt-get, only what is missing): nginx, libnginx-mod-stream,
# haproxy, strace. Ports: backends 127.0.0.1:19101 and :19102 (one tcpload
# process), switchboard :18180 (admin/pprof :19911), nginx :18181, haproxy :18182,
# strace run :18183, switchboard-loop :18184 (admin :19912), switchboard-goroutine
# :18185 (admin :19913). Every server is a child of this script with its config
# in a temp dir and is stopped on exit, failure or Ctrl-C.
#
# Output: a markdown table on stdout; raw outputs, configs and logs in
# bench/out/tcp-<timestamp>/ (symlinked as bench/out/tcp-latest).
# Exit status: 0 all measured without errors; 1 setup failure; 3 some target
# not measured or with errors (the table says which).

set -euo pipefail

ROUNDS=${ROUNDS:-3}
BULK_BYTES=${BULK_BYTES:-1073741824}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
SOURCES=${SOURCES:-16}
TARGETS=${TARGETS:-switchboard nginx haproxy direct}
NGINX_WORKERS=${NGINX_WORKERS:-1}
HAPROXY_THREADS=${HAPROXY_THREADS:-2}
HAPROXY_SPLICE=${HAPROXY_SPLICE:-1}
SWITCHBOARD_BIN=${SWITCHBOARD_BIN:-}
HARNESS=${HARNESS:-0}
PROFILE=${PROFILE:-0}
SPLICE_CHECK=${SPLICE_CHECK:-1}
SKIP_INSTALL=${SKIP_INSTALL:-0}
ENGINE=${ENGINE:-auto}

B1=19101
B2=19102
SB_PORT=18180
SB_PPROF=19911
NGINX_PORT=18181
HAPROXY_PORT=18182
STRACE_PORT=18183
SB_LOOP_PORT=18184
SB_LOOP_ADMIN=19912
SB_GOROUTINE_PORT=18185
SB_GOROUTINE_ADMIN=19913

export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin:/usr/local/go/bin"
export LC_ALL=C

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
OUT_DIR="$REPO_ROOT/bench/out"
NGINX_STREAM_MODULE=/usr/lib/nginx/modules/ngx_stream_module.so

BENCH_TAG=bench-tcp
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for v in ROUNDS CONNS NGINX_WORKERS HAPROXY_THREADS BULK_BYTES; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[[ $DURATION =~ ^[1-9][0-9]*[sm]?$ ]] || die "DURATION must look like 10s, 1m or 10, got '$DURATION'"
for t in $TARGETS; do
	case $t in switchboard | switchboard-loop | switchboard-goroutine | nginx | haproxy | direct) ;;
	*) die "unknown target '$t' in TARGETS (known: switchboard switchboard-loop switchboard-goroutine nginx haproxy direct)" ;;
	esac
done
case $ENGINE in auto | eventloop | goroutine) ;; *) die "ENGINE must be auto, eventloop or goroutine, got '$ENGINE'" ;; esac

# ---------------------------------------------------------------- cleanup
install_cleanup # lib.sh: stops what the script started, on any exit

# ---------------------------------------------------------------- install
missing_pkgs() {
	if want nginx; then
		command -v nginx >/dev/null 2>&1 || printf 'nginx '
		[[ -e $NGINX_STREAM_MODULE ]] || printf 'libnginx-mod-stream '
	fi
	if want haproxy; then command -v haproxy >/dev/null 2>&1 || printf 'haproxy '; fi
	if ((SPLICE_CHECK)); then command -v strace >/dev/null 2>&1 || printf 'strace '; fi
	if ((PROFILE)); then command -v curl >/dev/null 2>&1 || printf 'curl '; fi
}
install_pkgs() {
	local missing
	missing=$(missing_pkgs)
	[[ -z $missing ]] && return 0
	log "missing: $missing"
	((SKIP_INSTALL)) && die "SKIP_INSTALL=1 and these packages are missing: $missing"
	[[ $(id -u) -eq 0 ]] || die "missing packages: $missing— run as root (the script installs them with apt-get) or install them yourself"
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install $missing by hand"
	log "apt-get update"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$OUT_DIR/apt-update.log" 2>&1 ||
		die "apt-get update failed; see $OUT_DIR/apt-update.log"
	# Keep the packages from starting system-wide nginx/haproxy services.
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		POLICY_RC_CREATED=1
	fi
	log "apt-get install -y $missing"
	# shellcheck disable=SC2086  # one word per package
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing \
		>"$OUT_DIR/apt-install-tcp.log" 2>&1 ||
		die "apt-get install $missing failed; see $OUT_DIR/apt-install-tcp.log"
	if ((POLICY_RC_CREATED)); then rm -f /usr/sbin/policy-rc.d; POLICY_RC_CREATED=0; fi
	missing=$(missing_pkgs)
	[[ -z $missing ]] || die "still missing after apt-get install: $missing"
}

# ---------------------------------------------------------------- helpers
stop() { # PID
	kill -TERM -- "-$1" 2>/dev/null || kill -TERM "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}
kv() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" "$2" | tail -n1; }
target_port() {
	case $1 in switchboard) echo $SB_PORT ;; switchboard-loop) echo $SB_LOOP_PORT ;; switchboard-goroutine) echo $SB_GOROUTINE_PORT ;; nginx) echo $NGINX_PORT ;; haproxy) echo $HAPROXY_PORT ;; direct) echo $B1 ;; esac
}
LOAD=""
run_bulk() { # TARGET BYTES OUTFILE
	timeout --kill-after=5 180 "$LOAD" bulk -addr "127.0.0.1:$(target_port "$1")" -bytes "$2" >"$3" 2>&1
}
run_connrate() { # TARGET DURATION OUTFILE
	timeout --kill-after=5 "$(($(dur_seconds "$2") + 60))" \
		"$LOAD" connrate -addr "127.0.0.1:$(target_port "$1")" -c "$CONNS" -sources "$SOURCES" -d "$2" >"$3" 2>&1
}

declare -A NOT_MEASURED=()
declare -A SID=() # target -> session id (pid of the setsid'd leader) of its processes

# cpu_ticks SID: utime+stime, in clock ticks, of every process in session SID.
cpu_ticks() {
	local p s=0
	for p in $(ps -o pid= -s "$1" 2>/dev/null); do
		s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
	done
	echo "$s"
}
CLK_TCK=$(getconf CLK_TCK)
# machine_busy: busy jiffies (CLK_TCK units) summed over every core, from
# /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal,
# busy = all but idle and iowait. Softirq time counts, which per-process
# times miss when ksoftirqd does a loopback hop's receive work.
machine_busy() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat; }

# ---------------------------------------------------------------- setup
mkdir -p "$OUT_DIR"
install_pkgs
command -v go >/dev/null 2>&1 || die "go not found in PATH: needed to build bench/tcpload (and the harness)"

STAMP=$(date +%Y%m%d-%H%M%S)
RUN_DIR="$OUT_DIR/tcp-$STAMP"
[[ -e $RUN_DIR ]] && { STAMP="$STAMP-$$"; RUN_DIR="$OUT_DIR/tcp-$STAMP"; }
mkdir -p "$RUN_DIR"
ln -sfn "tcp-$STAMP" "$OUT_DIR/tcp-latest"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-bench-tcp.XXXXXX")
chmod 755 "$WORK"
log "raw outputs: $RUN_DIR"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

log "go build bench/tcpload bench/tcpproxy"
(cd "$REPO_ROOT" && go build -o "$OUT_DIR/tcpload" ./bench/tcpload) >"$RUN_DIR/build.log" 2>&1 ||
	die "building bench/tcpload failed: $(head -n3 "$RUN_DIR/build.log")"
LOAD="$OUT_DIR/tcpload"
HARNESS_BIN=""
if (cd "$REPO_ROOT" && go build -o "$OUT_DIR/tcpproxy" ./bench/tcpproxy) >>"$RUN_DIR/build.log" 2>&1; then
	HARNESS_BIN="$OUT_DIR/tcpproxy"
elif want switchboard && ((HARNESS)); then
	NOT_MEASURED[switchboard]="building bench/tcpproxy failed (see $RUN_DIR/build.log)"
fi
SB_BIN=""
if { want switchboard && ((!HARNESS)); } || want switchboard-loop || want switchboard-goroutine; then
	if [[ -n $SWITCHBOARD_BIN ]]; then
		[[ -x $SWITCHBOARD_BIN ]] && SB_BIN=$SWITCHBOARD_BIN ||
			for t in switchboard switchboard-loop switchboard-goroutine; do NOT_MEASURED[$t]="SWITCHBOARD_BIN=$SWITCHBOARD_BIN is not an executable file"; done
	else
		log "go build -o bench/out/switchboard-tcp ./cmd/switchboard"
		if (cd "$REPO_ROOT" && go build -o "$OUT_DIR/switchboard-tcp" ./cmd/switchboard) >>"$RUN_DIR/build.log" 2>&1; then
			SB_BIN="$OUT_DIR/switchboard-tcp"
		else
			for t in switchboard switchboard-loop switchboard-goroutine; do NOT_MEASURED[$t]="building ./cmd/switchboard failed (see $RUN_DIR/build.log; HARNESS=1 measures the package alone)"; done
		fi
	fi
fi

check_ports_free "$B1" "$B2"
start backends "$RUN_DIR/backends.log" "$LOAD" serve -listen "127.0.0.1:$B1,127.0.0.1:$B2"
{ wait_port backends "$START_PID" "$B1" && wait_port backends "$START_PID" "$B2"; } || die "backends did not start; see $RUN_DIR/backends.log"

# smoke TARGET: one small bulk and one short connrate must succeed.
smoke() {
	local f="$RUN_DIR/smoke-$1.txt"
	if ! run_bulk "$1" 1048576 "$f" || [[ $(kv bytes "$f") != 1048576 ]]; then
		NOT_MEASURED[$1]="smoke bulk transfer failed: $(tr '\n' ' ' <"$f")"
		return 1
	fi
	return 0
}

# sb_config TARGET PORT ADMIN ENGINE: a switchboard config with one tcp
# listener on ENGINE, written to $WORK/TARGET.yaml (and the run dir).
sb_config() {
	cat >"$WORK/$1.yaml" <<EOF
admin: {listen: 127.0.0.1:$3}
listeners:
  - name: bench
    protocol: tcp
    listen: 127.0.0.1:$2
    upstream: backends
    engine: $4
upstreams:
  backends:
    balance: {policy: round_robin}
    targets:
      - {address: 127.0.0.1:$B1}
      - {address: 127.0.0.1:$B2}
EOF
	cp "$WORK/$1.yaml" "$RUN_DIR/$1.yaml"
}

# --- switchboard-loop, switchboard-goroutine: one process per engine
for t in switchboard-loop switchboard-goroutine; do
	if want "$t" && [[ -z ${NOT_MEASURED[$t]:-} ]]; then
		if [[ $t == switchboard-loop ]]; then port=$SB_LOOP_PORT admin=$SB_LOOP_ADMIN engine=eventloop; else port=$SB_GOROUTINE_PORT admin=$SB_GOROUTINE_ADMIN engine=goroutine; fi
		check_ports_free "$port"
		sb_config "$t" "$port" "$admin" "$engine"
		start "$t" "$RUN_DIR/$t.log" "$SB_BIN" serve --config "$WORK/$t.yaml"
		SID[$t]=$START_PID
		if wait_port "$t" "$START_PID" "$port"; then smoke "$t" || true; else NOT_MEASURED[$t]="did not start; see $RUN_DIR/$t.log"; fi
	fi
done

# --- switchboard: switchboard serve, or the harness
SB_PID=""
if want switchboard && [[ -z ${NOT_MEASURED[switchboard]:-} ]]; then
	check_ports_free "$SB_PORT"
	if ((!HARNESS)); then
		sb_config switchboard "$SB_PORT" "$SB_PPROF" "$ENGINE"
		start switchboard "$RUN_DIR/switchboard.log" "$SB_BIN" serve --config "$WORK/switchboard.yaml"
	else
		start switchboard "$RUN_DIR/switchboard.log" "$HARNESS_BIN" -listen "127.0.0.1:$SB_PORT" \
			-targets "127.0.0.1:$B1,127.0.0.1:$B2" -pprof "127.0.0.1:$SB_PPROF"
	fi
	SB_PID=$START_PID
	SID[switchboard]=$START_PID
	if wait_port switchboard "$SB_PID" "$SB_PORT"; then
		smoke switchboard || true
	else
		NOT_MEASURED[switchboard]="did not start; see $RUN_DIR/switchboard.log"
	fi
fi

# --- nginx stream
if want nginx; then
	check_ports_free "$NGINX_PORT"
	mkdir -p "$WORK/nginx/logs"
	cat >"$WORK/nginx/nginx.conf" <<EOF
load_module $NGINX_STREAM_MODULE;
worker_processes $NGINX_WORKERS;
pid $WORK/nginx/nginx.pid;
error_log $RUN_DIR/nginx-error.log warn;
events { worker_connections 16384; }
stream {
    upstream backends {
        server 127.0.0.1:$B1;
        server 127.0.0.1:$B2;
    }
    server {
        listen 127.0.0.1:$NGINX_PORT reuseport backlog=4096;
        proxy_pass backends;
        proxy_connect_timeout 5s;
        proxy_timeout 10m;
        # Pass a client's EOF on instead of closing both sides (nginx
        # 1.21.4+); the bulk test's sink answers after the EOF.
        proxy_half_close on;
    }
}
EOF
	cp "$WORK/nginx/nginx.conf" "$RUN_DIR/nginx-stream.conf"
	if ! nginx -t -q -p "$WORK/nginx" -e "$RUN_DIR/nginx-error.log" -c "$WORK/nginx/nginx.conf" >"$RUN_DIR/nginx-configtest.log" 2>&1; then
		NOT_MEASURED[nginx]="config test failed: $(tr '\n' ' ' <"$RUN_DIR/nginx-configtest.log")"
	else
		start nginx "$RUN_DIR/nginx.log" nginx -p "$WORK/nginx" -e "$RUN_DIR/nginx-error.log" -c "$WORK/nginx/nginx.conf" -g 'daemon off;'
		SID[nginx]=$START_PID
		if wait_port nginx "$START_PID" "$NGINX_PORT"; then smoke nginx || true; else NOT_MEASURED[nginx]="did not start; see $RUN_DIR/nginx-error.log"; fi
	fi
fi

# --- HAProxy mode tcp
if want haproxy; then
	check_ports_free "$HAPROXY_PORT"
	splice_line=""
	((HAPROXY_SPLICE)) && splice_line="    option splice-auto"
	cat >"$WORK/haproxy.cfg" <<EOF
global
    nbthread $HAPROXY_THREADS
    maxconn 4096

defaults
    mode tcp
    timeout connect 5s
    timeout client 60s
    timeout server 60s
$splice_line

frontend bench
    bind 127.0.0.1:$HAPROXY_PORT
    default_backend backends

backend backends
    balance roundrobin
    server b1 127.0.0.1:$B1
    server b2 127.0.0.1:$B2
EOF
	cp "$WORK/haproxy.cfg" "$RUN_DIR/haproxy.cfg"
	if ! haproxy -c -q -f "$WORK/haproxy.cfg" >"$RUN_DIR/haproxy-configtest.log" 2>&1; then
		NOT_MEASURED[haproxy]="config check failed: $(tr '\n' ' ' <"$RUN_DIR/haproxy-configtest.log")"
	else
		start haproxy "$RUN_DIR/haproxy.log" haproxy -db -f "$WORK/haproxy.cfg"
		SID[haproxy]=$START_PID
		if wait_port haproxy "$START_PID" "$HAPROXY_PORT"; then smoke haproxy || true; else NOT_MEASURED[haproxy]="did not start: $(tail -n2 "$RUN_DIR/haproxy.log" | tr '\n' ' ')"; fi
	fi
fi

if want direct; then smoke direct || true; fi

ACTIVE=()
for t in $TARGETS; do [[ -z ${NOT_MEASURED[$t]:-} ]] && ACTIVE+=("$t"); done
((${#ACTIVE[@]} > 0)) || die "nothing to measure: $(for t in "${!NOT_MEASURED[@]}"; do printf '%s: %s; ' "$t" "${NOT_MEASURED[$t]}"; done)"

{
	echo "- date: $(date -Is)"
	echo "- nproc: $(nproc); CPU: $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
	echo "- kernel: $(uname -srm)"
	echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "- nginx: $(nginx -v 2>&1 | sed 's/^nginx version: //') stream, worker_processes $NGINX_WORKERS, proxy_half_close on"
	echo "- haproxy: $(haproxy -v 2>&1 | head -n1 | awk '{print $3}'), nbthread $HAPROXY_THREADS$( ((HAPROXY_SPLICE)) && echo ', option splice-auto')"
	echo "- go: $(go version | awk '{print $3}'); switchboard: $( ((HARNESS)) && echo 'bench/tcpproxy harness (proxy/tcpproxy, round_robin)' || echo "$SB_BIN serve (one tcp listener, round_robin, engine: $ENGINE; switchboard-loop/-goroutine: engine eventloop/goroutine)") at $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$REPO_ROOT" diff --quiet HEAD -- proxy/tcpproxy bench 2>/dev/null || echo ' (uncommitted changes)')"
	echo "- bulk: $BULK_BYTES bytes on one connection into a sink; connrate: $CONNS clients x $DURATION from $SOURCES source address(es), connect + 8-byte echo + close"
	echo "- backends: one tcpload process (Go), 127.0.0.1:$B1 and :$B2; $ROUNDS round(s), order rotating"
} >"$RUN_DIR/machine.md"

# ---------------------------------------------------------------- measure
n=${#ACTIVE[@]}
for t in "${ACTIVE[@]}"; do
	log "warm-up $t"
	run_bulk "$t" $((BULK_BYTES / 8)) "$RUN_DIR/warmup-bulk-$t.txt" || log "warm-up bulk of $t failed"
	run_connrate "$t" 2s "$RUN_DIR/warmup-connrate-$t.txt" || log "warm-up connrate of $t failed"
done
echo "round,target,kind,value,p50_ms,p99_ms,errors,cpu_us_per_conn,machine_core_s_per_gib,proxy_core_s_per_gib" >"$RUN_DIR/results.csv"
declare -A FAILED=()
for ((r = 0; r < ROUNDS; r++)); do
	for ((j = 0; j < n; j++)); do
		t=${ACTIVE[$(((j + r) % n))]}
		f="$RUN_DIR/round$((r + 1))-$t-bulk.txt"
		ticks0="" busy0=$(machine_busy)
		[[ -n ${SID[$t]:-} ]] && ticks0=$(cpu_ticks "${SID[$t]}")
		if run_bulk "$t" "$BULK_BYTES" "$f" && [[ -n $(kv mib_per_s "$f") ]]; then
			# CPU per GiB moved: the whole machine's (client, proxy, sink
			# and the kernel's network work) and the proxy's own.
			gib=$(awk -v b="$BULK_BYTES" 'BEGIN {print b / 1073741824}')
			mcpu=$(awk -v t=$(($(machine_busy) - busy0)) -v hz="$CLK_TCK" -v g="$gib" 'BEGIN {printf "%.3f", t / hz / g}')
			pcpu=""
			[[ -n $ticks0 ]] && pcpu=$(awk -v t=$(($(cpu_ticks "${SID[$t]}") - ticks0)) -v hz="$CLK_TCK" -v g="$gib" 'BEGIN {printf "%.3f", t / hz / g}')
			echo "$((r + 1)),$t,bulk,$(kv mib_per_s "$f"),,,,,$mcpu,$pcpu" >>"$RUN_DIR/results.csv"
			log "round $((r + 1)) $t bulk: $(kv mib_per_s "$f") MiB/s, CPU core-s/GiB: machine $mcpu, proxy ${pcpu:-n/a}"
		else
			FAILED[$t]="${FAILED[$t]:-}bulk round $((r + 1)): $(tr '\n' ' ' <"$f"); "
			log "round $((r + 1)) $t bulk FAILED: $(tr '\n' ' ' <"$f")"
		fi
		f="$RUN_DIR/round$((r + 1))-$t-connrate.txt"
		ticks0=""
		[[ -n ${SID[$t]:-} ]] && ticks0=$(cpu_ticks "${SID[$t]}")
		if run_connrate "$t" "$DURATION" "$f" && [[ -n $(kv rate "$f") ]]; then
			cpu=""
			if [[ -n $ticks0 ]]; then # the proxy's CPU time per connection, in µs
				cpu=$(awk -v t=$(($(cpu_ticks "${SID[$t]}") - ticks0)) -v hz="$CLK_TCK" -v c="$(kv conns "$f")" \
					'BEGIN {if (c > 0) printf "%.1f", t / hz * 1e6 / c}')
			fi
			echo "$((r + 1)),$t,connrate,$(kv rate "$f"),$(kv p50_ms "$f"),$(kv p99_ms "$f"),$(kv errors "$f"),$cpu,," >>"$RUN_DIR/results.csv"
			log "round $((r + 1)) $t connrate: $(kv rate "$f") conn/s, p99 $(kv p99_ms "$f") ms, errors $(kv errors "$f"), proxy CPU ${cpu:-n/a} µs/conn"
		else
			FAILED[$t]="${FAILED[$t]:-}connrate round $((r + 1)): $(tr '\n' ' ' <"$f"); "
			log "round $((r + 1)) $t connrate FAILED"
		fi
	done
done

# ---------------------------------------------------------------- profile
if ((PROFILE)) && [[ -n $SB_PID && -z ${NOT_MEASURED[switchboard]:-} ]]; then
	log "PROFILE=1: 10s CPU profile of switchboard under connrate"
	run_connrate switchboard 13s "$RUN_DIR/profile-connrate.txt" &
	load_pid=$!
	sleep 1
	if curl -sS --max-time 30 -o "$RUN_DIR/cpu.pprof" "http://127.0.0.1:$SB_PPROF/debug/pprof/profile?seconds=10"; then
		go tool pprof -top -nodecount=40 "$( ((HARNESS)) && echo "$HARNESS_BIN" || echo "$SB_BIN")" "$RUN_DIR/cpu.pprof" >"$RUN_DIR/profile.txt" 2>&1 || true
		log "profile: $RUN_DIR/cpu.pprof, top 40 in $RUN_DIR/profile.txt"
	fi
	wait "$load_pid" || true
fi

# ---------------------------------------------------------------- splice
SPLICE_NOTE=""
if ((SPLICE_CHECK)) && [[ -n $HARNESS_BIN ]]; then
	check_ports_free "$STRACE_PORT"
	bytes=$((BULK_BYTES / 4))
	start strace-harness "$RUN_DIR/strace-harness.log" strace -f -qq -e trace=splice -o "$RUN_DIR/strace.txt" \
		"$HARNESS_BIN" -listen "127.0.0.1:$STRACE_PORT" -targets "127.0.0.1:$B1"
	st_pid=$START_PID
	if wait_port strace-harness "$st_pid" "$STRACE_PORT" &&
		timeout 120 "$LOAD" bulk -addr "127.0.0.1:$STRACE_PORT" -bytes "$bytes" >"$RUN_DIR/strace-bulk.txt" 2>&1; then
		stop "$st_pid"
		# "splice(12, NULL, 15, NULL, 1048576, SPLICE_F_NONBLOCK) = 65536"
		read -r calls moved < <(awk '/splice\(/ && $NF ~ /^[0-9]+$/ && $NF > 0 {c++; s += $NF} END {printf "%d %d\n", c, s}' "$RUN_DIR/strace.txt")
		SPLICE_NOTE="splice check: $bytes bytes through the harness under strace; $calls splice(2) calls moved $moved bytes ($(awk -v m="$moved" -v b="$bytes" 'BEGIN {printf "%.2f", m / b}')x the payload: each byte is spliced socket->pipe and pipe->socket, so 2.00x means all of it went by splice)"
	else
		stop "$st_pid"
		SPLICE_NOTE="splice check failed; see $RUN_DIR/strace-harness.log and strace-bulk.txt"
	fi
	log "$SPLICE_NOTE"
fi

# ---------------------------------------------------------------- report
col() { awk -F, -v t="$1" -v k="$2" -v c="$3" 'NR > 1 && $2 == t && $3 == k {print $c}' "$RUN_DIR/results.csv"; }
# paired T KIND REF: the median over rounds of T's value / REF's value in
# the same round. Rounds measure every target back to back, so a round's
# ratio cancels most of the machine's drift between rounds.
paired() {
	awk -F, -v t="$1" -v k="$2" -v ref="$3" 'NR > 1 && $3 == k && $4 != "" {v[$1, $2] = $4; r[$1] = 1}
		END {for (i in r) if (v[i, t] != "" && v[i, ref] > 0) print v[i, t] / v[i, ref]}' "$RUN_DIR/results.csv" |
		median | awk NF | awk '{printf "%.2fx", $1}'
}
direct_bulk=$(col direct bulk 4 | median)
nginx_rate=$(col nginx connrate 4 | median)
status=0
{
	echo "### TCP proxy (L4) — $(date +%Y-%m-%d), $ROUNDS round(s)"
	echo
	echo "| target | bulk MiB/s (median) | vs direct | bulk core·s/GiB machine / proxy | bulk bound at $(nproc) busy cores, vs direct | conn/s (median) | vs nginx | p50 ms | p99 ms | errors | proxy CPU µs/conn | bulk per round | conn/s per round |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
	for t in $TARGETS; do
		if [[ -n ${NOT_MEASURED[$t]:-} ]]; then
			echo "| $t | — | — | — | — | — | — | — | — | — | — | not measured (see below) | |"
			status=3
			continue
		fi
		bulk=$(col "$t" bulk 4 | median)
		rate=$(col "$t" connrate 4 | median)
		p50=$(col "$t" connrate 5 | median)
		p99=$(col "$t" connrate 6 | median)
		errs=$(col "$t" connrate 7 | awk '{s += $1} END {print s + 0}')
		vd="n/a"
		[[ -n $bulk && -n $direct_bulk ]] && vd=$(awk -v a="$bulk" -v b="$direct_bulk" 'BEGIN {printf "%.2fx", a / b}')
		[[ $vd != n/a ]] && vd="$vd ($(paired "$t" bulk direct))"
		vn="n/a"
		[[ -n $rate && -n $nginx_rate ]] && vn=$(awk -v a="$rate" -v b="$nginx_rate" 'BEGIN {printf "%.2fx", a / b}')
		[[ $vn != n/a ]] && vn="$vn ($(paired "$t" connrate nginx))"
		pb=$(col "$t" bulk 4 | awk '{printf "%s%.0f", (NR > 1 ? ", " : ""), $1}')
		pr=$(col "$t" connrate 4 | awk '{printf "%s%.0f", (NR > 1 ? ", " : ""), $1}')
		cpu=$(col "$t" connrate 8 | awk NF | median)
		mcpu=$(col "$t" bulk 9 | awk NF | median)
		pcpu=$(col "$t" bulk 10 | awk NF | median)
		# The most this path could move if every core were busy at the
		# measured CPU cost per GiB, as a ratio of direct's measured bulk.
		bound="n/a"
		[[ -n $mcpu && -n $direct_bulk ]] && bound=$(awk -v n="$(nproc)" -v c="$mcpu" -v d="$direct_bulk" 'BEGIN {if (c > 0) printf "%.2fx", n / c * 1024 / d; else print "n/a"}')
		printf '| %s | %.0f | %s | %s / %s | %s | %.0f | %s | %.2f | %.2f | %s | %s | %s | %s |\n' "$t" "${bulk:-0}" "$vd" "${mcpu:-—}" "${pcpu:-—}" "$bound" "${rate:-0}" "$vn" "${p50:-0}" "${p99:-0}" "$errs" "${cpu:-—}" "$pb" "$pr"
		((errs == 0)) || status=3
	done
	echo
	echo "Medians over rounds. bulk: one connection, $BULK_BYTES bytes into a sink, MiB/s from connect to the sink's"
	echo "answer; vs direct = bulk / direct bulk. conn/s: $CONNS clients each looping connect, 8-byte echo, close"
	echo "for $DURATION; p50/p99 of one such cycle; errors summed over rounds; vs nginx = conn/s / nginx stream conn/s."
	echo "In brackets after a ratio of medians: the median of the same ratio taken within each round (paired)."
	echo "proxy CPU µs/conn: user+system CPU time of the proxy's processes during the conn/s run, per connection"
	echo "(steadier than conn/s on a shared machine). \"direct\" is the backend with no proxy."
	echo "bulk core·s/GiB: CPU time per GiB moved during the bulk run — machine: every core's busy time from"
	echo "/proc/stat (client, proxy, sink, the kernel's network work); proxy: the proxy's processes alone."
	echo "bulk bound: $(nproc) cores / machine core·s per GiB, as a ratio of direct's bulk — what the path could"
	echo "reach if the machine were fully busy at the measured cost per byte (above 1.00x for direct means"
	echo "direct itself is not CPU-bound)."
	[[ -n $SPLICE_NOTE ]] && { echo; echo "$SPLICE_NOTE"; }
	if ((${#NOT_MEASURED[@]} > 0 || ${#FAILED[@]} > 0)); then
		echo
		for t in "${!NOT_MEASURED[@]}"; do echo "- **$t not measured**: ${NOT_MEASURED[$t]}"; done
		for t in "${!FAILED[@]}"; do echo "- **$t failed runs**: ${FAILED[$t]}"; done
		status=3
	fi
	machine_footer
} >"$RUN_DIR/results.md"
cat "$RUN_DIR/results.md"
exit "$status"
