#!/usr/bin/env bash
# bench/run-http.sh — L7 (HTTP/1.1) load benchmark: switchboard vs nginx vs
# HAProxy vs no proxy at all, on loopback, on this machine.
#
# Usage (from anywhere; as root on a fresh Debian machine, or as any user
# when wrk, nginx, haproxy and curl are already installed):
#
#   bench/run-http.sh
#   ROUNDS=1 DURATION=3s bench/run-http.sh                  # quick smoke run
#   SWITCHBOARD_BIN=/path/to/switchboard bench/run-http.sh  # skip the build
#   TARGETS="nginx haproxy direct" bench/run-http.sh        # subset
#   PROFILE=1 bench/run-http.sh                             # + CPU profile
#   PROFILE=1 PROFILE_TARGET=switchboard-loop TARGETS=switchboard-loop ...  # of the event loop
#   ROUTE=toolbox bench/run-http.sh                         # rewrites + 95/5 split
#   TARGETS="switchboard switchboard-dash nginx" bench/run-http.sh  # dashboard open
#   TARGETS="switchboard switchboard-loop nginx haproxy" bench/run-http.sh  # both engines
#
# Environment (all optional):
#   ROUNDS=3          measurement rounds; each round measures every target
#                     once, in an order that rotates by one each round
#   DURATION=10s      wrk -d for each measured run
#   CONNS=64          wrk -c
#   THREADS=2         wrk -t
#   WARMUP=2s         wrk -d of the one warm-up run per target
#   TARGETS="switchboard nginx haproxy direct"   what to measure; also
#                     switchboard-dash: switchboard while a dashboard polls
#                     /api/v1/dashboard once a second, as an open /ui/ does;
#                     switchboard-loop, switchboard-goroutine: the same
#                     routes on another listener of the same process, with
#                     engine: eventloop, engine: goroutine;
#                     with ROUTE=toolbox, switchboard-plain and nginx-plain:
#                     the same servers' plain route, for the ratio
#   ROUTE=plain       plain: one route to both backends. toolbox: the route
#                     measured is /api/ with strip_prefix, request headers
#                     set (one from {client_ip}) and removed, a response
#                     header set from {endpoint}, and a 95/5 split between
#                     two upstreams; nginx does the same (rewrite ... break,
#                     proxy_set_header, add_header, split_clients); the
#                     plain route stays at /plain (default TARGETS then:
#                     "switchboard switchboard-plain nginx nginx-plain")
#   NGINX_WORKERS=1   worker_processes of nginx-as-proxy (1 measured fastest
#                     on 2 cores; see bench/README.md)
#   HAPROXY_THREADS=2 nbthread of HAProxy
#   SWITCHBOARD_BIN   prebuilt switchboard binary; default: build it with
#                     `go build -o bench/out/switchboard ./cmd/switchboard`
#   PROFILE=0         1: after the rounds, one extra wrk run against
#                     switchboard while a CPU profile is taken from
#                     http://127.0.0.1:19901/debug/pprof/profile?seconds=10
#                     (-> bench/out/switchboard.cpu.pprof, bench/out/profile.txt)
#   PROFILE_SECONDS=10
#   SKIP_INSTALL=0    1: never call apt-get; fail if a tool is missing
#   ENGINE=auto       switchboard's listener engine: auto (switchboard's
#                     default: the event loop on Linux), eventloop or
#                     goroutine
#   RESPONSE_BYTES=0  0: the backends answer `return 200 "ok\n"`. N (at
#                     least 3, e.g. 16384): they answer every GET with a
#                     static file of exactly N bytes ("ok\n", then "x"s),
#                     text/plain, from the backend nginx (sendfile on)
#   UPLOAD_BYTES=0    0: wrk sends GETs. N (e.g. 1048576): wrk sends POSTs
#                     with an N-byte body (bench/upload.lua, the body made
#                     once per wrk thread); each backend reads the whole
#                     body, then answers 200 "ok\n". nginx's
#                     client_max_body_size is set to N (backends and proxy),
#                     and nginx-as-proxy streams the body upstream
#                     (proxy_request_buffering off, as the others do);
#                     switchboard's max_body_bytes and HAProxy have no cap
#                     by default. Smoke tests stay GETs (so with both set,
#                     RESPONSE_BYTES shapes only the smoke tests' answers)
#   ACCESS_LOG=0      1: every proxy logs every request, unbuffered, to a
#                     file in the run dir: nginx `access_log` (combined,
#                     a write per line) -> nginx-access.log; HAProxy
#                     `option httplog`, `log stdout format raw` -> haproxy.log;
#                     switchboard `access_log: true` on its listeners with
#                     `log: {level: info}` -> switchboard.log (stderr). The
#                     backends never log. The report's footer gives each
#                     log's lines and size
#                     (with ACCESS_LOG=1 or bodies over 64 KiB, the
#                     eventloop listener hands its connections to the
#                     goroutine engine: see docs/architecture.md)
#
# What it does: installs wrk, nginx, haproxy (and curl) with apt-get if any is
# missing; builds switchboard; starts one nginx instance as the two backends
# (127.0.0.1:19001 and :19002, `return 200 "ok\n"` or RESPONSE_BYTES), then
# the proxies, each round-robin over both backends with upstream keep-alive
# (an idle pool of max(64, CONNS) connections in nginx and switchboard;
# worker_connections 4096, or 8 x CONNS in the backends and 4 x CONNS in
# nginx-as-proxy when more):
#   switchboard 127.0.0.1:18080 (admin 127.0.0.1:19901; engine: eventloop
#               listener of switchboard-loop 127.0.0.1:18083)
#   nginx       127.0.0.1:18081
#   haproxy     127.0.0.1:18082
#   direct      127.0.0.1:19001 (the backend, no proxy)
# Every server is a child process of this script with its config in a temp
# dir; no system service is touched. All of them are stopped on exit, on
# failure and on Ctrl-C.
#
# Output: a markdown table on stdout (median req/s, p50, p99 over rounds,
# error count, ratio to nginx) plus a machine description. Raw wrk outputs,
# configs, logs and the table go to bench/out/http-<timestamp>/ (symlinked
# as bench/out/http-latest).
#
# Exit status: 0 all requested targets measured without errors; 1 setup
# failure (nothing measured); 3 some target could not be measured or had
# errors (the table is still printed and says which and why).

set -euo pipefail

# ---------------------------------------------------------------- settings
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
THREADS=${THREADS:-2}
WARMUP=${WARMUP:-2s}
ROUTE=${ROUTE:-plain}
case $ROUTE in
plain) TARGETS=${TARGETS:-switchboard nginx haproxy direct} ;;
toolbox) TARGETS=${TARGETS:-switchboard switchboard-plain nginx nginx-plain} ;;
*) echo "ROUTE must be plain or toolbox, got '$ROUTE'" >&2; exit 1 ;;
esac
NGINX_WORKERS=${NGINX_WORKERS:-1}
HAPROXY_THREADS=${HAPROXY_THREADS:-2}
PROFILE=${PROFILE:-0}
PROFILE_SECONDS=${PROFILE_SECONDS:-10}
PROFILE_TARGET=${PROFILE_TARGET:-switchboard}
SKIP_INSTALL=${SKIP_INSTALL:-0}
SWITCHBOARD_BIN=${SWITCHBOARD_BIN:-}
ENGINE=${ENGINE:-auto}
RESPONSE_BYTES=${RESPONSE_BYTES:-0}
UPLOAD_BYTES=${UPLOAD_BYTES:-0}
ACCESS_LOG=${ACCESS_LOG:-0}
case $ENGINE in
auto | goroutine | eventloop) ;;
*) echo "ENGINE must be auto, goroutine or eventloop, got '$ENGINE'" >&2; exit 1 ;;
esac

BACKEND1_PORT=19001
BACKEND2_PORT=19002
SB_PORT=18080
SB_LOOP_PORT=18083
SB_GOROUTINE_PORT=18084
SB_ADMIN_PORT=19901
NGINX_PORT=18081
HAPROXY_PORT=18082

export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin:/usr/local/go/bin"
export LC_ALL=C   # "." as the decimal point in wrk output, awk and printf

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
OUT_DIR="$REPO_ROOT/bench/out"

BENCH_TAG=bench
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for v in ROUNDS CONNS THREADS PROFILE_SECONDS NGINX_WORKERS HAPROXY_THREADS; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
for v in RESPONSE_BYTES UPLOAD_BYTES; do
	[[ ${!v} =~ ^(0|[1-9][0-9]{0,9})$ ]] || die "$v must be 0 or a positive integer (bytes, below 10^10), got '${!v}'"
done
((RESPONSE_BYTES == 0 || RESPONSE_BYTES >= 3)) ||
	die "RESPONSE_BYTES must be 0 (\"ok\\n\") or at least 3 (the body starts with \"ok\\n\"), got '$RESPONSE_BYTES'"
[[ $ACCESS_LOG == 0 || $ACCESS_LOG == 1 ]] || die "ACCESS_LOG must be 0 or 1, got '$ACCESS_LOG'"
# The idle keep-alive pool to the backends, per nginx worker and per
# switchboard endpoint: 64, or CONNS when more, so that no proxy closes and
# reopens upstream connections under CONNS concurrent requests (HAProxy's
# pool has no cap).
UPSTREAM_IDLE=$((CONNS > 64 ? CONNS : 64))
# worker_connections of the backends: every proxy stays up for the whole
# run, each holding its idle pool to them (switchboard up to CONNS per
# backend, nginx CONNS, HAProxy as many as it opened), and direct adds
# CONNS: 8 x CONNS leaves room, so that the backends never close idle
# connections ("worker_connections are not enough, reusing connections")
# under whichever target runs. nginx-as-proxy: a client and an upstream
# connection per request, plus its idle pool.
BACKEND_WORKER_CONNS=$((8 * CONNS > 4096 ? 8 * CONNS : 4096))
PROXY_WORKER_CONNS=$((4 * CONNS > 4096 ? 4 * CONNS : 4096))
for v in DURATION WARMUP; do
	[[ ${!v} =~ ^[1-9][0-9]*[smh]?$ ]] || die "$v must look like 10s, 2m or 10, got '${!v}'"
done
for t in $TARGETS; do
	case $t in switchboard | switchboard-dash | switchboard-loop | switchboard-goroutine | nginx | haproxy | direct) ;;
	switchboard-plain | nginx-plain) [[ $ROUTE == toolbox ]] || die "target $t needs ROUTE=toolbox" ;;
	*) die "unknown target '$t' in TARGETS (known: switchboard switchboard-dash switchboard-loop switchboard-goroutine switchboard-plain nginx nginx-plain haproxy direct)" ;;
	esac
done

# ---------------------------------------------------------------- cleanup
install_cleanup # lib.sh: stops what the script started, on any exit

# ---------------------------------------------------------------- install
need_tools=(wrk nginx haproxy curl)

missing_tools() {
	local t
	for t in "${need_tools[@]}"; do
		command -v "$t" >/dev/null 2>&1 || printf '%s ' "$t"
	done
}

install_tools() {
	local missing
	missing=$(missing_tools)
	if [[ -z $missing ]]; then return 0; fi
	log "missing: $missing"
	if ((SKIP_INSTALL)); then
		die "SKIP_INSTALL=1 and these tools are missing: $missing"
	fi
	if [[ $(id -u) -ne 0 ]]; then
		die "these tools are missing: $missing— run as root (the script installs them with apt-get) or install them yourself"
	fi
	command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install $missing by hand (this script knows Debian only)"
	log "apt-get update"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$OUT_DIR/apt-update.log" 2>&1 ||
		die "apt-get update failed; see $OUT_DIR/apt-update.log"

	local pkgs=() t cand
	for t in $missing; do
		case $t in
		nginx)
			# Debian 12 has both nginx (the core server) and nginx-light (nginx
			# plus the echo module); later releases only nginx. The core is all
			# we need.
			local p found=""
			for p in nginx nginx-light; do
				cand=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
				if [[ -n $cand && $cand != "(none)" ]]; then found=$p; break; fi
			done
			[[ -n $found ]] || die "neither nginx nor nginx-light is installable from the configured apt sources"
			pkgs+=("$found")
			;;
		*) pkgs+=("$t") ;;
		esac
	done

	# Keep the packages' maintainer scripts from starting system-wide nginx
	# or haproxy services (port 80 etc.): policy-rc.d exit 101 = "don't".
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		POLICY_RC_CREATED=1
	fi
	log "apt-get install -y ${pkgs[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" \
		>"$OUT_DIR/apt-install.log" 2>&1 ||
		die "apt-get install ${pkgs[*]} failed; see $OUT_DIR/apt-install.log"
	if ((POLICY_RC_CREATED)); then
		rm -f /usr/sbin/policy-rc.d
		POLICY_RC_CREATED=0
	fi
	missing=$(missing_tools)
	[[ -z $missing ]] || die "still missing after apt-get install: $missing"
}

# ---------------------------------------------------------------- helpers
# smoke NAME URL: one GET must return 200 with a body whose first line is
# "ok", of the size the backends send (3 or RESPONSE_BYTES); a few more
# should reach both backends (each backend answers with its own X-Backend
# header).
smoke() {
	local name=$1 url=$2 body seen="" i b want_size=3
	((RESPONSE_BYTES == 0)) || want_size=$RESPONSE_BYTES
	body=$(curl -sS --max-time 5 -o - -w '\n%{http_code} %{size_download}' "$url" 2>&1) || {
		log "$name: GET $url failed: $(head -c 300 <<<"$body")"
		return 1
	}
	if [[ $(tail -n1 <<<"$body") != "200 $want_size" || $(head -n1 <<<"$body") != ok ]]; then
		log "$name: GET $url: expected 200 and $want_size bytes starting \"ok\", got (status, size): $(tail -n1 <<<"$body"), body: $(head -c 100 <<<"$body" | tr '\n' ' ')"
		return 1
	fi
	for ((i = 0; i < 8; i++)); do
		b=$(curl -sS --max-time 5 -o /dev/null -D - "$url" 2>/dev/null |
			tr -d '\r' | awk -F': ' 'tolower($1)=="x-backend" {print $2}') || true
		if [[ -n $b && $seen != *"$b"* ]]; then seen="$seen $b"; fi
	done
	log "$name: smoke test ok; backends seen:${seen:- none}"
	if [[ $name != direct && $name != backend* && $(wc -w <<<"$seen") -lt 2 ]]; then
		log "$name: WARNING: 8 requests did not reach both backends — is it balancing?"
	fi
	return 0
}

# to_ms VALUE-WITH-UNIT (wrk: 812.00us, 1.20ms, 1.05s, 1.00m) -> milliseconds
to_ms() {
	awk -v v="$1" 'BEGIN {
		n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
		if (u == "us") n /= 1000; else if (u == "s") n *= 1000
		else if (u == "m") n *= 60000; else if (u == "h") n *= 3600000
		printf "%.3f", n }'
}

# parse_wrk FILE -> "rps p50ms p99ms non2xx sockerr" or fails
parse_wrk() {
	local f=$1 rps p50 p99 non2xx sockerr
	rps=$(awk '/^Requests\/sec:/ {print $2}' "$f")
	p50=$(awk '$1 == "50%" {print $2}' "$f")
	p99=$(awk '$1 == "99%" {print $2}' "$f")
	[[ -n $rps && -n $p50 && -n $p99 ]] || return 1
	non2xx=$(awk -F: '/Non-2xx or 3xx responses/ {gsub(/ /, "", $2); print $2}' "$f")
	# "Socket errors: connect 0, read 0, write 0, timeout 0"
	sockerr=$(awk '/Socket errors:/ {gsub(/,/, ""); print $4 + $6 + $8 + $10}' "$f")
	echo "$rps $(to_ms "$p50") $(to_ms "$p99") ${non2xx:-0} ${sockerr:-0}"
}

# measured_path: the path of the route measured (ROUTE).
measured_path() { if [[ $ROUTE == toolbox ]]; then echo /api/bench; else echo /; fi; }

target_url() {
	case $1 in
	switchboard | switchboard-dash) echo "http://127.0.0.1:$SB_PORT$(measured_path)" ;;
	switchboard-loop) echo "http://127.0.0.1:$SB_LOOP_PORT$(measured_path)" ;;
	switchboard-goroutine) echo "http://127.0.0.1:$SB_GOROUTINE_PORT$(measured_path)" ;;
	switchboard-plain) echo "http://127.0.0.1:$SB_PORT/plain" ;;
	nginx) echo "http://127.0.0.1:$NGINX_PORT$(measured_path)" ;;
	nginx-plain) echo "http://127.0.0.1:$NGINX_PORT/plain" ;;
	haproxy) echo "http://127.0.0.1:$HAPROXY_PORT/" ;;
	direct) echo "http://127.0.0.1:$BACKEND1_PORT/" ;;
	esac
}

# wrk_args TARGET DURATION: wrk's arguments for one run (one per line):
# GETs, or with UPLOAD_BYTES POSTs of that many bytes (bench/upload.lua).
wrk_args() {
	printf '%s\n' "-t$THREADS" "-c$CONNS" "-d$2" --latency
	((UPLOAD_BYTES == 0)) || printf '%s\n' -s "$SCRIPT_DIR/upload.lua"
	target_url "$1"
	((UPLOAD_BYTES == 0)) || printf '%s\n' -- "$UPLOAD_BYTES"
}

# run_wrk TARGET DURATION OUTFILE: one bounded wrk run; fails if wrk fails.
run_wrk() {
	local target=$1 dur=$2 outfile=$3 limit args
	limit=$(($(dur_seconds "$dur") + 30))
	mapfile -t args < <(wrk_args "$target" "$dur")
	{
		echo "# target=$target url=$(target_url "$target") $(date -Is)"
		echo "# wrk ${args[*]}"
	} >"$outfile"
	local poller=""
	if [[ $target == switchboard-dash ]]; then
		# One open dashboard: a poll of its one endpoint every second.
		(while :; do
			curl -s --max-time 2 -o /dev/null "http://127.0.0.1:$SB_ADMIN_PORT/api/v1/dashboard" || true
			sleep 1
		done) &
		poller=$!
	fi
	local rc=0
	timeout --kill-after=5 "$limit" \
		wrk "${args[@]}" >>"$outfile" 2>&1 || rc=$?
	if [[ -n $poller ]]; then kill "$poller" 2>/dev/null || true; wait "$poller" 2>/dev/null || true; fi
	return $rc
}

declare -A NOT_MEASURED=()   # target -> reason
declare -A TARGET_SID=()     # proxy (switchboard, nginx, haproxy) -> the session its processes run in

# cpu_ticks TARGET: CPU time (user + system, in clock ticks) used so far by
# the processes of the proxy TARGET runs on (start puts each in a session
# of its own: nginx's worker is counted with its master); empty when unknown.
cpu_ticks() {
	local sid=${TARGET_SID[${1%%-*}]:-} p total=0
	[[ -n $sid ]] || return 0
	for p in $(ps -o pid= -s "$sid" 2>/dev/null); do
		# Fields 14 and 15 of /proc/PID/stat, counted after the ")" that
		# ends the command name (which may hold spaces).
		total=$((total + $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{print $12 + $13}' || echo 0)))
	done
	echo "$total"
}
CLK_TCK=$(getconf CLK_TCK)

# ---------------------------------------------------------------- setup
mkdir -p "$OUT_DIR"
install_tools

STAMP=$(date +%Y%m%d-%H%M%S)
RUN_DIR="$OUT_DIR/http-$STAMP"
[[ -e $RUN_DIR ]] && { STAMP="$STAMP-$$"; RUN_DIR="$OUT_DIR/http-$STAMP"; }
mkdir -p "$RUN_DIR"
ln -sfn "http-$STAMP" "$OUT_DIR/http-latest"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-bench.XXXXXX")
chmod 755 "$WORK"   # nginx workers run as an unprivileged user when we are root
log "raw outputs: $RUN_DIR"

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

check_ports_free "$BACKEND1_PORT" "$BACKEND2_PORT"

# --- switchboard binary (build failures are reported, not fatal)
SB_BIN=""
if want switchboard || want switchboard-dash || want switchboard-plain || want switchboard-loop || want switchboard-goroutine; then
	if [[ -n $SWITCHBOARD_BIN ]]; then
		if [[ -x $SWITCHBOARD_BIN ]]; then
			SB_BIN=$SWITCHBOARD_BIN
		else
			NOT_MEASURED[switchboard]="SWITCHBOARD_BIN=$SWITCHBOARD_BIN is not an executable file"
		fi
	elif ! command -v go >/dev/null 2>&1; then
		NOT_MEASURED[switchboard]="go not found in PATH: cannot build ./cmd/switchboard (install Go or set SWITCHBOARD_BIN)"
	else
		log "go build -o bench/out/switchboard ./cmd/switchboard"
		if (cd "$REPO_ROOT" && go build -o "$OUT_DIR/switchboard" ./cmd/switchboard) >"$RUN_DIR/switchboard-build.log" 2>&1; then
			SB_BIN="$OUT_DIR/switchboard"
		else
			NOT_MEASURED[switchboard]="build failed: $(head -n3 "$RUN_DIR/switchboard-build.log" | tr '\n' ' ')(full log: $RUN_DIR/switchboard-build.log)"
		fi
	fi
	if [[ -n ${NOT_MEASURED[switchboard]:-} ]]; then
		log "switchboard will NOT be measured: ${NOT_MEASURED[switchboard]}"
	fi
fi

# --- backends: one nginx, one worker, two server blocks
mkdir -p "$WORK/backend/logs" "$WORK/backend/www"
# What a backend does with a request: GET -> `return 200 "ok\n"`, or with
# RESPONSE_BYTES the file body.txt: "ok\n" and "x"s, exactly that long.
backend_get='location / { return 200 "ok\n"; }'
if ((RESPONSE_BYTES > 0)); then
	{ printf 'ok\n'; head -c "$((RESPONSE_BYTES - 3))" /dev/zero | tr '\0' x; } >"$WORK/backend/www/body.txt"
	[[ $(stat -c %s "$WORK/backend/www/body.txt") == "$RESPONSE_BYTES" ]] ||
		die "could not write the $RESPONSE_BYTES-byte response body $WORK/backend/www/body.txt"
	backend_get="location / { root $WORK/backend/www; try_files /body.txt =404; }"
fi
# With UPLOAD_BYTES, a POST (whatever its path) is rewritten to /_upload,
# where the mirror module reads the whole body (mirror_request_body is on
# by default; its subrequest to /_sink is a 204 nobody waits for), the
# static module then refuses a POST of the (empty) file _upload with 405,
# and error_page turns that into 200 "ok\n". nginx has no plainer way to read
# a body before answering: `return` answers at once and discards the body
# afterwards, and a client still sending meets a response to a request it
# has not finished — not what an upload endpoint does.
backend_post=""
if ((UPLOAD_BYTES > 0)); then
	: >"$WORK/backend/www/_upload"
	backend_post="client_max_body_size $UPLOAD_BYTES;
        client_body_buffer_size $UPLOAD_BYTES;
        if (\$request_method = POST) { rewrite ^ /_upload last; }
        location = /_upload { root $WORK/backend/www; mirror /_sink; error_page 405 =200 @ok; }
        location = /_sink { internal; return 204; }
        location @ok { return 200 \"ok\\n\"; }"
fi
cat >"$WORK/backend/nginx.conf" <<EOF
# Backends for the L7 benchmark: two servers, one worker process in all, so
# that the backends take about one core's share at most.
worker_processes 1;
pid $WORK/backend/nginx.pid;
error_log $RUN_DIR/backend-error.log warn;
events { worker_connections $BACKEND_WORKER_CONNS; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    default_type text/plain;
$( ((RESPONSE_BYTES == 0)) || printf '    sendfile on;\n    open_file_cache max=16;\n')
    server {
        listen 127.0.0.1:$BACKEND1_PORT reuseport backlog=4096;
        add_header X-Backend b1;
        $backend_get
        $backend_post
    }
    server {
        listen 127.0.0.1:$BACKEND2_PORT reuseport backlog=4096;
        add_header X-Backend b2;
        $backend_get
        $backend_post
    }
}
EOF
cp "$WORK/backend/nginx.conf" "$RUN_DIR/backend-nginx.conf"
nginx -t -q -p "$WORK/backend" -e "$RUN_DIR/backend-error.log" -c "$WORK/backend/nginx.conf" \
	>"$RUN_DIR/backend-configtest.log" 2>&1 ||
	die "backend nginx config test failed: $(cat "$RUN_DIR/backend-configtest.log")"
start backends "$RUN_DIR/backend.log" \
	nginx -p "$WORK/backend" -e "$RUN_DIR/backend-error.log" -c "$WORK/backend/nginx.conf" -g 'daemon off;'
BACKEND_PID=$START_PID
{ wait_port backends "$BACKEND_PID" "$BACKEND1_PORT" 10 && wait_port backends "$BACKEND_PID" "$BACKEND2_PORT" 10; } ||
	die "backends did not start; see $RUN_DIR/backend.log and backend-error.log"
smoke backend-b2 "http://127.0.0.1:$BACKEND2_PORT/" || die "backend 2 does not answer"

# --- nginx as reverse proxy
if want nginx || want nginx-plain; then
	check_ports_free "$NGINX_PORT"
	mkdir -p "$WORK/nginx/logs"
	cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes $NGINX_WORKERS;
pid $WORK/nginx/nginx.pid;
error_log $RUN_DIR/nginx-error.log warn;
events { worker_connections $PROXY_WORKER_CONNS; }
http {
    $(if ((ACCESS_LOG)); then echo "access_log $RUN_DIR/nginx-access.log combined;"; else echo "access_log off;"; fi)
$(if ((UPLOAD_BYTES > 0)); then cat <<EOT
    # Request bodies are streamed to the backend as they come, as
    # switchboard and HAProxy do, not first spooled to a file.
    client_max_body_size $UPLOAD_BYTES;
    proxy_request_buffering off;
EOT
fi)
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    upstream backends {
        server 127.0.0.1:$BACKEND1_PORT;
        server 127.0.0.1:$BACKEND2_PORT;
        keepalive $UPSTREAM_IDLE;
        keepalive_requests 1000000;
        keepalive_timeout 120s;
    }
$(if [[ $ROUTE == toolbox ]]; then cat <<EOT
    upstream canary {
        server 127.0.0.1:$BACKEND2_PORT;
        keepalive $UPSTREAM_IDLE;
        keepalive_requests 1000000;
        keepalive_timeout 120s;
    }
    # 95/5 per request (request_id is random), as switchboard's weighted split.
    split_clients "\${request_id}" \$pool { 95% backends; * canary; }
EOT
fi)
    server {
        listen 127.0.0.1:$NGINX_PORT reuseport backlog=4096;
        location / {
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
$(if [[ $ROUTE == toolbox ]]; then cat <<EOT
        location /api/ {
            rewrite ^/api(/.*)\$ \$1 break;
            proxy_set_header X-Client \$remote_addr;
            proxy_set_header X-Debug "";
            add_header X-Served-By \$upstream_addr;
            proxy_pass http://\$pool;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
EOT
fi)
    }
}
EOF
	cp "$WORK/nginx/nginx.conf" "$RUN_DIR/nginx-proxy.conf"
	if ! nginx -t -q -p "$WORK/nginx" -e "$RUN_DIR/nginx-error.log" -c "$WORK/nginx/nginx.conf" \
		>"$RUN_DIR/nginx-configtest.log" 2>&1; then
		NOT_MEASURED[nginx]="config test failed: $(tr '\n' ' ' <"$RUN_DIR/nginx-configtest.log")"
	else
		start nginx "$RUN_DIR/nginx.log" \
			nginx -p "$WORK/nginx" -e "$RUN_DIR/nginx-error.log" -c "$WORK/nginx/nginx.conf" -g 'daemon off;'
		TARGET_SID[nginx]=$START_PID
		{ wait_port nginx "$START_PID" "$NGINX_PORT" 10 && smoke nginx "$(target_url nginx)" &&
			{ [[ $ROUTE != toolbox ]] || smoke nginx-plain "$(target_url nginx-plain)"; }; } ||
			NOT_MEASURED[nginx]="did not start or answer: $(tail -n2 "$RUN_DIR/nginx-error.log" 2>/dev/null | tr '\n' ' ')(logs: $RUN_DIR/nginx.log, nginx-error.log)"
	fi
fi

# --- HAProxy
if want haproxy; then
	check_ports_free "$HAPROXY_PORT"
	mkdir -p "$WORK/haproxy"
	cat >"$WORK/haproxy/haproxy.cfg" <<EOF
global
    nbthread $HAPROXY_THREADS
    maxconn 4096
$(if ((ACCESS_LOG)); then
	echo "    # -db keeps stdout, which start sends to haproxy.log: no syslog daemon."
	echo "    log stdout format raw local0"
else
	echo "    # no 'log' lines: no logging"
fi)

defaults
    mode http
$( ((ACCESS_LOG == 0)) || printf '    log global\n    option httplog\n')
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
    option http-keep-alive
    http-reuse always

frontend bench
    bind 127.0.0.1:$HAPROXY_PORT
    default_backend backends

backend backends
    balance roundrobin
    server b1 127.0.0.1:$BACKEND1_PORT
    server b2 127.0.0.1:$BACKEND2_PORT
EOF
	cp "$WORK/haproxy/haproxy.cfg" "$RUN_DIR/haproxy.cfg"
	if ! haproxy -c -q -f "$WORK/haproxy/haproxy.cfg" >"$RUN_DIR/haproxy-configtest.log" 2>&1; then
		NOT_MEASURED[haproxy]="config check failed: $(tr '\n' ' ' <"$RUN_DIR/haproxy-configtest.log")"
	else
		# -db: stay in the foreground, so the pid we hold is haproxy itself.
		start haproxy "$RUN_DIR/haproxy.log" haproxy -db -f "$WORK/haproxy/haproxy.cfg"
		TARGET_SID[haproxy]=$START_PID
		{ wait_port haproxy "$START_PID" "$HAPROXY_PORT" 10 && smoke haproxy "$(target_url haproxy)"; } ||
			NOT_MEASURED[haproxy]="did not start or answer: $(tail -n2 "$RUN_DIR/haproxy.log" | tr '\n' ' ')(log: $RUN_DIR/haproxy.log)"
	fi
fi

# --- switchboard
SB_PID=""
if { want switchboard || want switchboard-dash || want switchboard-plain || want switchboard-loop || want switchboard-goroutine; } && [[ -n $SB_BIN ]]; then
	check_ports_free "$SB_PORT" "$SB_ADMIN_PORT"
	mkdir -p "$WORK/switchboard"
	sb_routes=$(
		if [[ $ROUTE == toolbox ]]; then cat <<EOT
      - name: toolbox
        match: {path_prefix: /api/}
        split:
          - {upstream: backends, weight: 95}
          - {upstream: canary, weight: 5}
        rewrite: {strip_prefix: /api}
        request_headers: {set: {X-Client: "{client_ip}"}, remove: [X-Debug]}
        response_headers: {set: {X-Served-By: "{endpoint}"}}
EOT
		fi
		cat <<EOT
      - match: {path_prefix: /}
        upstream: backends
EOT
	)
	# max_body_bytes stays at its default, 0: no cap, whatever UPLOAD_BYTES is.
	sb_listener_opts=""
	((ACCESS_LOG == 0)) || sb_listener_opts=$'\n    access_log: true'
	sb_pool="" # the idle pool per endpoint: the default, 64, unless CONNS is larger
	((UPSTREAM_IDLE == 64)) || sb_pool=$'\n'"    max_idle_per_endpoint: $UPSTREAM_IDLE"
	sb_loop_listener=""
	if want switchboard-loop; then
		check_ports_free "$SB_LOOP_PORT"
		sb_loop_listener=$(printf '  - name: bench-loop\n    listen: 127.0.0.1:%s\n    engine: eventloop%s\n    routes:\n%s' "$SB_LOOP_PORT" "$sb_listener_opts" "$sb_routes")
	fi
	if want switchboard-goroutine; then
		check_ports_free "$SB_GOROUTINE_PORT"
		sb_loop_listener+=$'\n'$(printf '  - name: bench-goroutine\n    listen: 127.0.0.1:%s\n    engine: goroutine%s\n    routes:\n%s' "$SB_GOROUTINE_PORT" "$sb_listener_opts" "$sb_routes")
	fi
	cat >"$WORK/switchboard/switchboard.yaml" <<EOF
admin: {listen: 127.0.0.1:$SB_ADMIN_PORT}
log: {level: $(if ((ACCESS_LOG)); then echo info; else echo warn; fi)}
listeners:
  - name: bench
    listen: 127.0.0.1:$SB_PORT
    engine: $ENGINE$sb_listener_opts
    routes:
$sb_routes
$sb_loop_listener
upstreams:
  backends:
    balance: {policy: round_robin}$sb_pool
    targets:
      - {address: 127.0.0.1:$BACKEND1_PORT}
      - {address: 127.0.0.1:$BACKEND2_PORT}
  canary:$sb_pool
    targets:
      - {address: 127.0.0.1:$BACKEND2_PORT}
EOF
	cp "$WORK/switchboard/switchboard.yaml" "$RUN_DIR/switchboard.yaml"
	start switchboard "$RUN_DIR/switchboard.log" "$SB_BIN" serve --config "$WORK/switchboard/switchboard.yaml"
	SB_PID=$START_PID
	TARGET_SID[switchboard]=$START_PID
	ready=0
	for ((i = 0; i < 150; i++)); do # 15 s
		if curl -fsS --max-time 1 -o /dev/null "http://127.0.0.1:$SB_ADMIN_PORT/readyz" 2>/dev/null; then
			ready=1
			break
		fi
		kill -0 "$SB_PID" 2>/dev/null || break
		sleep 0.1
	done
	if ((!ready)); then
		if kill -0 "$SB_PID" 2>/dev/null; then
			NOT_MEASURED[switchboard]="http://127.0.0.1:$SB_ADMIN_PORT/readyz not 2xx within 15s; see $RUN_DIR/switchboard.log"
		else
			sb_rc=0
			wait "$SB_PID" || sb_rc=$?
			NOT_MEASURED[switchboard]="exited with status $sb_rc during startup; last log lines: $(tail -n3 "$RUN_DIR/switchboard.log" | tr '\n' ' ')(log: $RUN_DIR/switchboard.log)"
		fi
	elif ! { wait_port switchboard "$SB_PID" "$SB_PORT" 10 && smoke switchboard "$(target_url switchboard)" &&
		{ [[ $ROUTE != toolbox ]] || smoke switchboard-plain "$(target_url switchboard-plain)"; }; }; then
		NOT_MEASURED[switchboard]="ready, but 127.0.0.1:$SB_PORT does not answer 200 ok; see $RUN_DIR/switchboard.log"
	fi
	if want switchboard-loop && [[ -z ${NOT_MEASURED[switchboard]:-} ]] &&
		! smoke switchboard-loop "$(target_url switchboard-loop)"; then
		NOT_MEASURED[switchboard-loop]="127.0.0.1:$SB_LOOP_PORT (engine: eventloop) does not answer 200 ok; see $RUN_DIR/switchboard.log"
	fi
	if want switchboard-goroutine && [[ -z ${NOT_MEASURED[switchboard]:-} ]] &&
		! smoke switchboard-goroutine "$(target_url switchboard-goroutine)"; then
		NOT_MEASURED[switchboard-goroutine]="127.0.0.1:$SB_GOROUTINE_PORT (engine: goroutine) does not answer 200 ok; see $RUN_DIR/switchboard.log"
	fi
	if [[ -n ${NOT_MEASURED[switchboard]:-} ]]; then
		log "switchboard will NOT be measured: ${NOT_MEASURED[switchboard]}"
	fi
fi

# --- direct
if want direct; then
	smoke direct "$(target_url direct)" || NOT_MEASURED[direct]="backend does not answer"
fi

# Final list of targets to measure, in the order given.
ACTIVE=()
for t in $TARGETS; do
	if [[ -z ${NOT_MEASURED[$t]:-} && -z ${NOT_MEASURED[${t%%-*}]:-} ]]; then ACTIVE+=("$t"); fi
done
((${#ACTIVE[@]} > 0)) || die "nothing to measure: $(for t in "${!NOT_MEASURED[@]}"; do printf '%s: %s; ' "$t" "${NOT_MEASURED[$t]}"; done)"

# ---------------------------------------------------------------- machine
{
	echo "- date: $(date -Is)"
	echo "- nproc: $(nproc)"
	echo "- CPU: $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
	echo "- kernel: $(uname -srm)"
	echo "- memory: $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "- nginx: $(nginx -v 2>&1 | sed 's/^nginx version: //')"
	echo "- haproxy: $(haproxy -v 2>&1 | head -n1)"
	echo "- wrk: $(wrk -v 2>&1 | head -n1 | sed 's/ Copyright.*//')"
	echo "- go: $(go version 2>/dev/null || echo 'not installed')"
	if [[ -n $SB_BIN ]]; then
		sb_version=$(timeout 5 "$SB_BIN" version 2>&1 | head -n1 || true)
		echo "- switchboard: ${sb_version:-"(\`version\` printed nothing)"} ($SB_BIN)"
		echo "- switchboard engine: $ENGINE"
	fi
	echo "- switchboard tree: $(git -C "$REPO_ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$REPO_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)')"
	echo "- wrk settings: -t$THREADS -c$CONNS -d$DURATION --latency, $ROUNDS round(s), warm-up $WARMUP per target"
	echo "- options: RESPONSE_BYTES=$RESPONSE_BYTES UPLOAD_BYTES=$UPLOAD_BYTES ACCESS_LOG=$ACCESS_LOG ROUTE=$ROUTE"
	if ((RESPONSE_BYTES == 0)); then backend_does='GET: return 200 "ok\n"'; else backend_does="GET: a $RESPONSE_BYTES-byte static file (sendfile)"; fi
	((UPLOAD_BYTES == 0)) || backend_does="$backend_does; POST: the whole $UPLOAD_BYTES-byte body read (mirror), then 200 \"ok\\n\""
	echo "- requests: $(if ((UPLOAD_BYTES)); then echo "POST with a $UPLOAD_BYTES-byte body (bench/upload.lua)"; else echo GET; fi)"
	echo "- backends: 1 nginx, worker_processes 1, worker_connections $BACKEND_WORKER_CONNS, 2 server blocks (127.0.0.1:$BACKEND1_PORT, :$BACKEND2_PORT), $backend_does, no access log"
	echo "- nginx-as-proxy: worker_processes $NGINX_WORKERS, worker_connections $PROXY_WORKER_CONNS, upstream keepalive $UPSTREAM_IDLE$( ((UPLOAD_BYTES == 0)) || echo ", proxy_request_buffering off, client_max_body_size $UPLOAD_BYTES"); HAProxy: nbthread $HAPROXY_THREADS, maxconn 4096, http-reuse always; switchboard: max_idle_per_endpoint $UPSTREAM_IDLE, max_body_bytes 0 (no cap)"
	if ((ACCESS_LOG)); then
		echo "- access logs (unbuffered, a write per line): nginx access_log combined -> nginx-access.log; HAProxy option httplog, log stdout format raw -> haproxy.log; switchboard access_log: true, log level info, text -> switchboard.log (both listeners)"
	else
		echo "- access logs: off in every proxy"
	fi
} >"$RUN_DIR/machine.md"

# ---------------------------------------------------------------- measure
n=${#ACTIVE[@]}
total_runs=$((ROUNDS * n))
log "targets: ${ACTIVE[*]}; $ROUNDS round(s) x $n target(s) x $DURATION (+ $WARMUP warm-up each)"

for t in "${ACTIVE[@]}"; do
	log "warm-up $t ($WARMUP)"
	run_wrk "$t" "$WARMUP" "$RUN_DIR/warmup-$t.txt" || log "warm-up of $t: wrk failed (see $RUN_DIR/warmup-$t.txt)"
done

echo "round,target,rps,p50_ms,p99_ms,non2xx,socket_errors,file,cpu_us_per_req" >"$RUN_DIR/results.csv"
declare -A FAILED_RUNS=()
k=0
for ((r = 0; r < ROUNDS; r++)); do
	for ((j = 0; j < n; j++)); do
		t=${ACTIVE[$(((j + r) % n))]}
		k=$((k + 1))
		f="$RUN_DIR/round$((r + 1))-$t.txt"
		log "run $k/$total_runs: round $((r + 1)) $t"
		ticks0=$(cpu_ticks "$t")
		if run_wrk "$t" "$DURATION" "$f" && parsed=$(parse_wrk "$f"); then
			ticks1=$(cpu_ticks "$t")
			read -r rps p50 p99 non2xx sockerr <<<"$parsed"
			cpu=""
			if [[ -n $ticks0 && -n $ticks1 ]]; then
				# The proxy's CPU time over the run, per request it served.
				cpu=$(awk -v d="$((ticks1 - ticks0))" -v hz="$CLK_TCK" -v rps="$rps" -v s="$(dur_seconds "$DURATION")" \
					'BEGIN {printf "%.1f", d / hz * 1e6 / (rps * s)}')
			fi
			echo "$((r + 1)),$t,$rps,$p50,$p99,$non2xx,$sockerr,$(basename "$f"),$cpu" >>"$RUN_DIR/results.csv"
			log "  $t: $rps req/s, p50 ${p50}ms, p99 ${p99}ms, non-2xx $non2xx, socket errors $sockerr, proxy CPU ${cpu:-n/a} us/req"
		else
			FAILED_RUNS[$t]=$((${FAILED_RUNS[$t]:-0} + 1))
			log "  $t: wrk run failed or printed no results; see $f"
		fi
	done
done

# ---------------------------------------------------------------- profile
if ((PROFILE)); then
	if [[ -z $SB_PID || -n ${NOT_MEASURED[switchboard]:-} ]]; then
		log "PROFILE=1: switchboard is not running; no profile taken"
		echo "switchboard was not running; no profile taken" >"$OUT_DIR/profile.txt"
	else
		log "PROFILE=1: ${PROFILE_SECONDS}s CPU profile of switchboard under load"
		prof_url="http://127.0.0.1:$SB_ADMIN_PORT/debug/pprof/profile?seconds=$PROFILE_SECONDS"
		# A plain background command (no function/subshell), so that $! is
		# timeout itself, which passes a SIGTERM from cleanup on to wrk.
		mapfile -t prof_args < <(wrk_args "$PROFILE_TARGET" "$((PROFILE_SECONDS + 3))s")
		timeout --kill-after=5 "$((PROFILE_SECONDS + 33))" \
			wrk "${prof_args[@]}" >"$RUN_DIR/profile-wrk.txt" 2>&1 </dev/null &
		wrk_pid=$!
		BG_PIDS+=("$wrk_pid")
		sleep 1
		# In the background too, so that a signal reaches our trap at once and
		# cleanup can stop curl.
		curl -sS --max-time "$((PROFILE_SECONDS + 20))" -o "$OUT_DIR/switchboard.cpu.pprof" \
			-w '%{http_code}' "$prof_url" >"$RUN_DIR/profile-curl.code" 2>"$RUN_DIR/profile-curl.log" </dev/null &
		curl_pid=$!
		BG_PIDS+=("$curl_pid")
		if wait "$curl_pid"; then
			code=$(cat "$RUN_DIR/profile-curl.code")
		else
			code="curl failed: $(cat "$RUN_DIR/profile-curl.log")"
		fi
		wait "$wrk_pid" || log "profile wrk run failed; see $RUN_DIR/profile-wrk.txt"
		if [[ $code == 200 ]]; then
			cp "$OUT_DIR/switchboard.cpu.pprof" "$RUN_DIR/"
			if go tool pprof -top -nodecount=30 "$SB_BIN" "$OUT_DIR/switchboard.cpu.pprof" \
				>"$OUT_DIR/profile.txt" 2>&1; then
				cp "$OUT_DIR/profile.txt" "$RUN_DIR/"
				log "profile: $OUT_DIR/switchboard.cpu.pprof, top 30 in $OUT_DIR/profile.txt"
			else
				log "go tool pprof failed; see $OUT_DIR/profile.txt"
			fi
		else
			rm -f "$OUT_DIR/switchboard.cpu.pprof"
			if [[ $code == 404 ]]; then
				msg="the admin listener does not serve /debug/pprof/profile (404); no profile taken"
			else
				msg="GET $prof_url: $code; no profile taken"
			fi
			log "PROFILE=1: $msg"
			echo "$msg" >"$OUT_DIR/profile.txt"
		fi
	fi
fi

# ---------------------------------------------------------------- report
# access_log_summary: one line per running proxy: its access log, the
# request lines in it and its size, so a reader sees that each one logged.
access_log_summary() {
	local proxy file pattern lines bytes
	for proxy in nginx haproxy switchboard; do
		[[ -n ${TARGET_SID[$proxy]:-} ]] || continue
		case $proxy in
		nginx) file=nginx-access.log pattern='' ;;
		haproxy) file=haproxy.log pattern='"(GET|POST) ' ;; # its stdout: also start-up messages
		switchboard) file=switchboard.log pattern='msg=access' ;; # its stderr: also other log lines
		esac
		if [[ ! -f $RUN_DIR/$file ]]; then
			echo "- $proxy: no $file"
			continue
		fi
		if [[ -n $pattern ]]; then lines=$(grep -Ec "$pattern" "$RUN_DIR/$file" || true); else lines=$(wc -l <"$RUN_DIR/$file"); fi
		bytes=$(stat -c %s "$RUN_DIR/$file")
		echo "- $proxy: $lines request lines, $(awk -v b="$bytes" 'BEGIN {printf "%.1f MiB", b / 1048576}') ($file)"
	done
}

csv_col() { # TARGET COLUMN -> values of that column for that target
	awk -F, -v t="$1" -v c="$2" 'NR > 1 && $2 == t {print $c}' "$RUN_DIR/results.csv"
}
nginx_rps=$(csv_col nginx 3 | median)
status=0
{
	workload=""
	# The POSTs of UPLOAD_BYTES are answered "ok\n"; RESPONSE_BYTES is what GETs get.
	((RESPONSE_BYTES == 0 || UPLOAD_BYTES > 0)) || workload="$workload, $RESPONSE_BYTES-byte responses"
	((UPLOAD_BYTES == 0)) || workload="$workload, $UPLOAD_BYTES-byte POST bodies"
	((ACCESS_LOG == 0)) || workload="$workload, access log on"
	echo "### HTTP proxy (L7) — $(date +%Y-%m-%d), wrk -t$THREADS -c$CONNS -d$DURATION, $ROUNDS round(s)$workload"
	echo
	echo "| target | req/s (median) | p50 ms | p99 ms | errors | vs nginx | proxy CPU µs/req | req/s per round |"
	echo "|---|---:|---:|---:|---:|---:|---:|---|"
	for t in $TARGETS; do
		if [[ -n ${NOT_MEASURED[$t]:-} || -n ${NOT_MEASURED[${t%%-*}]:-} ]]; then
			echo "| $t | — | — | — | — | — | — | not measured (see below) |"
			continue
		fi
		rps=$(csv_col "$t" 3 | median)
		if [[ -z $rps ]]; then
			echo "| $t | — | — | — | — | — | — | every run failed |"
			continue
		fi
		p50=$(csv_col "$t" 4 | median)
		p99=$(csv_col "$t" 5 | median)
		errs=$(awk -F, -v t="$t" 'NR > 1 && $2 == t {s += $6 + $7} END {print s + 0}' "$RUN_DIR/results.csv")
		per_round=$(csv_col "$t" 3 | awk '{printf "%s%.0f", (NR > 1 ? ", " : ""), $1}')
		ratio="n/a"
		if [[ -n $nginx_rps ]]; then
			ratio=$(awk -v a="$rps" -v b="$nginx_rps" 'BEGIN {printf "%.2fx", a / b}')
		fi
		cpu=$(csv_col "$t" 9 | awk NF | median)
		printf '| %s | %.0f | %.2f | %.2f | %s | %s | %s | %s |\n' "$t" "$rps" "$p50" "$p99" "$errs" "$ratio" "${cpu:-n/a}" "$per_round"
		((errs == 0)) || status=3
	done
	echo
	echo "Medians over rounds; errors = non-2xx responses + socket errors, summed over rounds;"
	echo "vs nginx = median req/s / nginx-as-proxy median req/s. \"direct\" is wrk against one backend, no proxy."
	echo "proxy CPU = user + system CPU time of the proxy's processes over a run (/proc/PID/stat), per request served; median over rounds."
	if ((${#NOT_MEASURED[@]} > 0 || ${#FAILED_RUNS[@]} > 0)); then
		echo
		for t in "${!NOT_MEASURED[@]}"; do echo "- **$t not measured**: ${NOT_MEASURED[$t]}"; done
		for t in "${!FAILED_RUNS[@]}"; do echo "- **$t**: ${FAILED_RUNS[$t]} of $ROUNDS runs failed (see raw outputs)"; done
		status=3
	fi
	if ((ACCESS_LOG)); then
		echo
		echo "Access logs after the run (warm-ups, smoke tests and every round included):"
		echo
		access_log_summary
	fi
	machine_footer
} >"$RUN_DIR/results.md"

cat "$RUN_DIR/results.md"
exit "$status"
