# shellcheck shell=bash
# Source this from .ci/run (bash, `set -euo pipefail` friendly) to get a local S3-API server (moto).
#
#   source .ci/moto.sh          # ensures a cached venv with moto[server] (installs only if missing/broken)
#   moto_start                  # free port on 127.0.0.1, waits until it answers, exports:
#                               #   SINKPOINT_S3_ENDPOINT=http://127.0.0.1:PORT
#                               #   AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
#                               # and chains an EXIT trap that stops the server.
#   moto_create_bucket NAME     # creates a bucket (idempotent); moto needs buckets to exist before use
#   moto_stop                   # stops the server (also run by the EXIT trap)
#
# Cache: ${SINKPOINT_CACHE:-$HOME/.cache/sinkpoint}/moto-venv (venv), moto-*.log (server/pip logs).

MOTO_CACHE_DIR="${SINKPOINT_CACHE:-$HOME/.cache/sinkpoint}"
MOTO_VENV="$MOTO_CACHE_DIR/moto-venv"

_moto_log() { printf 'moto: %s\n' "$*" >&2; }

# True if the venv exists and its moto_server actually runs.
_moto_venv_ok() {
    [[ -x "$MOTO_VENV/bin/python" && -x "$MOTO_VENV/bin/moto_server" ]] || return 1
    "$MOTO_VENV/bin/python" -c 'import moto, moto.server, flask, werkzeug' >/dev/null 2>&1 || return 1
    "$MOTO_VENV/bin/moto_server" --help >/dev/null 2>&1 || return 1
}

_moto_pick_python() {
    local py
    for py in "${SINKPOINT_PYTHON:-}" python3 /usr/bin/python3 python; do
        [[ -n "$py" ]] || continue
        command -v "$py" >/dev/null 2>&1 || continue
        "$py" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 9))' >/dev/null 2>&1 || continue
        printf '%s\n' "$py"
        return 0
    done
    return 1
}

_moto_install() {
    local py pip_log start
    mkdir -p "$MOTO_CACHE_DIR"
    pip_log="$MOTO_CACHE_DIR/moto-pip.log"
    if ! py="$(_moto_pick_python)"; then
        _moto_log "no usable python3 with venv/ensurepip found (set SINKPOINT_PYTHON, or apt-get install python3-venv)"
        return 1
    fi
    _moto_log "installing moto[server] into $MOTO_VENV (using $py) ..."
    start=$SECONDS
    rm -rf "$MOTO_VENV"
    if ! { "$py" -m venv "$MOTO_VENV" &&
        PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
            "$MOTO_VENV/bin/python" -m pip install --quiet 'moto[server]'; } >"$pip_log" 2>&1; then
        _moto_log "install failed; log ($pip_log):"
        cat "$pip_log" >&2
        rm -rf "$MOTO_VENV"
        return 1
    fi
    if ! _moto_venv_ok; then
        _moto_log "installed, but $MOTO_VENV/bin/moto_server does not run; log ($pip_log):"
        cat "$pip_log" >&2
        "$MOTO_VENV/bin/moto_server" --help >&2 || true
        rm -rf "$MOTO_VENV"
        return 1
    fi
    _moto_log "installed $("$MOTO_VENV/bin/python" -c 'import moto; print("moto", moto.__version__)') in $((SECONDS - start))s"
}

# Create the venv only if it is missing or broken. Serialised with flock so concurrent runs don't race.
_moto_ensure_venv() {
    _moto_venv_ok && return 0
    mkdir -p "$MOTO_CACHE_DIR"
    if command -v flock >/dev/null 2>&1; then
        (
            flock -w 900 9 || { _moto_log "timed out waiting for $MOTO_CACHE_DIR/moto-venv.lock"; exit 1; }
            _moto_venv_ok || _moto_install
        ) 9>"$MOTO_CACHE_DIR/moto-venv.lock"
    else
        _moto_install
    fi
}

# HTTP helper: prints the status code (000 if no answer), response body to BODYFILE (default: dropped).
# Uses curl, falls back to the venv's python.
_moto_http() { # METHOD URL [BODYFILE]
    local out="${3:-/dev/null}"
    if command -v curl >/dev/null 2>&1; then
        curl -s -o "$out" -w '%{http_code}' -m 5 -X "$1" "$2" 2>/dev/null || true
    else
        "$MOTO_VENV/bin/python" - "$1" "$2" "$out" <<'PY' 2>/dev/null || printf '000'
import sys, urllib.request, urllib.error
method, url, out = sys.argv[1:4]
req = urllib.request.Request(url, method=method, data=b"" if method == "PUT" else None)
try:
    r = urllib.request.urlopen(req, timeout=5)
except urllib.error.HTTPError as e:
    r = e
except Exception:
    print("000", end=""); sys.exit()
open(out, "wb").write(r.read()); print(r.status if hasattr(r, "status") else r.code, end="")
PY
    fi
}

_moto_free_port() {
    "$MOTO_VENV/bin/python" -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

_moto_register_trap() {
    [[ "${_MOTO_TRAP_SET:-}" == "$BASHPID" ]] && return 0
    local prev
    prev="$(trap -p EXIT)"          # "trap -- 'CMD' EXIT" or empty
    prev="${prev#"trap -- "}"
    prev="${prev%" EXIT"}"
    [[ -n "$prev" ]] && eval "prev=$prev"  # unquote
    # Stop moto first (a previous trap may call `exit`), then restore $? for the previous trap
    # (`&& :` keeps a non-zero status from tripping `set -e` inside the trap).
    # shellcheck disable=SC2064
    trap -- "_moto_rc=\$?; moto_stop; (exit \$_moto_rc) && :; ${prev:-:}" EXIT
    _MOTO_TRAP_SET="$BASHPID"
}

moto_start() {
    _moto_ensure_venv || return 1
    # Idempotent: already running and answering -> just re-export.
    if [[ -n "${MOTO_PID:-}" && -n "${MOTO_PORT:-}" ]] && kill -0 "$MOTO_PID" 2>/dev/null &&
        [[ "$(_moto_http GET "http://127.0.0.1:$MOTO_PORT/")" != 000 ]]; then
        _moto_export
        return 0
    fi
    find "$MOTO_CACHE_DIR" -maxdepth 1 -name 'moto-server-*.log' -mtime +2 -delete 2>/dev/null || true
    local attempt port pid log deadline
    for attempt in 1 2 3; do
        port="$(_moto_free_port)" || { _moto_log "could not pick a free port"; return 1; }
        log="$MOTO_CACHE_DIR/moto-server-$port.log"
        "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$port" </dev/null >"$log" 2>&1 &
        pid=$!
        MOTO_PID=$pid MOTO_PORT=$port MOTO_LOG=$log
        _moto_register_trap
        deadline=$((SECONDS + 30))
        while ((SECONDS < deadline)); do
            if ! kill -0 "$pid" 2>/dev/null; then
                break
            fi
            if [[ "$(_moto_http GET "http://127.0.0.1:$port/")" != 000 ]]; then
                _moto_export
                _moto_log "S3 endpoint $SINKPOINT_S3_ENDPOINT (pid $pid, log $log)"
                return 0
            fi
            sleep 0.2
        done
        if kill -0 "$pid" 2>/dev/null; then
            _moto_log "moto_server (pid $pid) did not answer on port $port within 30s; log ($log):"
            cat "$log" >&2
            moto_stop
            return 1
        fi
        # Died: retry on another port only if it lost a port race.
        if grep -qi 'address already in use' "$log" 2>/dev/null && ((attempt < 3)); then
            unset MOTO_PID MOTO_PORT
            continue
        fi
        _moto_log "moto_server exited during startup; log ($log):"
        cat "$log" >&2
        unset MOTO_PID MOTO_PORT
        return 1
    done
    return 1
}

_moto_export() {
    export SINKPOINT_S3_ENDPOINT="http://127.0.0.1:$MOTO_PORT"
    export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
}

moto_stop() {
    local pid="${MOTO_PID:-}" i
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for i in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    unset MOTO_PID MOTO_PORT SINKPOINT_S3_ENDPOINT
    return 0
}

# Create bucket NAME on the running moto: an unsigned path-style `PUT /NAME` (moto doesn't check
# signatures; it rejects names outside 3-63 chars (400 InvalidBucketName) but, unlike S3, accepts
# uppercase/underscores: stick to [a-z0-9.-]). Idempotent: moto answers 200 to a repeat PUT.
moto_create_bucket() {
    local name="${1:?usage: moto_create_bucket NAME}" code body
    [[ -n "${SINKPOINT_S3_ENDPOINT:-}" ]] || { _moto_log "moto_create_bucket: moto is not started"; return 1; }
    body="$MOTO_CACHE_DIR/moto-bucket-$$.out"
    code="$(_moto_http PUT "$SINKPOINT_S3_ENDPOINT/$name" "$body")"
    case "$code" in
        200 | 409) rm -f "$body"; return 0 ;; # 409 = BucketAlreadyOwnedByYou (other S3 flavours)
        *)
            _moto_log "creating bucket '$name' failed: HTTP $code: $(cat "$body" 2>/dev/null)"
            rm -f "$body"
            return 1
            ;;
    esac
}

_moto_ensure_venv
