#!/usr/bin/env bash
# The Lance adapter's CI step (issue 11): the example job's crash matrix on a local Lance dataset, then, when a
# pylance 14.0.2 venv can be had, Lance's own reader checks the dataset. Call it (or source it) from .ci/run:
#
#   bash .ci/lance.sh
#
# Needs protoc on PATH (lance-table's build script; apt-get install -y protobuf-compiler).
# Cache: ${SINKPOINT_CACHE:-$HOME/.cache/sinkpoint}/lance-venv (pylance==14.0.2, pyarrow).
set -euo pipefail

LANCE_CACHE_DIR="${SINKPOINT_CACHE:-$HOME/.cache/sinkpoint}"
LANCE_VENV="$LANCE_CACHE_DIR/lance-venv"
LANCE_JOB_DIR="${LANCE_JOB_DIR:-$(mktemp -d)/lance-job}"
CRASH_EXIT_CODE=86

_lance_log() { printf 'lance: %s\n' "$*" >&2; }

cargo build -p sinkpoint-lance --example lance_job
job() { cargo run -q -p sinkpoint-lance --example lance_job -- --dir "$LANCE_JOB_DIR" --inputs 6 --rows 50 "$@"; }

# Each crash point: a run that dies there (exit 86), then a clean rerun that must read back 0 duplicates, 0 missing.
for point in after-stage after-seal after-begin-commit after-target-commit-before-mark unknown-outcome; do
    _lance_log "crash at $point"
    rc=0
    job --fresh --crash-at "$point" || rc=$?
    [[ $rc -eq $CRASH_EXIT_CODE ]] || { _lance_log "expected exit $CRASH_EXIT_CODE at $point, got $rc"; exit 1; }
    out=$(job)
    printf '%s\n' "$out"
    grep -q 'table: 300 rows, 0 duplicates, 0 missing' <<<"$out" || { _lance_log "bad read-back after $point"; exit 1; }
done
# The fast path: a rerun of a finished job writes nothing.
job | tee /dev/stderr | grep -q 'fast path'

_lance_venv_ok() { [[ -x "$LANCE_VENV/bin/python" ]] && "$LANCE_VENV/bin/python" -c 'import lance, pyarrow; assert lance.__version__ == "14.0.2"' >/dev/null 2>&1; }
if ! _lance_venv_ok; then
    _lance_log "installing pylance 14.0.2 into $LANCE_VENV"
    mkdir -p "$LANCE_CACHE_DIR"
    python3 -m venv "$LANCE_VENV" && "$LANCE_VENV/bin/pip" install -q pylance==14.0.2 pyarrow \
        > "$LANCE_CACHE_DIR/lance-pip.log" 2>&1 || true
fi
if ! _lance_venv_ok; then
    _lance_log "no pylance 14.0.2 venv (see $LANCE_CACHE_DIR/lance-pip.log): skipping the pylance read-back"
    exit 0
fi
"$LANCE_VENV/bin/python" - "$LANCE_JOB_DIR/table.lance" <<'PY'
import collections, sys
import lance
ds = lance.dataset(sys.argv[1])
rows = ds.to_table(columns=["row"]).column("row").to_pylist()
dups = sum(c - 1 for c in collections.Counter(rows).values())
assert len(rows) == 300 and dups == 0, (len(rows), dups)
keys = []
for v in ds.versions():
    tx = ds.checkout_version(v["version"]).read_transaction() if hasattr(ds, "read_transaction") else None
    props = (getattr(tx, "transaction_properties", None) or {}) if tx else {}
    if "sinkpoint.job" in props:
        assert props["sinkpoint.job"] == "lance-job", props
        keys.append(int(props["sinkpoint.key"]))
assert keys == sorted(set(keys)), keys
print(f"pylance: {len(rows)} rows, {dups} duplicates, sinkpoint keys {keys}")
PY
