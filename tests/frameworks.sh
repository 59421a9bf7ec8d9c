#!/usr/bin/env bash
# PyTorch under Tessera, on simgpu (or, with TESSERA_FRAMEWORKS_DRIVER=system, on the
# machine's GPU): the checks of tests/frameworks_torch.py for the current default PyTorch
# wheel (CUDA 13) and for a CUDA 12 build (torch 2.8, CUDA 12.8), each installed into a
# virtual environment of its own under target/ (5.3 and 6.5 GB; CI runs the default wheel).
#
#   tests/frameworks.sh [default|cu12]...     (both when none is named)
#
# TESSERA_FRAMEWORKS_BIN_DIR names a folder with simgpu, controld and libtessera.so already
# built (nothing is built then). Exit status: 0 all passed, 1 a check failed, 2 bad usage,
# 3 a PyTorch build could not be installed (no network, no room) and nothing else failed.
set -euo pipefail
cd "$(dirname "$0")/.."

bins=${TESSERA_FRAMEWORKS_BIN_DIR:-}
if [ -z "$bins" ]; then
    cargo build --release -q -p simgpu -p simgpu-cuda -p simgpu-nvml -p tessera-intercept \
        -p tessera-controld
    bins=target/release
fi

wheels=("$@")
[ ${#wheels[@]} -eq 0 ] && wheels=(default cu12)
status=0
for wheel in "${wheels[@]}"; do
    case "$wheel" in
        default) spec="torch" ;;
        cu12) spec="torch==2.8.*" ;;
        *) echo "unknown wheel $wheel: default or cu12" >&2; exit 2 ;;
    esac
    venv="target/torch-$wheel"
    if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
        start=$(date +%s)
        if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q "$spec"; }; then
            echo "SKIP $wheel: $spec could not be installed into $venv"
            [ $status -eq 0 ] && status=3
            continue
        fi
        echo "installed $spec in $(( $(date +%s) - start )) s"
    fi
    echo "== $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
    python3 tests/frameworks_torch.py "$venv/bin/python" "$bins" || status=1
done
exit $status
