#!/usr/bin/env bash
# The Python package's CI step, run by .ci/run: builds the wheel with maturin (abi3, the dev profile, stripped) into
# the shared target dir, installs it into a cached venv holding Daft, Ray, pylance, mypy and ruff
# (requirements-ci.txt), checks the stubs against the installed module (mypy.stubtest), lints and format-checks the
# package, its tests and the example (ruff), and runs pytest over crates/sinkpoint-py/tests. Prints the wheel's build
# time and size.
#
# The dev profile, not release: the wheel links the Lance adapter, and so Lance, DataFusion and Arrow (400+ crates).
# Built in the dev profile with the features `cargo test --workspace` resolves (sinkpoint-py's Cargo.toml asks for
# tokio's), the wheel reuses the Lance that step built in the same target dir: only sinkpoint, sinkpoint-lance,
# pyo3 and sinkpoint-py are compiled here. A release build compiles all of Lance again, optimised (far too slow
# for CI on 2 cores). Wheels for users are built with `maturin build --release`.
#
#   bash crates/sinkpoint-py/ci-python.sh [pytest args...]
#
# Cache: ${SINKPOINT_CACHE:-$HOME/.cache/sinkpoint}/py-venv (+ py-venv.requirements, the file it was built from).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${SINKPOINT_CACHE:-$HOME/.cache/sinkpoint}"
venv="$cache/py-venv"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"
mkdir -p "$cache"

_py_log() { printf 'python: %s\n' "$*" >&2; }

# The venv, (re)built only when requirements-ci.txt changed or it is broken; serialised across runs.
(
    flock -w 1800 9 || { _py_log "timed out waiting for $cache/py-venv.lock"; exit 1; }
    if ! cmp -s "$here/requirements-ci.txt" "$venv.requirements" || ! "$venv/bin/python" -c 'import daft, lance, ray, pytest' 2>/dev/null; then
        _py_log "installing $venv from requirements-ci.txt (a few minutes, once)"
        rm -rf "$venv" "$venv.requirements"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements-ci.txt" > "$cache/py-pip.log" 2>&1 \
            || { cat "$cache/py-pip.log" >&2; _py_log "pip install failed"; exit 1; }
        cp "$here/requirements-ci.txt" "$venv.requirements"
    fi
) 9>"$cache/py-venv.lock"

dist="$(mktemp -d)"
start=$(date +%s)
"$venv/bin/maturin" build --quiet --profile dev --strip --manifest-path "$here/Cargo.toml" --out "$dist" >&2
wheel=$(ls "$dist"/*.whl)
printf 'wheel: %s, %s KiB, built in %ss (dev profile, stripped; warm target dir: only the workspace crates that changed)\n' \
    "$(basename "$wheel")" "$(( $(stat -c %s "$wheel") / 1024 ))" "$(( $(date +%s) - start ))"
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
rm -rf "$dist"

cd "$here"
# The static checks, before the tests (seconds): the hand-written stubs against the compiled module just installed
# (stubtest-allowlist.txt lists the type-only names, each with its reason), then ruff's lint and format check
# (pyproject.toml's [tool.ruff]). The doctests of the stubs and the modules run with the tests (tests/test_docs.py).
"$venv/bin/python" -m mypy.stubtest sinkpoint._sinkpoint --mypy-config-file pyproject.toml \
    --allowlist stubtest-allowlist.txt
"$venv/bin/ruff" check --no-cache python tests examples
"$venv/bin/ruff" format --no-cache --check python tests examples
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
