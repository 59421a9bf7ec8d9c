#!/usr/bin/env bash
# Tessera's measurements on a real NVIDIA GPU with the real driver, into a folder:
#
#   bench/gpu-check.sh OUTDIR
#
# 1. what simgpu assumes: the host cost of cuLaunchKernel, cuEventRecord and cuEventQuery,
#    and the time slice between two processes that both saturate the GPU (gpuload probe,
#    gpuload slice);
# 2. what libtessera.so adds to each call: the same probe bare, preloaded with no limit, and
#    preloaded with a memory limit;
# 3. PyTorch on the real driver: tests/frameworks.sh with TESSERA_FRAMEWORKS_DRIVER=system
#    (under a 2 GiB cap and under `controld exec --memory 2GiB`, and a loop of tiny ops bare
#    and under `controld exec --compute burst:100`) with the PyTorch that python3 already
#    has, and with the builds already installed under target/ (torch-default, torch-cu12);
#    nothing is downloaded;
# 4. the isolation scenarios of tessera-bench on the real driver (TESSERA_BENCH_DRIVER=system:
#    ground truth from the workloads' own progress, memory from NVML), which need no simgpu;
# 5. the GPU's own time slices as a lever: an online process beside an offline one whose
#    channel groups run the driver's slices, then 100 µs (libtessera.so with
#    TESSERA_TIMESLICE, as root and, where one can be taken, as an unprivileged user), then
#    100 µs with the online process's groups at 16 ms (what controld asks of an online
#    container with no online neighbour), with gpuload on both sides and with PyTorch on
#    both sides where python3 has it.
#
# It writes OUTDIR/report.md (every failing check named), OUTDIR/results.json and the raw
# output of every step, and is sized to finish within 8 minutes, build included: each
# scenario runs only while the budget has room for it. Without a GPU it says so in one line
# and exits 0.
#
# Settings (environment):
#   TESSERA_GPU_CHECK_SECONDS      main phase of each scenario, s (default 5)
#   TESSERA_GPU_CHECK_SCENARIOS    scenarios to run, space-separated (default: all of them)
#   TESSERA_GPU_CHECK_BUDGET       the whole run's budget, s (default 480)
#   TESSERA_GPU_CHECK_QUICK=1      short probe and slice phases
#   TESSERA_GPU_CHECK_BIN_DIR      use the programs built there; build nothing
#   TESSERA_GPU_CHECK_FRAMEWORKS_SECONDS  the most step 3 may take, s (default 240; 0 skips it)
#   TESSERA_FRAMEWORKS_PYTHON      the python whose PyTorch step 3 runs (default python3)
#   TESSERA_GPU_CHECK_DRIVER_DIR   take libcuda.so.1 and libnvidia-ml.so.1 from this folder
#                                  as if it were the system driver (`simgpu lib-dir` runs the
#                                  whole check on simgpu, with a node of its own)
#
# Exit status: 0 when the report is written (checks that failed are results, in the report)
# or when there is no GPU; 1 when a step could not run; 2 on bad usage.

set -euo pipefail

usage() {
    echo "usage: bench/gpu-check.sh OUTDIR"
    sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'
}

case "${1:-}" in
-h | --help)
    usage
    exit 0
    ;;
"" | -*)
    usage >&2
    exit 2
    ;;
esac
if [[ $# -ne 1 ]]; then
    usage >&2
    exit 2
fi

out=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
started=$(date +%s)
budget=${TESSERA_GPU_CHECK_BUDGET:-480}
seconds=${TESSERA_GPU_CHECK_SECONDS:-5}
quick=${TESSERA_GPU_CHECK_QUICK:-0}
driver_dir=${TESSERA_GPU_CHECK_DRIVER_DIR:-}
bin_dir=${TESSERA_GPU_CHECK_BIN_DIR:-}

say() { printf 'gpu-check: %s\n' "$*" >&2; }

# What it measures, for the line printed where it cannot.
WOULD="the host cost of cuLaunchKernel, cuEventRecord and cuEventQuery, the time slice \
between two processes saturating the GPU, what libtessera.so adds to each call, PyTorch under \
a cap, and the isolation scenarios with the real driver"

no_gpu() {
    printf 'gpu-check: no NVIDIA GPU found (%s); nothing measured. On a GPU it measures %s.\n' \
        "$1" "$WOULD"
    exit 0
}

elapsed() { echo $(($(date +%s) - started)); }

# --- Is there a GPU? ------------------------------------------------------------------------

if [[ -n $driver_dir ]]; then
    for lib in libcuda.so.1 libnvidia-ml.so.1; do
        if [[ ! -e $driver_dir/$lib ]]; then
            say "TESSERA_GPU_CHECK_DRIVER_DIR=$driver_dir has no $lib"
            exit 1
        fi
    done
    driver_label="the driver in $driver_dir (TESSERA_GPU_CHECK_DRIVER_DIR)"
else
    if command -v nvidia-smi >/dev/null 2>&1; then
        if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
            no_gpu "nvidia-smi -L lists none"
        fi
    else
        if [[ ! -e /dev/nvidiactl ]]; then
            no_gpu "no nvidia-smi and no /dev/nvidiactl"
        fi
        ldconfig_bin=$(command -v ldconfig || echo /sbin/ldconfig)
        if ! "$ldconfig_bin" -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
            no_gpu "the dynamic linker knows no libcuda.so.1"
        fi
    fi
    driver_label="the system driver"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$out/work
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

if [[ -n $driver_dir ]]; then
    export LD_LIBRARY_PATH="$driver_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # A node of its own, so that nothing else running on the simulated node is measured.
    export SIMGPU_STATE=$work/simgpu.state
fi
# Nothing of an outer Tessera applies to the measurements.
unset LD_PRELOAD TESSERA_REGION TESSERA_MEMORY_LIMIT TESSERA_COMPUTE TESSERA_TIMESLICE

# --- Build ---------------------------------------------------------------------------------

if [[ -n $bin_dir ]]; then
    bins=$(cd "$bin_dir" && pwd)
    build_s=0
else
    if ! command -v cargo >/dev/null 2>&1; then
        say "cargo is needed to build Tessera (https://rustup.rs)"
        exit 1
    fi
    say "building: cargo build --release --workspace (log: $out/build.log)"
    if ! (cd "$root" && cargo build --release --workspace) >"$out/build.log" 2>&1; then
        tail -n 20 "$out/build.log" >&2
        say "the build failed; see $out/build.log"
        exit 1
    fi
    bins=$root/target/release
    build_s=$(elapsed)
fi
for program in gpuload tessera-bench controld libtessera.so; do
    if [[ ! -e $bins/$program ]]; then
        say "$bins has no $program"
        exit 1
    fi
done
gpuload=$bins/gpuload

# The driver loads and sees a device, or there is no usable GPU after all.
if ! "$gpuload" info >"$out/info.json" 2>"$out/info.err"; then
    if [[ -n $driver_dir ]]; then
        say "gpuload info failed: $(head -n 1 "$out/info.err")"
        exit 1
    fi
    why=$(head -n 1 "$out/info.err")
    rm -f "$out/info.json" "$out/info.err"
    no_gpu "the driver did not open a device: $why"
fi
if command -v nvidia-smi >/dev/null 2>&1 && [[ -z $driver_dir ]]; then
    nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
fi

# --- Plan ----------------------------------------------------------------------------------

# The probes run in rounds, bare and preloaded in turn, so that a drift of the machine
# touches all three alike; the report takes the median over rounds.
if [[ $quick == 1 ]]; then
    probe_args=(--calls 50 --batches 10)
    probe_rounds=1
    # Kernels of 0.2 ms, not the 50 µs of a full run: a quick run is a smoke test, often on
    # a loaded machine, where simgpu (whose executor threads do host work for every kernel)
    # falls behind 50 µs kernels and reads the host's delays as longer slices.
    slice_args=(--seconds 1 --warmup 0.5 --kernel-ms 0.2)
    probe_est=2
    slice_est=3
else
    probe_args=(--calls 100 --batches 50)
    probe_rounds=3
    slice_args=(--seconds 3 --warmup 1)
    probe_est=5
    slice_est=6
fi
if [[ -n ${TESSERA_GPU_CHECK_SCENARIOS:-} ]]; then
    read -r -a scenarios <<<"$TESSERA_GPU_CHECK_SCENARIOS"
else
    mapfile -t scenarios < <("$bins/tessera-bench" scenario --list | awk '{print $1}')
fi

# About how long a scenario takes, from its main phase S (runs with Tessera and without,
# the daemon's start, warm-ups): online-offline runs ten phases, overhead on a real driver
# sixteen (its two sides, four rounds each, run in turn), shapes two for each of its seven
# launch shapes, mixed-deep two for each of its two
# sets, demo-mix four, the others two or three.
scenario_estimate() {
    local phase=${seconds%.*}
    phase=${phase:-1}
    case $1 in
    online-offline) echo $((10 * phase + 10)) ;;
    shapes) echo $((7 * (2 * phase + 4))) ;;
    mixed-deep) echo $((2 * (2 * phase + 4))) ;;
    demo-mix) echo $((4 * phase + 12)) ;;
    overhead) echo $((16 * phase + 12)) ;;
    memory-caps) echo $((3 * phase + 13)) ;;
    *) echo $((2 * phase + 10)) ;;
    esac
}
planned=$((3 * probe_rounds * probe_est + slice_est))
for s in "${scenarios[@]}"; do
    planned=$((planned + $(scenario_estimate "$s")))
done
say "budget: ${budget} s in all; build took ${build_s} s; planned: probe ${probe_rounds} × 3 × ${probe_est} s, \
slice ${slice_est} s, ${#scenarios[@]} scenarios at --seconds $seconds ≈ ${planned} s"
if ((build_s + planned > budget)); then
    say "the plan is longer than what is left; scenarios that no longer fit are skipped"
fi

broken=0

# run NAME TIMEOUT CMD...: stdout appended to OUTDIR/NAME.json (one JSON line per run),
# stderr to OUTDIR/NAME.err.
run() {
    local name=$1 limit=$2
    shift 2
    say "$name"
    if ! timeout --kill-after=10 "$limit" "$@" >>"$out/$name.json" 2>>"$out/$name.err"; then
        say "$name failed; see $out/$name.err"
        broken=1
    fi
}

# --- 1 and 2: host costs, bare and under libtessera.so --------------------------------------

total=$(sed -n 's/.*"total":\([0-9][0-9]*\).*/\1/p' "$out/info.json")
limit_mib=$((${total:-0} / 2 / 1048576))
rm -f "$out"/probe-*.json "$out"/probe-*.err "$out/slice.json" "$out/slice.err"
for ((round = 1; round <= probe_rounds; round++)); do
    run probe-bare 120 "$gpuload" probe "${probe_args[@]}"
    run probe-tessera 120 env LD_PRELOAD="$bins/libtessera.so" "$gpuload" probe "${probe_args[@]}"
    run probe-tessera-limit 120 env LD_PRELOAD="$bins/libtessera.so" \
        TESSERA_MEMORY_LIMIT="${limit_mib}MiB" "$gpuload" probe "${probe_args[@]}"
done

# --- 1: the time slice ---------------------------------------------------------------------

run slice 120 "$gpuload" slice "${slice_args[@]}"

# --- 5: the GPU's own time slices as a lever -------------------------------------------------

# The H200 experiment of docs/compute-sharing.md: an offline process of 2 ms kernels, 8 in
# flight, beside an online one sending requests of ten 0.5 ms kernels 20 times a second;
# the online process alone, beside the offline one bare, and beside it under libtessera.so
# with its channel groups at 100 µs (its log says what the driver answered, and what each
# control took), and so again with the online process's groups at 16 ms, which no offline
# slice should cut a request of. As an unprivileged user where this runs as root and
# setpriv is at hand: the programs are copied where that user may run them.
if [[ $quick == 1 ]]; then lever_s=3; else lever_s=6; fi
lever_online=(infer --rate 20 --kernels 10 --kernel-ms 0.5 --seconds "$lever_s")
lever_offline=(train --kernel-ms 2 --window 8 --seconds $((lever_s + 3)))
rm -f "$out"/lever-*.json "$out"/lever-*.err
# lever NAME PREFIX...: the offline side run under PREFIX, the online side beside it under
# lever_online_prefix (bare while that is empty).
lever_online_prefix=()
lever() {
    local name=$1
    shift
    say "lever-$name"
    "$@" "$gpuload" "${lever_offline[@]}" >"$out/lever-$name-offline.json" \
        2>"$out/lever-$name-offline.err" &
    local offline=$!
    sleep 1.5
    timeout --kill-after=10 60 "${lever_online_prefix[@]}" "$gpuload" "${lever_online[@]}" \
        >"$out/lever-$name-online.json" 2>"$out/lever-$name-online.err" || broken=1
    wait "$offline" || broken=1
}
lever_env=(env LD_PRELOAD="$bins/libtessera.so" TESSERA_TIMESLICE=100us TESSERA_LOG=debug)
run lever-alone-online 60 "$gpuload" "${lever_online[@]}"
lever bare
lever root "${lever_env[@]}"
lever_online_prefix=(env LD_PRELOAD="$bins/libtessera.so" TESSERA_TIMESLICE=16ms TESSERA_LOG=debug)
lever both "${lever_env[@]}"
if [[ -z $driver_dir && $(id -u) == 0 ]] && command -v setpriv >/dev/null 2>&1; then
    shared=$(mktemp -d /tmp/tessera-lever.XXXXXX)
    cp "$gpuload" "$bins/libtessera.so" "$shared/"
    chmod 755 "$shared" "$shared/gpuload" "$shared/libtessera.so"
    lever user setpriv --reuid=65534 --regid=65534 --clear-groups \
        env LD_PRELOAD="$shared/libtessera.so" TESSERA_TIMESLICE=100us TESSERA_LOG=debug \
        HOME=/tmp
    rm -rf "$shared"
fi
# PyTorch on both sides, where python3 has it and sees the GPU.
torch_pair=$root/bench/torch_pair.py
if [[ -z $driver_dir ]] && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
    >/dev/null 2>&1; then
    torch_lever() {
        local name=$1
        shift
        say "lever-torch-$name"
        "$@" python3 "$torch_pair" train $((lever_s + 6)) >"$out/lever-torch-$name-offline.json" \
            2>"$out/lever-torch-$name-offline.err" &
        local offline=$!
        sleep 5
        timeout --kill-after=10 90 "${lever_online_prefix[@]}" python3 "$torch_pair" serve \
            "$lever_s" >"$out/lever-torch-$name-online.json" \
            2>"$out/lever-torch-$name-online.err" || broken=1
        wait "$offline" || broken=1
    }
    run lever-torch-alone-online 90 python3 "$torch_pair" serve "$lever_s"
    lever_online_prefix=()
    torch_lever bare env
    torch_lever root "${lever_env[@]}"
    lever_online_prefix=(env LD_PRELOAD="$bins/libtessera.so" TESSERA_TIMESLICE=16ms)
    torch_lever both "${lever_env[@]}"
else
    say "lever with PyTorch: skipped (no PyTorch that sees the GPU, or a driver folder)"
fi

# --- 3: PyTorch on the real driver ----------------------------------------------------------

frameworks_limit=${TESSERA_GPU_CHECK_FRAMEWORKS_SECONDS:-240}
left=$((budget - $(elapsed)))
((frameworks_limit > left)) && frameworks_limit=$left
frameworks=skipped
frameworks_took=0
if ((frameworks_limit < 30)); then
    say "frameworks: skipped, ${frameworks_limit} s for it"
else
    say "frameworks: tests/frameworks.sh on the real driver (at most ${frameworks_limit} s)"
    t0=$(date +%s)
    status=0
    TESSERA_FRAMEWORKS_DRIVER=system TESSERA_FRAMEWORKS_OFFLINE=1 \
        TESSERA_FRAMEWORKS_BIN_DIR=$bins \
        timeout --kill-after=10 "$frameworks_limit" "$root/tests/frameworks.sh" \
        system default cu12 >"$out/frameworks.log" 2>&1 || status=$?
    frameworks_took=$(($(date +%s) - t0))
    # Each build has its own RESULT line; the step passes when one ran and none failed.
    ran=$(grep -cE '^RESULT [^ ]+ (pass|fail) ' "$out/frameworks.log" || true)
    case $status in
    0 | 3) if ((ran > 0)); then frameworks=pass; else frameworks="none installed"; fi ;;
    1) frameworks=fail ;;
    124 | 137) frameworks=timeout ;;
    *) frameworks=error ;;
    esac
    say "frameworks: $frameworks in ${frameworks_took} s"
fi

# --- 4: the scenarios on the real driver ----------------------------------------------------

: >"$out/scenarios.tsv"
for s in "${scenarios[@]}"; do
    estimate=$(scenario_estimate "$s")
    left=$((budget - $(elapsed)))
    if ((left < estimate)); then
        say "scenario $s: skipped, ${left} s left of the budget and it needs about ${estimate} s"
        printf '%s\tskipped\t0\t%s\n' "$s" "$estimate" >>"$out/scenarios.tsv"
        continue
    fi
    say "scenario $s (about ${estimate} s; ${left} s left)"
    t0=$(date +%s)
    status=0
    TESSERA_BENCH_DRIVER=system timeout --kill-after=10 "$left" \
        "$bins/tessera-bench" scenario "$s" --seconds "$seconds" \
        >"$out/scenario-$s.md" 2>"$out/scenario-$s.log" || status=$?
    took=$(($(date +%s) - t0))
    case $status in
    0) verdict=pass ;;
    1) verdict=fail ;;
    124 | 137) verdict=timeout broken=1 ;;
    *) verdict=error broken=1 ;;
    esac
    say "scenario $s: $verdict in ${took} s"
    printf '%s\t%s\t%s\t%s\n' "$s" "$verdict" "$took" "$estimate" >>"$out/scenarios.tsv"
done

# --- The report ----------------------------------------------------------------------------

commit=unknown
if command -v git >/dev/null 2>&1 && git -C "$root" rev-parse --short HEAD >/dev/null 2>&1; then
    commit=$(git -C "$root" rev-parse --short HEAD)
    if [[ -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
        commit="$commit+changes"
    fi
fi
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
command_line="bench/gpu-check.sh $1"
for v in TESSERA_GPU_CHECK_SECONDS TESSERA_GPU_CHECK_SCENARIOS TESSERA_GPU_CHECK_QUICK \
    TESSERA_GPU_CHECK_BUDGET TESSERA_GPU_CHECK_DRIVER_DIR TESSERA_GPU_CHECK_BIN_DIR; do
    if [[ -n ${!v:-} ]]; then
        command_line="$v=${!v} $command_line"
    fi
done

if ! command -v python3 >/dev/null 2>&1; then
    say "python3 is needed to write report.md; the raw output is in $out"
    exit 1
fi
GC_OUT=$out GC_COMMIT=$commit GC_CPU="$cpu ($(nproc) CPUs)" GC_KERNEL="$(uname -sr)" \
    GC_DRIVER="$driver_label" GC_COMMAND="$command_line" GC_TOOK="$(elapsed)" \
    GC_BUILD="$build_s" GC_SECONDS="$seconds" GC_LIMIT="${limit_mib}MiB" GC_BUDGET="$budget" \
    GC_FRAMEWORKS="$frameworks" GC_FRAMEWORKS_TOOK="$frameworks_took" \
    python3 - <<'PY'
import glob, json, os, re

out = os.environ["GC_OUT"]


def load_all(name):
    """Every JSON line of OUTDIR/NAME.json."""
    try:
        with open(os.path.join(out, name + ".json")) as f:
            return [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        return []


def log_lines(name):
    """The lines of OUTDIR/NAME, or none."""
    try:
        with open(os.path.join(out, name)) as f:
            return [l.rstrip("\n") for l in f]
    except OSError:
        return []


def load(name):
    runs = load_all(name)
    return runs[-1] if runs else None


def median(values):
    v = sorted(values)
    n = len(v)
    return None if n == 0 else (v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2)


info = load("info") or {}
probe_rounds = {k: load_all(k) for k in ("probe-bare", "probe-tessera", "probe-tessera-limit")}
slice_ = load("slice")
scenarios = []
with open(os.path.join(out, "scenarios.tsv")) as f:
    for line in f:
        name, verdict, took, estimate = line.rstrip("\n").split("\t")
        table = os.path.join(out, "scenario-%s.md" % name)
        text = open(table).read() if os.path.exists(table) else ""
        scenarios.append({"name": name, "result": verdict, "took_s": int(took),
                          "estimate_s": int(estimate), "table": text})
cuda = info.get("driver_version")
machine = {
    "gpu": info.get("name"),
    "gpu_memory_bytes": info.get("total"),
    "driver": info.get("nvml_driver_version"),
    "cuda_driver_api": "%d.%d" % (cuda // 1000, cuda % 1000 // 10) if cuda else None,
    "driver_source": os.environ["GC_DRIVER"],
    "cpu": os.environ["GC_CPU"],
    "kernel": os.environ["GC_KERNEL"],
}
results = {
    "command": os.environ["GC_COMMAND"], "commit": os.environ["GC_COMMIT"],
    "machine": machine, "took_s": int(os.environ["GC_TOOK"]),
    "build_s": int(os.environ["GC_BUILD"]), "budget_s": int(os.environ["GC_BUDGET"]),
    "info": info, "probe": probe_rounds, "slice": slice_,
    "scenario_seconds": os.environ["GC_SECONDS"], "scenarios": scenarios,
    "frameworks": {"result": os.environ["GC_FRAMEWORKS"],
                   "took_s": int(os.environ["GC_FRAMEWORKS_TOOK"])},
}


def table_rows(text):
    """The rows of a scenario's text table, as lists of cells: its columns are the runs of
    dashes under the header (the runner pads cells by characters)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("-") and set(line) <= {"-", " "}:
            starts = [m.start() for m in re.finditer(r"-+", line)]
            break
    else:
        return []
    rows = []
    for line in lines[i + 1:]:
        if not line[:1].isdigit():
            continue
        bounds = starts + [len(line)]
        rows.append([line[a:b].strip() for a, b in zip(bounds, bounds[1:])])
    return rows


def first_error(name):
    """The line of a scenario's log that says why it stopped."""
    try:
        with open(os.path.join(out, "scenario-%s.log" % name)) as f:
            lines = [l.strip() for l in f if l.strip()]
    except OSError:
        return "no log"
    said = [l for l in lines if "error" in l.lower() or "failed" in l.lower()]
    return (said or lines or ["no output"])[-1][:400]


failing = []
for b in (l for l in log_lines("frameworks.log") if l.startswith("FAIL ")):
    failing.append("PyTorch: %s" % b[5:])
for b in (l for l in log_lines("frameworks.log") if l.startswith("RESULT ")):
    _, build, result, what = b.split(" ", 3)
    if result == "fail":
        failing.append("PyTorch %s (%s): failed" % (build, what))
if os.environ["GC_FRAMEWORKS"] in ("timeout", "error"):
    failing.append("PyTorch: the step ended with %s" % os.environ["GC_FRAMEWORKS"])
for s in scenarios:
    if s["result"] in ("error", "timeout"):
        failing.append("%s: %s (%s)" % (s["name"], s["result"], first_error(s["name"])))
    for row in table_rows(s["table"]):
        if len(row) >= 7 and row[-1] == "FAIL":
            failing.append("%s: %s: target %s, measured %s" % (s["name"], row[2], row[3],
                                                              row[4]))


def lever_side(name):
    """What one run of the lever step left: the online figures, the offline ones, and the
    library's lines about the slice."""
    online, offline = load(name + "-online"), load(name + "-offline")
    said = [l for l in log_lines(name + "-offline.err") if "time slice" in l]
    online_said = [l for l in log_lines(name + "-online.err") if "time slice" in l]
    return {"online": online, "offline": offline, "said": said, "online_said": online_said}


LEVER_BUSY = 20 * 10 * 0.5 / 1000  # the online side's share of the GPU: 20/s x 10 x 0.5 ms
lever = {"alone": load("lever-alone-online")}
for who in ("bare", "root", "user", "both"):
    if os.path.exists(os.path.join(out, "lever-%s-online.json" % who)):
        lever[who] = lever_side("lever-" + who)
torch_lever = {"alone": load("lever-torch-alone-online")}
for who in ("bare", "root", "both"):
    if os.path.exists(os.path.join(out, "lever-torch-%s-online.json" % who)):
        torch_lever[who] = lever_side("lever-torch-" + who)


def ratio(side, alone, key):
    try:
        return side["online"][key] / alone[key]
    except (TypeError, KeyError, ZeroDivisionError):
        return None


def idle_use(side):
    """The offline gpuload's use of the time the online side leaves idle."""
    try:
        return side["offline"]["kernels_per_s"] * 0.002 / (1 - LEVER_BUSY)
    except (TypeError, KeyError):
        return None


for who in ("root", "user", "both"):
    side = lever.get(who)
    if not side:
        continue
    p99 = ratio(side, lever["alone"], "p99_ms")
    if p99 is None or p99 > 1.10:
        failing.append("lever (%s): gpuload online p99 beside offline at 100 µs: %s × alone, "
                       "target ≤ 1.10 ×" % (who, "?" if p99 is None else "%.2f" % p99))
    use = idle_use(side)
    if use is None or use < 0.80:
        failing.append("lever (%s): offline use of the idle time %s, target ≥ 80 %%" % (
            who, "?" if use is None else "%.0f %%" % (use * 100)))
for who in ("root", "both"):
    if not torch_lever.get(who):
        continue
    p99 = ratio(torch_lever[who], torch_lever["alone"], "p99_ms")
    if p99 is None or p99 > 1.10:
        failing.append("lever (%s): PyTorch service p99 beside PyTorch training at 100 µs: "
                       "%s × alone, target ≤ 1.10 ×" % (who, "?" if p99 is None else "%.2f" % p99))
results["lever"] = {"gpuload": lever, "torch": torch_lever}

results["failing"] = failing
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(results, f, indent=2)

CALLS = [
    ("cuLaunchKernel", "`cuLaunchKernel` (empty kernel)"),
    ("cuEventRecord", "`cuEventRecord`"),
    ("cuEventQuery", "`cuEventQuery` (event complete)"),
    ("cuEventQuery_pending", "`cuEventQuery` (event pending)"),
    ("cuMemAlloc_cuMemFree_1MiB", "`cuMemAlloc` + `cuMemFree` (1 MiB)"),
    ("cuMemGetInfo", "`cuMemGetInfo`"),
]


def cost(rounds, key):
    """The median over rounds of a call's median ns."""
    return median([r[key]["median_ns"] for r in rounds if isinstance(r.get(key), dict)])


def ns(v):
    return "—" if v is None else "{:,.0f}".format(v).replace(",", " ")


def added(a, b):
    return "—" if a is None or b is None else "{:+,.0f}".format(b - a).replace(",", " ")


def ms(v):
    return "—" if v is None else "%.3f ms" % v


L = []
L.append("# Tessera on a GPU: `bench/gpu-check.sh`\n")
L.append("Produced by `%s`, commit `%s`, in %d s (build %d s; budget %d s)." % (
    results["command"], results["commit"], results["took_s"], results["build_s"],
    results["budget_s"]))
L.append("")
L.append("| machine | |")
L.append("|---|---|")
L.append("| GPU | %s, %s of memory |" % (machine["gpu"], "%.1f GiB" % (
    machine["gpu_memory_bytes"] / 2**30) if machine["gpu_memory_bytes"] else "?"))
L.append("| driver | %s (CUDA %s), %s |" % (machine["driver"] or "version unknown",
                                             machine["cuda_driver_api"] or "?",
                                             machine["driver_source"]))
L.append("| CPU | %s |" % machine["cpu"])
L.append("| OS | %s |" % machine["kernel"])
L.append("")
L.append("## What failed\n")
if failing:
    L.append("Every check that failed, and every step that could not run:\n")
    for f in failing:
        L.append("- %s" % f)
else:
    L.append("Nothing: every check that ran passed.")
L.append("")
L.append("## What simgpu assumes, measured here\n")
L.append("simgpu's H200 profile (measured on an H200, `docs/simgpu.md`) time-slices its engine "
         "between processes in 2.076 ms slices with 0.163 ms switches, 4 µs per kernel, and "
         "stamps events with the engine time the stream had reached. `gpuload slice` runs "
         "short spin kernels back to back with a timing event after each, beside a `gpuload "
         "train` of the same kernels: an interval between events much longer than a kernel "
         "is the other process's slice; the intervals between two such gaps make this "
         "process's slice.\n")
if slice_:
    o, w = slice_.get("other_slice") or {}, slice_.get("own_slice") or {}
    L.append("| figure | simgpu | this GPU |")
    L.append("|---|---:|---:|")
    L.append("| the other process's slice and two switches, median (p90) | 2.402 ms | %s (%s) |" % (
        ms(o.get("median_ms")), ms(o.get("p90_ms"))))
    L.append("| this process's slice, median (p90) | 2.052 ms | %s (%s) |" % (
        ms(w.get("median_ms")), ms(w.get("p90_ms"))))
    L.append("| switches per second | 223 | %.0f |" % slice_.get("switches_per_s", 0))
    L.append("| interval between events inside a slice (kernel %.3f ms) | the kernel + 4 µs | %s |" % (
        slice_.get("kernel_ms", 0), ms(slice_.get("typical_interval_ms"))))
    if not o:
        L.append("\nNo gaps were seen: the two processes' kernels ran at the same time (MPS?) "
                 "or the other process did not run.")
else:
    L.append("`gpuload slice` failed: see `slice.err`.")
L.append("")
L.append("## Host cost per call, and what libtessera.so adds\n")
first = (probe_rounds["probe-bare"] or [{}])[0]
L.append("`gpuload probe`, ns per call: the median over batches of %s calls (%s batches), "
         "then the median over %d rounds run in turn: bare, with `LD_PRELOAD=libtessera.so` "
         "and no limit, and with a memory limit of %s. The bare column is the driver's own "
         "host cost, which simgpu's host side stands in for.\n" % (
             first.get("calls", "?"), first.get("batches", "?"),
             len(probe_rounds["probe-bare"]), os.environ["GC_LIMIT"]))
L.append("| call | bare driver | + libtessera.so | added | + libtessera.so, limit | added |")
L.append("|---|---:|---:|---:|---:|---:|")
for key, label in CALLS:
    b = cost(probe_rounds["probe-bare"], key)
    t = cost(probe_rounds["probe-tessera"], key)
    m = cost(probe_rounds["probe-tessera-limit"], key)
    L.append("| %s | %s | %s | %s | %s | %s |" % (label, ns(b), ns(t), added(b, t), ns(m),
                                                  added(b, m)))
L.append("")
L.append("## Online beside offline: the GPU's own time slices\n")
L.append("An offline `gpuload train` (2 ms kernels, 8 in flight) beside an online `gpuload "
         "infer` (requests of ten 0.5 ms kernels, 20 a second): the online side alone, "
         "beside the offline side bare (its channel groups at the driver's slices), and "
         "beside it under `libtessera.so` with `TESSERA_TIMESLICE=100us`, as root and as an "
         "unprivileged user. The offline side's use of the time the online side leaves idle "
         "is its kernels per second × 2 ms over %.0f %%. What the library said of the slice "
         "(its log at debug) is beside.\n" % ((1 - LEVER_BUSY) * 100))


def x(v):
    return "—" if v is None else "%.2f ×" % v


def said(side):
    lines = side.get("said") or []
    return "; ".join(l.split(": ", 2)[-1] for l in lines[:3]).replace("|", "\\|") or "—"


if lever.get("alone"):
    a = lever["alone"]
    L.append("| offline side | online p50 | online p99 | offline idle use | the library said |")
    L.append("|---|---:|---:|---:|---|")
    L.append("| none (alone) | %s | %s | — | — |" % (ms(a.get("p50_ms")), ms(a.get("p99_ms"))))
    for who, label in (("bare", "bare (driver's slices)"), ("root", "100 µs, root"),
                       ("user", "100 µs, unprivileged"),
                       ("both", "100 µs, online side at 16 ms, root")):
        side = lever.get(who)
        if not side:
            continue
        use = idle_use(side)
        L.append("| %s | %s | %s | %s | %s |" % (
            label, x(ratio(side, a, "p50_ms")), x(ratio(side, a, "p99_ms")),
            "—" if use is None else "%.0f %%" % (use * 100), said(side) if who != "bare" else "—"))
else:
    L.append("The online side alone did not run: see `lever-alone-online.err`.")
if torch_lever.get("alone"):
    a = torch_lever["alone"]
    L.append("")
    L.append("PyTorch on both sides (`bench/torch_pair.py`: 8192² matmuls back to back; "
             "requests of eight 64 × 4096 · 4096² layers, 20 a second):\n")
    L.append("| training side | service p50 | service p99 | training iterations/s |")
    L.append("|---|---:|---:|---:|")
    L.append("| none (alone) | %s | %s | — |" % (ms(a.get("p50_ms")), ms(a.get("p99_ms"))))
    for who, label in (("bare", "bare"), ("root", "100 µs, root"),
                       ("both", "100 µs, service at 16 ms, root")):
        side = torch_lever.get(who)
        if side:
            its = (side.get("offline") or {}).get("iterations_per_s")
            L.append("| %s | %s | %s | %s |" % (label, x(ratio(side, a, "p50_ms")),
                                                x(ratio(side, a, "p99_ms")),
                                                "—" if its is None else "%.1f" % its))
L.append("")
L.append("## PyTorch on the real driver\n")
L.append("`TESSERA_FRAMEWORKS_DRIVER=system TESSERA_FRAMEWORKS_OFFLINE=1 tests/frameworks.sh "
         "system default cu12` (the PyTorch python3 has, and the builds installed under "
         "target/; nothing downloaded): %s in %d s (output in `frameworks.log`).\n" % (
             os.environ["GC_FRAMEWORKS"], int(os.environ["GC_FRAMEWORKS_TOOK"])))
try:
    with open(os.path.join(out, "frameworks.log")) as f:
        log = [l.rstrip() for l in f]
except OSError:
    log = []
builds = [l.split(" ", 3) for l in log if l.startswith("RESULT ")]
if builds:
    L.append("| PyTorch build | python | result |")
    L.append("|---|---|---|")
    for _, build, result, what in builds:
        L.append("| %s | %s | %s |" % (build, what.replace("|", "\\|"), result))
    L.append("")
checks = [l for l in log if l.startswith(("PASS ", "FAIL ", "INFO ", "== "))]
if checks:
    L.append("```\n%s\n```" % "\n".join(checks))
L.append("")
L.append("## Isolation scenarios on the real driver\n")
L.append("`TESSERA_BENCH_DRIVER=system tessera-bench scenario NAME --seconds %s`. "
         "Ground truth: each workload's completed kernels times their length (a spin kernel "
         "holds the GPU for its length even when time-sliced), per container over wall time; "
         "memory from NVML.\n" % os.environ["GC_SECONDS"])
L.append("| scenario | result | took | estimate |")
L.append("|---|---|---:|---:|")
for s in scenarios:
    L.append("| %s | %s | %d s | %d s |" % (s["name"], s["result"], s["took_s"],
                                           s["estimate_s"]))

for s in scenarios:
    if s["table"].strip():
        L.append("\n### %s\n" % s["name"])
        table = s["table"].strip("\n")
        # The runner prints a markdown table or an aligned text one; text stays as printed.
        L.append(table if table.lstrip().startswith("|") else "```\n%s\n```" % table)
    elif s["result"] != "skipped":
        L.append("\n### %s\n\nNo table: see `scenario-%s.log`." % (s["name"], s["name"]))
L.append("")
L.append("## Files\n")
for path in sorted(glob.glob(os.path.join(out, "*"))):
    name = os.path.basename(path)
    if os.path.isfile(path) and name != "report.md":
        L.append("- `%s`" % name)
with open(os.path.join(out, "report.md"), "w") as f:
    f.write("\n".join(L) + "\n")
PY
say "report: $out/report.md ($(elapsed) s)"
exit "$broken"
