# bench/lib.sh — helpers shared by bench/run-http.sh and bench/run-tcp.sh.
# shellcheck shell=bash
# Sourced, not run. The caller sets BENCH_TAG (the log prefix) and calls
# install_cleanup before it starts anything.

log() { printf '[%s %s] %s\n' "$BENCH_TAG" "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$BENCH_TAG" "$*" >&2; exit 1; }

# dur_seconds D: a duration as wrk takes it (10, 10s, 2m, 1h) in whole seconds.
dur_seconds() {
	local d=$1
	case $d in
	*h) echo $((${d%h} * 3600)) ;;
	*m) echo $((${d%m} * 60)) ;;
	*s) echo "${d%s}" ;;
	*) echo "$d" ;;
	esac
}

# want TARGET: is TARGET in $TARGETS?
want() { [[ " $TARGETS " == *" $1 "* ]]; }

# port_open PORT: does something accept TCP connections on 127.0.0.1:PORT?
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_port NAME PID PORT [SECONDS]: wait (default 10s) until PORT accepts,
# while PID lives.
wait_port() {
	local name=$1 pid=$2 port=$3 secs=${4:-10} i
	for ((i = 0; i < secs * 10; i++)); do
		port_open "$port" && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			log "$name exited before 127.0.0.1:$port accepted connections"
			return 1
		fi
		sleep 0.1
	done
	log "$name: 127.0.0.1:$port did not accept connections within ${secs}s"
	return 1
}

# check_ports_free PORT...: refuse to measure whatever else listens there.
check_ports_free() {
	local p
	for p in "$@"; do
		if port_open "$p"; then
			die "127.0.0.1:$p is already in use by another process (a previous run still alive? ss -ltnp 'sport = :$p')"
		fi
	done
	return 0
}

# start NAME LOGFILE CMD...: start CMD in its own session/process group
# (so that cleanup can stop it with all its children); sets START_PID.
START_PID=""
start() {
	local name=$1 logfile=$2
	shift 2
	setsid "$@" >"$logfile" 2>&1 </dev/null &
	START_PID=$!
	STARTED_PIDS+=("$START_PID")
	log "started $name (pid $START_PID): $*"
}

# median of the numbers on stdin ("" for none).
median() {
	sort -g | awk '{a[NR] = $1} END {
		if (NR == 0) { print ""; exit }
		if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# machine_footer: the end of a results table — the machine description the
# script wrote to $RUN_DIR/machine.md, the load now, and where the raw
# outputs are.
machine_footer() {
	echo
	echo "Machine:"
	echo
	cat "$RUN_DIR/machine.md"
	echo "- load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "- raw outputs: bench/out/$(basename "$RUN_DIR")/"
}

# What cleanup undoes; the scripts add to these as they go.
STARTED_PIDS=()     # process-group leaders started with start (setsid)
BG_PIDS=()          # other background children (e.g. the profile run's wrk)
WORK=""             # a temporary directory to remove
POLICY_RC_CREATED=0 # 1 while /usr/sbin/policy-rc.d is ours

# cleanup stops everything the script started (SIGTERM to each process
# group, SIGKILL after 5 s), removes WORK and our policy-rc.d, and exits
# with the script's status.
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
	local rc=$? pid i
	set +e
	trap - EXIT INT TERM
	for pid in "${BG_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	done
	for pid in "${STARTED_PIDS[@]}"; do
		kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
	done
	for pid in "${STARTED_PIDS[@]}"; do
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "pid $pid did not stop on SIGTERM in 5s; sending SIGKILL"
			kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
		fi
		wait "$pid" 2>/dev/null
	done
	if ((POLICY_RC_CREATED)); then rm -f /usr/sbin/policy-rc.d; fi
	if [[ -n $WORK && -d $WORK ]]; then rm -rf -- "$WORK"; fi
	exit "$rc"
}

# install_cleanup runs cleanup on exit, Ctrl-C and SIGTERM.
install_cleanup() {
	trap cleanup EXIT
	trap 'log "interrupted"; exit 130' INT
	trap 'log "terminated"; exit 143' TERM
}
