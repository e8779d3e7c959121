#!/usr/bin/env bash
# The Lance adapter's job drill (issue 11), run by .ci/run after `cargo test --workspace` built the example:
# the example job's crash matrix on a local Lance dataset, then the same with table maintenance between inputs
# (`--maintenance`: Lance cleanup and compaction), then Lance's own Python reader (pylance 14.0.2, in a cached
# venv) reads the dataset back and checks every committed version's transaction properties.
#
#   LANCE_JOB=path/to/lance_job bash crates/sinkpoint-lance/ci-lance.sh
#
# Without LANCE_JOB it builds the examples (cargo build --workspace --examples: a `-p sinkpoint-lance` build
# unifies features differently and rebuilds Lance).
# Cache: ${SINKPOINT_CACHE:-$HOME/.cache/sinkpoint}/lance-venv (pylance==14.0.2, pyarrow, numpy).
set -euo pipefail

LANCE_CACHE_DIR="${SINKPOINT_CACHE:-$HOME/.cache/sinkpoint}"
LANCE_VENV="$LANCE_CACHE_DIR/lance-venv"
LANCE_JOB_DIR="$(mktemp -d)/lance-job"
LANCE_MAINT_DIR="$(dirname "$LANCE_JOB_DIR")/lance-job-maintenance"
CRASH_EXIT_CODE=86

_lance_log() { printf 'lance: %s\n' "$*" >&2; }

if [[ -z "${LANCE_JOB:-}" ]]; then
    cargo build -q --workspace --examples
    LANCE_JOB="${CARGO_TARGET_DIR:-target}/debug/examples/lance_job"
fi
job() { "$LANCE_JOB" --dir "$LANCE_JOB_DIR" --inputs 6 --rows 50 "$@"; }

# Each crash point with RUN (a function taking the example's flags): a run that dies there (exit 86), then a
# clean rerun that must read back 0 duplicates, 0 missing. LABEL prefixes each line; LOG keeps the crashed run's output.
crash_drill() {
    local run=$1 label=$2 log=$3 point rc out
    for point in after-stage after-seal after-begin-commit after-target-commit-before-mark unknown-outcome; do
        rc=0
        "$run" --fresh --crash-at "$point" > "$log" 2>&1 || rc=$?
        if [[ $rc -ne $CRASH_EXIT_CODE ]]; then
            cat "$log"; _lance_log "expected exit $CRASH_EXIT_CODE at $label$point, got $rc"; exit 1
        fi
        out=$("$run")
        printf '%-46s %s\n' "$label$point" "$(tail -n 1 <<<"$out")"
        grep -q 'table: 300 rows, 0 duplicates, 0 missing' <<<"$out" || { printf '%s\n' "$out"; _lance_log "bad read-back after $label$point"; exit 1; }
    done
}
crash_drill job "" "$LANCE_JOB_DIR.log"
# The fast path: a rerun of a finished job finds its final key in the dataset and writes nothing.
out=$(job)
grep -q 'fast path' <<<"$out" || { printf '%s\n' "$out"; _lance_log "the rerun of a finished job did not take the fast path"; exit 1; }
printf '%-46s %s\n' "rerun of a finished job" "$(grep 'fast path' <<<"$out")"

# Table maintenance between inputs, as an operator might: each input its own commit, then Lance's cleanup of
# every older version (with the retention watermark and without, alternately) and compaction; once more at the
# start of each run, before recovery. A fresh run, then each crash point and a rerun, all with maintenance.
maint() { "$LANCE_JOB" --dir "$LANCE_MAINT_DIR" --inputs 6 --rows 50 --maintenance "$@"; }
out=$(maint --fresh)
printf '%-46s %s\n' "maintenance" "$(tail -n 1 <<<"$out")"
grep -q 'table: 300 rows, 0 duplicates, 0 missing' <<<"$out" || { printf '%s\n' "$out"; _lance_log "bad read-back with maintenance"; exit 1; }
crash_drill maint "maintenance, " "$LANCE_MAINT_DIR.log"

_lance_venv_ok() { [[ -x "$LANCE_VENV/bin/python" ]] && "$LANCE_VENV/bin/python" -c 'import lance, pyarrow; assert lance.__version__ == "14.0.2"' >/dev/null 2>&1; }
if ! _lance_venv_ok; then
    _lance_log "installing pylance 14.0.2 into $LANCE_VENV"
    mkdir -p "$LANCE_CACHE_DIR"
    rm -rf "$LANCE_VENV"
    python3 -m venv "$LANCE_VENV"
    "$LANCE_VENV/bin/pip" install -q pylance==14.0.2 pyarrow numpy > "$LANCE_CACHE_DIR/lance-pip.log" 2>&1 \
        || { cat "$LANCE_CACHE_DIR/lance-pip.log"; _lance_log "pylance 14.0.2 could not be installed"; exit 1; }
fi
# Lance's own reader: every row once, and each committed version's transaction names the job and its key.
"$LANCE_VENV/bin/python" - "$LANCE_JOB_DIR/table.lance" <<'PY'
import collections, sys
import lance
ds = lance.dataset(sys.argv[1])
rows = ds.to_table(columns=["row"]).column("row").to_pylist()
dups = sum(c - 1 for c in collections.Counter(rows).values())
assert len(rows) == 300 and dups == 0, (len(rows), dups)
keys = []
for v in ds.versions():
    tx = ds.read_transaction(v["version"])
    props = (tx.transaction_properties or {}) if tx is not None else {}
    if "sinkpoint.job" in props:
        assert props["sinkpoint.job"] == "lance-job", props
        keys.append(int(props["sinkpoint.key"]))
assert keys and keys == sorted(set(keys)), keys
print(f"pylance {lance.__version__}: {len(rows)} rows, {dups} duplicates, sinkpoint keys {keys}")
PY
