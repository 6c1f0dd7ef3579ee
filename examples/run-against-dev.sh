#!/usr/bin/env bash
# Runs each example against the make dev stack and checks that it ends with
# every transaction confirmed (make examples).
#
# Starts ./bin/emulator -server bin/server (what make dev runs, on free
# ports) in the background, waits for its banner's "ready", reads the API's
# URL and the API key from the banner, then runs each make target named in
# EXAMPLES as
#
#   make <target> URL=<API URL> KEY=<API key> N=<N>
#
# and looks in its output for the summary line
#
#   ... sent=<N> confirmed=<N> failed=0 stuck=0 ...
#
# The stack is stopped at the end, also when a step fails. Exits non-zero
# when the stack does not start or an example fails or does not say that
# every transaction was confirmed.
#
# Environment: EXAMPLES (make targets, default example-go), N (default
# 1000), EXAMPLE_TIMEOUT (each example's limit, default 10m), EMULATOR_ARGS
# (more flags for the emulator).
set -euo pipefail
cd "$(dirname "$0")/.."

EXAMPLES=${EXAMPLES:-example-go}
N=${N:-1000}
EXAMPLE_TIMEOUT=${EXAMPLE_TIMEOUT:-10m}
MAKE=${MAKE:-make}

work=$(mktemp -d "${TMPDIR:-/tmp}/txfence-examples.XXXXXX")
emu_pid=""
ex_pid=""
stop_stack() {
	status=$?
	if [ -n "$ex_pid" ]; then
		kill -TERM "$ex_pid" 2>/dev/null || true
	fi
	if [ -n "$emu_pid" ] && kill -0 "$emu_pid" 2>/dev/null; then
		echo "examples: stopping the stack"
		# As Ctrl-C (a background job ignores SIGINT, so SIGTERM, which the
		# emulator takes alike): it stops every part and removes its data.
		kill -TERM "$emu_pid" 2>/dev/null || true
		for _ in $(seq 1 300); do
			kill -0 "$emu_pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$emu_pid" 2>/dev/null; then
			echo "examples: the stack did not stop within 30s; killing it"
			kill -KILL "$emu_pid" 2>/dev/null || true
		fi
		wait "$emu_pid" 2>/dev/null || true
	fi
	if [ "$status" != 0 ] && [ -s "$work/emulator.err" ]; then
		echo "examples: the emulator's last log lines:"
		tail -n 30 "$work/emulator.err"
	fi
	rm -rf "$work"
	exit "$status"
}
trap stop_stack EXIT
trap 'exit 130' INT TERM

start=$(date +%s)
# The stack's own database, Pub/Sub and chain, whatever the environment
# names: this checks the examples against make dev as a newcomer runs it.
# shellcheck disable=SC2086
env -u DATABASE_URL -u PUBSUB_EMULATOR_HOST -u RPC_URL \
	./bin/emulator -server bin/server -port 0 -admin-port 0 ${EMULATOR_ARGS:-} \
	>"$work/emulator.out" 2>"$work/emulator.err" &
emu_pid=$!

for _ in $(seq 1 1200); do
	grep -qx ready "$work/emulator.out" && break
	if ! kill -0 "$emu_pid" 2>/dev/null; then
		echo "examples: the emulator exited before it was ready:"
		cat "$work/emulator.out"
		exit 1
	fi
	sleep 0.1
done
if ! grep -qx ready "$work/emulator.out"; then
	echo "examples: the stack was not ready within 120s:"
	cat "$work/emulator.out"
	exit 1
fi
api=$(awk '$1 == "API" { print $2; exit }' "$work/emulator.out")
key=$(sed -n 's/^ *export TXFENCE_KEY=\(txfk_[^ ]*\)$/\1/p' "$work/emulator.out" | head -n 1)
if [ -z "$api" ] || [ -z "$key" ]; then
	echo "examples: no API URL or API key in the banner:"
	cat "$work/emulator.out"
	exit 1
fi
echo "examples: make dev's stack is ready at $api after $(($(date +%s) - start))s"

failed=""
for target in $EXAMPLES; do
	t0=$(date +%s)
	echo "examples: $target: $N transactions against $api"
	# In the background and waited for, so that a signal to this script
	# runs its trap at once rather than after the example; the trap's
	# SIGTERM to timeout reaches the example's whole process group.
	: >"$work/$target.out"
	timeout "$EXAMPLE_TIMEOUT" "$MAKE" --no-print-directory "$target" URL="$api" KEY="$key" N="$N" >"$work/$target.out" 2>&1 &
	ex_pid=$!
	tail -n +1 -f --pid="$ex_pid" "$work/$target.out" &
	tail_pid=$!
	rc=0
	wait "$ex_pid" || rc=$?
	ex_pid=""
	wait "$tail_pid" || true
	took=$(($(date +%s) - t0))
	if [ "$rc" != 0 ]; then
		echo "examples: $target FAILED (exit $rc) after ${took}s"
		failed="$failed $target"
	elif ! grep -qE "(^|[^[:alnum:]_])sent=$N confirmed=$N failed=0 stuck=0([^[:alnum:]_]|$)" "$work/$target.out"; then
		echo "examples: $target FAILED after ${took}s: no summary line saying sent=$N confirmed=$N failed=0 stuck=0"
		failed="$failed $target"
	else
		echo "examples: $target ok: all $N confirmed in ${took}s"
	fi
done
echo "examples: $(($(date +%s) - start))s in all"
if [ -n "$failed" ]; then
	echo "examples: failed:$failed"
	exit 1
fi
