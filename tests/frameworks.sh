#!/usr/bin/env bash
# PyTorch under Tessera, on simgpu (or, with TESSERA_FRAMEWORKS_DRIVER=system, on the
# machine's GPU): the checks of tests/frameworks_torch.py for each PyTorch build named:
#
#   tests/frameworks.sh [default|cu12|system]...     (default and cu12 when none is named)
#
#   default  the current default PyTorch wheel (CUDA 13), in a virtual environment under
#            target/torch-default (5.3 GB; CI runs it)
#   cu12     a CUDA 12 build (torch 2.8, CUDA 12.8), under target/torch-cu12 (6.5 GB)
#   system   the PyTorch that python3 (or TESSERA_FRAMEWORKS_PYTHON) already has; never
#            installs anything
#
# A virtual environment that is missing is made and its wheel installed, unless
# TESSERA_FRAMEWORKS_OFFLINE=1 (no network: it is reported as not installed).
# TESSERA_FRAMEWORKS_BIN_DIR names a folder with controld and libtessera.so (and simgpu,
# where it runs on simgpu) already built; nothing is built then.
#
# Each build gets a line `RESULT <build> <pass|fail|skip> <python>: <what>`, every check a
# PASS, FAIL or INFO line. Exit status: 0 all passed, 1 a check failed, 2 bad usage, 3 a
# build could not be run (not installed, no network, no room) and nothing else failed.
set -euo pipefail
cd "$(dirname "$0")/.."

bins=${TESSERA_FRAMEWORKS_BIN_DIR:-}
if [ -z "$bins" ]; then
    packages=(-p tessera-intercept -p tessera-controld)
    if [ "${TESSERA_FRAMEWORKS_DRIVER:-}" != system ]; then
        packages+=(-p simgpu -p simgpu-cuda -p simgpu-nvml)
    fi
    cargo build --release -q "${packages[@]}"
    bins=target/release
fi

wheels=("$@")
[ ${#wheels[@]} -eq 0 ] && wheels=(default cu12)
status=0
skip() {
    echo "RESULT $1 skip $2"
    [ $status -eq 0 ] && status=3
    return 0
}
for wheel in "${wheels[@]}"; do
    case "$wheel" in
        default) spec="torch" ;;
        cu12) spec="torch==2.8.*" ;;
        system) spec="" ;;
        *) echo "unknown build $wheel: default, cu12 or system" >&2; exit 2 ;;
    esac
    if [ "$wheel" = system ]; then
        python=${TESSERA_FRAMEWORKS_PYTHON:-python3}
        if ! command -v "$python" >/dev/null 2>&1; then
            skip "$wheel" "$python: not found"
            continue
        fi
        python=$(command -v "$python")
        if ! "$python" -c 'import torch' 2>/dev/null; then
            skip "$wheel" "$python: no torch module"
            continue
        fi
    else
        venv="target/torch-$wheel"
        python="$venv/bin/python"
        if ! "$python" -c 'import torch' 2>/dev/null; then
            if [ "${TESSERA_FRAMEWORKS_OFFLINE:-}" = 1 ]; then
                skip "$wheel" "$venv: not installed (offline: nothing is downloaded)"
                continue
            fi
            start=$(date +%s)
            if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q "$spec"; }; then
                skip "$wheel" "$venv: $spec could not be installed"
                continue
            fi
            echo "installed $spec in $(( $(date +%s) - start )) s"
        fi
    fi
    version=$("$python" -c 'import torch; print(torch.__version__)')
    echo "== $wheel: $python, torch $version"
    if python3 tests/frameworks_torch.py "$python" "$bins"; then
        echo "RESULT $wheel pass $python: torch $version"
    else
        echo "RESULT $wheel fail $python: torch $version"
        status=1
    fi
done
exit $status
