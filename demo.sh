#!/usr/bin/env bash
# Builds Tessera and shows a simulated GPU (simgpu) shared by real processes: one verifies a
# copy-and-fill round trip, then two trainers contend for the engine while `simgpu stat`
# shows how they share it.
set -euo pipefail
cd "$(dirname "$0")"

cargo build --release --workspace
bin=target/release

state="$(mktemp "${TMPDIR:-/tmp}/simgpu-demo.XXXXXX")"
trap 'rm -f "$state" "$state".a "$state".b' EXIT
export SIMGPU_STATE="$state" SIMGPU_DEVICES="${SIMGPU_DEVICES:-A100-80GB}"
export LD_LIBRARY_PATH="$("$bin/simgpu" lib-dir)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$bin/simgpu" reset >/dev/null

echo
echo "== one process: copy to the device, fill kernel, copy back, verify"
"$bin/gpuload" memcheck

echo
echo "== two trainers (2 ms kernels) share the GPU for 4 s"
"$bin/gpuload" train --kernel-ms 2 --seconds 4 >"$state.a" &
"$bin/gpuload" train --kernel-ms 2 --seconds 4 >"$state.b" &
sleep 2
"$bin/simgpu" stat
wait
echo
echo "trainer A: $(cat "$state.a")"
echo "trainer B: $(cat "$state.b")"
