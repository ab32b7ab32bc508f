#!/usr/bin/env bash
# bench/ab-tcp.sh — A/B of two switchboard binaries on the connection-rate
# load of bench/run-tcp.sh: same backends, alternating rounds, the proxy's
# CPU time per connection measured for each. For a change to proxy/tcpproxy
# whose effect on conn/s is lost in the noise of a shared 2-core machine
# (where the load generator and the backends bound the rate), CPU per
# connection is the steadier measure.
#
# Usage (from anywhere):
#
#   git archive BASE_COMMIT | tar -x -C /tmp/base && (cd /tmp/base && go build -o /tmp/sb-base ./cmd/switchboard)
#   go build -o /tmp/sb-new ./cmd/switchboard
#   bench/ab-tcp.sh /tmp/sb-base /tmp/sb-new        # ROUNDS=6 DURATION=5s CONNS=64 SOURCES=16 (see run-tcp.sh)
#
# Output: one line per run ("A rate=... us_per_conn=... errors=..."), then
# the medians and the median of the per-round ratio B/A. Ports: backends
# 127.0.0.1:19101 and :19102, A :18190 (admin :19921), B :18191 (admin :19922).

set -euo pipefail

ROUNDS=${ROUNDS:-6}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-64}
SOURCES=${SOURCES:-16}
BENCH_TAG=bench-ab-tcp
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

(($# == 2)) || die "usage: bench/ab-tcp.sh BIN_A BIN_B"
A=$1 B=$2
for b in "$A" "$B"; do [[ -x $b ]] || die "$b is not an executable"; done
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
install_cleanup
check_ports_free 19101 19102 18190 18191 19921 19922
WORK=$(mktemp -d)
(cd "$REPO_ROOT" && go build -o "$WORK/tcpload" ./bench/tcpload) || die "building bench/tcpload failed"
LOAD=$WORK/tcpload

start backends "$WORK/backends.log" "$LOAD" serve -listen 127.0.0.1:19101,127.0.0.1:19102
wait_port backends "$START_PID" 19102
declare -A PID PORT=([A]=18190 [B]=18191) ADMIN=([A]=19921 [B]=19922) BIN=([A]=$A [B]=$B)
for x in A B; do
	cat >"$WORK/$x.yaml" <<Y
admin: {listen: 127.0.0.1:${ADMIN[$x]}}
listeners:
  - {name: bench, protocol: tcp, listen: 127.0.0.1:${PORT[$x]}, upstream: backends}
upstreams:
  backends:
    balance: {policy: round_robin}
    targets: [{address: 127.0.0.1:19101}, {address: 127.0.0.1:19102}]
Y
	start "$x" "$WORK/$x.log" "${BIN[$x]}" serve --config "$WORK/$x.yaml"
	PID[$x]=$START_PID
	wait_port "$x" "$START_PID" "${PORT[$x]}"
done

# cpu_ticks PID: user+system clock ticks of the process so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

run() { # X: one connrate run against X; prints its line, records its µs/conn
	local x=$1 c0 c1 out conns
	c0=$(cpu_ticks "${PID[$x]}")
	out=$("$LOAD" connrate -addr "127.0.0.1:${PORT[$x]}" -c "$CONNS" -sources "$SOURCES" -d "$DURATION")
	c1=$(cpu_ticks "${PID[$x]}")
	conns=$(sed -n 's/.*conns=\([0-9]*\).*/\1/p' <<<"$out")
	US[$x]=$(awk -v t=$((c1 - c0)) -v hz="$HZ" -v n="$conns" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}')
	echo "$x $(grep -o 'rate=[0-9.]*' <<<"$out") us_per_conn=${US[$x]} $(grep -o 'errors=[0-9]*' <<<"$out")"
}

log "load average: $(cut -d' ' -f1-3 /proc/loadavg); warm-up"
for x in A B; do "$LOAD" connrate -addr "127.0.0.1:${PORT[$x]}" -c "$CONNS" -sources "$SOURCES" -d 2s >/dev/null; done
declare -A US
ALL_A="" ALL_B="" RATIOS=""
for ((r = 1; r <= ROUNDS; r++)); do
	if ((r % 2)); then run A; run B; else run B; run A; fi
	ALL_A+="${US[A]}"$'\n' ALL_B+="${US[B]}"$'\n'
	RATIOS+=$(awk -v a="${US[A]}" -v b="${US[B]}" 'BEGIN {printf "%.3f", b / a}')$'\n'
done
echo "median µs/conn: A $(printf %s "$ALL_A" | median), B $(printf %s "$ALL_B" | median);" \
	"B/A per round: $(printf %s "$RATIOS" | tr '\n' ' ')(median $(printf %s "$RATIOS" | median))"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
