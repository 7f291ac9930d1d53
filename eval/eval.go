// Package eval gates an agent release on evidence: eval sets of tasks with
// expected outcomes graded in code, run against simulated tools only, and
// comparisons of two agent versions on the same work.
//
// It knows no agent: an eval set names a World — a simulated
// environment (a bank, an IT service desk) that an example or a team
// implements outside this package — which builds a fresh environment for
// each task from the task's fixture, names the tools it simulates, and
// reports what a run left in it for grading.
//
// An eval set (YAML, one per agent; see LoadSet and docs/design/evals.md)
// lists tasks. Each task brings its own state of the world (its fixture:
// for the card-dispute bank, the customer, the ticket with or without an
// instruction planted in it, the card transactions) and what the run must
// show: calls it must make, calls it must never propose, the records it
// leaves in the world, its final status and its step and cost bounds. The
// set also says who runs the tasks, and how the humans who decide
// approvals behave (an approval policy: rules of call matchers).
//
// Run runs every task in a fresh environment of its own — a platform in a
// throwaway directory with its own store and its own environment of the
// world — in parallel, deciding approvals by the set's policy, and grades each run
// (Grade). Compare runs two versions on the same work: recorded runs
// replayed on each (runs.Service.Replay, live from step 1, with the
// recording's results served while calls match and the set's mocks after a
// divergence), or the set's tasks run live on each; it reports task
// success, cost per successful task, steps p50 and p95, approval-override
// rate, tool error rate and runs stopped by budgets or loop detection, and
// lists regressions beyond Thresholds.
//
// Evals refuse to start when the agent is granted a tool the world does
// not simulate (Simulated): nothing an eval runs can reach a real system.
package eval
