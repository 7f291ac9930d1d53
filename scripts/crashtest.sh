#!/usr/bin/env bash
# Crash test: queue a batch of card-dispute demo runs, then start a worker and
# SIGKILL it at random points, again and again, until a worker finishes the
# batch on its own. Afterwards every run must have completed, every hash chain
# must verify, and the simulated bank must have issued exactly one refund per
# run (no refund lost, none repeated).
#
# Usage: scripts/crashtest.sh            (RUNS=50, KEEP=1 keeps the data dir)
#        AGENTPLANE_BIN=path DATA=dir    (use a built binary / a given dir)
#        EXAMPLE=helpdesk                (the helpdesk demo instead: its
#                                         service desk must reset one MFA
#                                         and post one reply per run; the Go
#                                         test checks its counters)
#
# The Go tests run it: go test -run 'TestCrashSIGKILL$' ./cmd/agentplane/
# (which also checks every log in depth). The same crash test on the
# Temporal engine (a dev server, `agentplane worker --engine temporal://...`
# killed and restarted) is TestCrashSIGKILLTemporal in that package, in Go.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS="${RUNS:-50}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/agentplane-crash-XXXXXX")"
DATA="${DATA:-$WORK/data}"
BIN="${AGENTPLANE_BIN:-}"
cleanup() { if [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; else echo "kept $WORK"; fi; }
trap cleanup EXIT

if [ -z "$BIN" ]; then
  BIN="$WORK/agentplane"
  go build -o "$BIN" ./cmd/agentplane
fi

EXAMPLE="${EXAMPLE:-card-dispute}"
case "$EXAMPLE" in
card-dispute)
  AGENT=card-dispute-assistant USER_=priya@example-bank.in TENANT=example-bank APPROVER=meera@example-bank.in
  TASK="Ticket T-40127 (customer c_88213): two charges of 12,499 INR from an airline on 3 Oct look like duplicates. Investigate and resolve." ;;
helpdesk)
  AGENT=it-helpdesk-assistant USER_=anil@citycare.example TENANT=citycare-hospitals APPROVER=farah@citycare.example
  TASK="Ticket H-7001 (staff s_2041): admin account locked out after a phone swap. Check the sign-in log and resolve." ;;
*) echo "unknown EXAMPLE $EXAMPLE" >&2; exit 2 ;;
esac
"$BIN" demo --example "$EXAMPLE" --setup-only --data "$DATA" >/dev/null
MODELS="$DATA/demo/models.yaml"
for _ in $(seq "$RUNS"); do
  "$BIN" run "$AGENT@prod" --detach --data "$DATA" --models "$MODELS" \
    --user "$USER_" --tenant "$TENANT" --task "$TASK" >/dev/null
done
echo "queued $RUNS runs in $DATA"

kills=0
starts=0
# work_until_idle runs the worker, SIGKILLing it at random points, until a
# worker exits on its own with nothing left to run.
work_until_idle() {
while :; do
  starts=$((starts + 1))
  "$BIN" worker --until-idle --concurrency 8 --lease-ttl 400ms --data "$DATA" --models "$MODELS" &
  pid=$!
  # Kill somewhere between 20 ms and 600 ms into the worker's life.
  sleep "0.$(printf '%03d' $((RANDOM % 580 + 20)))"
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    kills=$((kills + 1))
    continue
  fi
  if wait "$pid"; then
    break
  fi
  echo "worker exited with an error" >&2
  exit 1
done
}

# Phase 1: every run goes as far as the refund, which waits for a supervisor.
# Then, round after round, the supervisor approves whatever waits (the
# refund, then the email to the customer, which a tainted run may not send
# out of the bank unreviewed) and the workers, still being killed, carry the
# runs on, until nothing waits.
work_until_idle
for round in 1 2 3 4; do
  waiting="$("$BIN" approvals --data "$DATA" | tail -n +2 | awk '{print $1}')"
  nwait="$(printf '%s\n' "$waiting" | grep -c . || true)"
  echo "round $round: $nwait approvals wait"
  [ "$nwait" -eq 0 ] && break
  for id in $waiting; do
    "$BIN" approve "$id" --as "$APPROVER" --comment "crash test" --data "$DATA" >/dev/null
  done
  work_until_idle
done
echo "worker started $starts times, SIGKILLed $kills times"

fail=0
completed="$("$BIN" runs --status completed --data "$DATA" | tail -n +2 | wc -l)"
if [ "$completed" -ne "$RUNS" ]; then
  echo "FAIL: $completed of $RUNS runs completed" >&2
  "$BIN" runs --data "$DATA" >&2
  fail=1
fi
for id in $("$BIN" runs --data "$DATA" | tail -n +2 | awk '{print $1}'); do
  if ! "$BIN" trace verify "$id" --data "$DATA" >/dev/null; then
    echo "FAIL: run $id does not verify" >&2
    "$BIN" trace verify "$id" --data "$DATA" >&2 || true
    fail=1
  fi
done
if [ "$EXAMPLE" = card-dispute ]; then
  "$BIN" bank --data "$DATA" --check-one-refund-per-run || fail=1
fi
if [ "$fail" -ne 0 ]; then
  KEEP=1
  exit 1
fi
echo "crash test passed ($EXAMPLE): $RUNS runs, $kills kills, every chain verified"
