#!/usr/bin/env bash
# One entry point for a fresh machine: sets up .venv from the project's own files, then runs.
#   bash dev.sh run    - the service (API + dashboard + SQLite + a local worker) on http://127.0.0.1:8000
#   bash dev.sh test   - lint and the whole test suite
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv
PY=${PYTHON:-python3}

setup() {
  local extras=$1
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  local stamp="$VENV/.installed-$extras-$(sha256sum pyproject.toml | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    "$VENV/bin/pip" install -q --upgrade pip
    # torch==2.13.0 is the CPU build on this machine's disk; NPU nodes install the torch their torch_npu pins.
    "$VENV/bin/pip" install -q -e ".[$extras]"
    touch "$stamp"
  fi
}

# One line on how to get isolation where bubblewrap is missing (serve then runs uploads unsandboxed, with a warning).
isolation_hint() {
  if ! command -v bwrap >/dev/null 2>&1; then
    echo "no sandbox: uploaded models run unisolated until bubblewrap is installed (Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: sudo dnf install bubblewrap); with ADVISOR_ISOLATION=bubblewrap the worker refuses to start without it" >&2
  fi
}

cmd=${1:-run}
shift || true
case "$cmd" in
  run)
    setup torch,export,quant
    isolation_hint
    mkdir -p data
    "$VENV/bin/npu-advisor" example mlp data/example-mlp.pt2 >/dev/null
    port=8000
    previous=""
    for argument in "$@"; do  # the hint names the port serve will use (--port N or --port=N)
      case "$previous" in --port) port=$argument ;; esac
      case "$argument" in --port=*) port=${argument#--port=} ;; esac
      previous=$argument
    done
    echo "example model to try: data/example-mlp.pt2 (upload it at /upload, or: npu-advisor analyze data/example-mlp.pt2 --server http://127.0.0.1:$port)"
    exec "$VENV/bin/npu-advisor" serve "$@"
    ;;
  test)
    # every optional extra the product ships (openvino, quant), so no shipped path is skipped
    setup torch,export,test,quant,openvino
    # Inductor's trusted precompiled header for sandboxed jobs (advisor.harness.inductor_headers), built once per
    # machine and venv (~20 s of one core): started now, it overlaps the lint and pytest's start instead of
    # competing with the collection; tests/conftest.py's own start then waits for this one's lock, or finds it built.
    "$VENV/bin/python" -m advisor.harness.inductor_headers >/dev/null 2>&1 &
    "$VENV/bin/ruff" check .
    "$VENV/bin/ruff" format --check .
    # several workers (pytest-xdist): compiles, sandboxed children and servers overlap; `-n 0` runs it serially.
    # Four workers' children on two cores: OpenMP threads that spin while they wait (libgomp's default, when a
    # process has no more threads than cores) burn the time slices the other workers' threads need; passive ones
    # sleep. The children inherit it (advisor.harness.sandbox keeps OMP_*); an analysis outside the tests does not.
    export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
    # The project's bytecode, written once (under 1 s): the ~300 interpreters the suite starts (servers, workers,
    # sandboxed children that see the checkout read-only) read it instead of each compiling the modules it imports.
    # Written also where PYTHONDONTWRITEBYTECODE is set, and pytest then keeps its rewritten test modules too (each
    # worker otherwise rewrites all of them, ~5 CPU-s, on every run): both land in the ignored __pycache__ folders.
    "$VENV/bin/python" -m compileall -q -j 0 advisor app workers tests >/dev/null
    unset PYTHONDONTWRITEBYTECODE
    # the 30 slowest tests at the end: where a CI run's time went (its machine is not this one)
    exec "$VENV/bin/python" -m pytest -n "${ADVISOR_TEST_WORKERS:-4}" --dist worksteal --durations=30 "$@"
    ;;
  *)
    echo "usage: bash dev.sh run|test [args]" >&2
    exit 2
    ;;
esac
