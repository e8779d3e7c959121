#!/usr/bin/env bash
# The Delta adapter's job drill, run by .ci/run after `cargo test --workspace` built the example: the example
# job's crash matrix on a local Delta table, then the same with log maintenance between inputs (`--maintenance`:
# a checkpoint and the removal of every commit file before it), then the Python `deltalake` reader (1.6.6, in a
# cached venv) reads the table back and checks the job's txn.
#
#   DELTA_JOB=path/to/delta_job bash crates/sinkpoint-delta/ci-delta.sh
#
# Without DELTA_JOB it builds the example (cargo build -p sinkpoint-delta --examples).
# Cache: ${SINKPOINT_CACHE:-$HOME/.cache/sinkpoint}/delta-venv (deltalake==1.6.6, pyarrow).
set -euo pipefail

DELTA_CACHE_DIR="${SINKPOINT_CACHE:-$HOME/.cache/sinkpoint}"
DELTA_VENV="$DELTA_CACHE_DIR/delta-venv"
DELTA_JOB_DIR="$(mktemp -d)/delta-job"
DELTA_MAINT_DIR="$(dirname "$DELTA_JOB_DIR")/delta-job-maintenance"
CRASH_EXIT_CODE=86

_delta_log() { printf 'delta: %s\n' "$*" >&2; }

if [[ -z "${DELTA_JOB:-}" ]]; then
    cargo build -q -p sinkpoint-delta --examples
    DELTA_JOB="${CARGO_TARGET_DIR:-target}/debug/examples/delta_job"
fi
job() { "$DELTA_JOB" --dir "$DELTA_JOB_DIR" --inputs 6 --rows 50 "$@"; }

# Each crash point with RUN (a function taking the example's flags): a run that dies there (exit 86), then a
# clean rerun that must read back 0 duplicates, 0 missing. LABEL prefixes each line; LOG keeps the crashed run's output.
crash_drill() {
    local run=$1 label=$2 log=$3 point rc out
    for point in after-stage after-seal after-begin-commit after-target-commit-before-mark unknown-outcome; do
        rc=0
        "$run" --fresh --crash-at "$point" > "$log" 2>&1 || rc=$?
        if [[ $rc -ne $CRASH_EXIT_CODE ]]; then
            cat "$log"; _delta_log "expected exit $CRASH_EXIT_CODE at $label$point, got $rc"; exit 1
        fi
        out=$("$run")
        printf '%-46s %s\n' "$label$point" "$(tail -n 1 <<<"$out")"
        grep -q 'table: 300 rows, 0 duplicates, 0 missing' <<<"$out" || { printf '%s\n' "$out"; _delta_log "bad read-back after $label$point"; exit 1; }
    done
}
crash_drill job "" "$DELTA_JOB_DIR.log"
# The fast path: a rerun of a finished job finds its final key in the table and writes nothing.
out=$(job)
grep -q 'fast path' <<<"$out" || { printf '%s\n' "$out"; _delta_log "the rerun of a finished job did not take the fast path"; exit 1; }
printf '%-46s %s\n' "rerun of a finished job" "$(grep 'fast path' <<<"$out")"

# Log maintenance between inputs, as an operator might: each input its own commit, then a checkpoint and the
# removal of every older commit file; once more at the start of each run, before recovery.
maint() { "$DELTA_JOB" --dir "$DELTA_MAINT_DIR" --inputs 6 --rows 50 --maintenance "$@"; }
out=$(maint --fresh)
printf '%-46s %s\n' "maintenance" "$(tail -n 1 <<<"$out")"
grep -q 'table: 300 rows, 0 duplicates, 0 missing' <<<"$out" || { printf '%s\n' "$out"; _delta_log "bad read-back with maintenance"; exit 1; }
crash_drill maint "maintenance, " "$DELTA_MAINT_DIR.log"

_delta_venv_ok() { [[ -x "$DELTA_VENV/bin/python" ]] && "$DELTA_VENV/bin/python" -c 'import deltalake, pyarrow; assert deltalake.__version__ == "1.6.6"' >/dev/null 2>&1; }
if ! _delta_venv_ok; then
    _delta_log "installing deltalake 1.6.6 into $DELTA_VENV"
    mkdir -p "$DELTA_CACHE_DIR"
    rm -rf "$DELTA_VENV"
    python3 -m venv "$DELTA_VENV"
    "$DELTA_VENV/bin/pip" install -q deltalake==1.6.6 pyarrow > "$DELTA_CACHE_DIR/delta-pip.log" 2>&1 \
        || { cat "$DELTA_CACHE_DIR/delta-pip.log"; _delta_log "deltalake 1.6.6 could not be installed"; exit 1; }
fi
# The Python reader (delta-rs underneath, another build): every row once, and the job's txn (its last key) is
# there, kept through the checkpoints and log cleanups of the maintenance run.
"$DELTA_VENV/bin/python" - "$DELTA_JOB_DIR/table" "$DELTA_MAINT_DIR/table" <<'PY'
import collections, sys
import deltalake
for uri in sys.argv[1:]:
    dt = deltalake.DeltaTable(uri)
    rows = dt.to_pyarrow_table(columns=["row"]).column("row").to_pylist()
    dups = sum(c - 1 for c in collections.Counter(rows).values())
    assert len(rows) == 300 and dups == 0, (uri, len(rows), dups)
    txn = dt.transaction_version("sinkpoint.job.delta-job")
    assert txn is not None and txn >= 0, (uri, txn)
    print(f"deltalake {deltalake.__version__}: {uri}: {len(rows)} rows, {dups} duplicates, txn {txn}")
PY
