"""PyTorch under Tessera: the checks `tests/frameworks.sh` runs for one PyTorch install.

    frameworks_torch.py <python with torch> <target dir with simgpu, controld, libtessera.so>

On simgpu (a two-GPU node of its own), with a 2 GiB cap:
  1. bare simgpu: is_available(), device_count(), the device's memory as total_memory,
     torch.OutOfMemoryError at the device's memory, torch.zeros and the matmul running;
  2. under libtessera.so (TESSERA_MEMORY_LIMIT=2GiB), and 3. under `controld exec
     --memory 2GiB`: total_memory, mem_get_info() and the caching allocator stopping with
     torch.OutOfMemoryError at the cap, simgpu holding at most the cap for the process,
     empty_cache() giving the memory back to the container, torch.zeros and a 64x64
     matmul running (their results are not computed on simgpu, and nothing reads them);
  4. two PyTorch processes of one container sharing its cap, while a process of another
     container (given GPU 1 only) sees neither through NVML, and one GPU;
  5. a loop of 20 000 tiny element-wise ops (`x.add_(1)`), bare and under `controld exec
     --compute burst:100` alone on the GPU, in turn, twice: the time per op and the ratio of
     the two, reported (an INFO line, no pass or fail: the target is 1.10 × bare); on
     simgpu on a node of its own whose kernels take 2 µs, so that the host bounds the loop.
With TESSERA_FRAMEWORKS_DRIVER=system it runs 2, 3 and 5 on the machine's own driver and GPU
(no simgpu figures). Prints PASS/FAIL per check, INFO per figure; exits 1 if any failed.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

GIB = 1 << 30
CAP = 2 * GIB
HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "clients", "torch_client.py")
TINY_OPS = os.path.join(HERE, "clients", "torch_tiny_ops.py")
SYSTEM = os.environ.get("TESSERA_FRAMEWORKS_DRIVER") == "system"
# simgpu's kernel time for the tiny-op loop: a 16-element add takes about 2 µs on a GPU.
TINY_KERNEL_NS = 2000

failures = []


def check(what, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'} {what}{': ' + str(detail) if detail and not ok else ''}",
          flush=True)
    if not ok:
        failures.append(what)


class Client:
    """torch_client.py running, read line by line."""

    def __init__(self, cmd, env):
        self.errors = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.errors, text=True)

    def expect(self, tag):
        for line in self.p.stdout:
            if line.startswith(tag + " "):
                return json.loads(line[len(tag) + 1:])
        self.errors.seek(0)
        raise RuntimeError(f"the client ended without `{tag}` ({self.p.wait()}):\n"
                           f"{self.errors.read()[-2000:]}")

    def go(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()

    def finish(self):
        freed, ran = self.expect("freed"), self.expect("ran")
        self.p.wait(timeout=600)
        return freed, ran


class Controld:
    """`controld run` on a state directory while the block runs."""

    def __init__(self, controld, state, env):
        self.cmd, self.state, self.env = [controld, "run", "--state-dir", state], state, env

    def __enter__(self):
        self.p = subprocess.Popen(self.cmd, env=self.env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not os.path.exists(os.path.join(self.state, "control.sock")):
            if time.time() > deadline or self.p.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"controld did not start on {self.state}")
            time.sleep(0.1)
        return self

    def __exit__(self, *_):
        self.p.terminate()
        self.p.wait()


def held_by(simgpu, env, pid):
    out = subprocess.run([simgpu, "stat", "--json"], env=env, capture_output=True, text=True)
    stat = json.loads(out.stdout)
    for p in stat["processes"]:
        if p["pid"] == pid:
            return sum(d["memory"] for d in p["devices"])
    return 0


def capped_run(name, cmd, env, simgpu, total_expected):
    c = Client(cmd, env)
    r = c.expect("report")
    check(f"{name}: is_available() and one device", r["available"] and r["count"] >= 1, r)
    check(f"{name}: total_memory is the cap", r["total_memory"] == CAP, r)
    check(f"{name}: mem_get_info() total is the cap", r["total"] == CAP, r)
    check(f"{name}: mem_get_info() free is the cap less the context",
          0 < r["free"] < CAP, r)
    check(f"{name}: torch.OutOfMemoryError at the cap", r.get("oom") == "torch.OutOfMemoryError"
          and r["allocated"] <= r["free"], r)
    if simgpu:
        held = held_by(simgpu, env, r["pid"])
        check(f"{name}: simgpu holds at most the cap for it ({held} bytes)", 0 < held <= CAP)
    c.go()
    freed, ran = c.finish()
    check(f"{name}: empty_cache() gives the memory back", freed["free"] == r["free"], freed)
    check(f"{name}: torch.zeros runs", ran.get("zeros") is True, ran)
    check(f"{name}: a 64x64 matmul runs", ran.get("matmul") is True, ran)


def main():
    python, target = sys.argv[1], sys.argv[2]
    libtessera = os.path.join(target, "libtessera.so")
    controld = os.path.join(target, "controld")
    simgpu = None if SYSTEM else os.path.join(target, "simgpu")
    work = tempfile.mkdtemp(prefix="tessera-frameworks-")
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("SIMGPU_", "TESSERA_")) or k == "LD_PRELOAD":
            del env[k]
    if not SYSTEM:
        lib_dir = subprocess.run([simgpu, "lib-dir"], capture_output=True, text=True).stdout.strip()
        env["LD_LIBRARY_PATH"] = lib_dir + ":" + env.get("LD_LIBRARY_PATH", "")
        env["SIMGPU_STATE"] = os.path.join(work, "node.state")
        env["SIMGPU_DEVICES"] = "H100-80GB,H100-80GB"
        env["SIMGPU_CONTEXT_MEMORY"] = "300MiB"

        # 1. Bare simgpu.
        c = Client([python, CLIENT], env)
        r = c.expect("report")
        check("simgpu: is_available()", r["available"], r)
        check("simgpu: device_count() is the node's", r["count"] == 2, r)
        check("simgpu: total_memory is the device's", r["total_memory"] == 80 * GIB, r)
        check("simgpu: torch.OutOfMemoryError at the device's memory",
              r.get("oom") == "torch.OutOfMemoryError" and r["allocated"] <= r["free"], r)
        c.go()
        _, ran = c.finish()
        check("simgpu: torch.zeros runs", ran.get("zeros") is True, ran)
        check("simgpu: a 64x64 matmul runs", ran.get("matmul") is True, ran)

    # 2. Under libtessera.so with a cap.
    capped = dict(env, LD_PRELOAD=libtessera, TESSERA_MEMORY_LIMIT="2GiB",
                  TESSERA_REGION=os.path.join(work, "capped.region"))
    capped_run("libtessera.so, 2 GiB", [python, CLIENT], capped, simgpu, CAP)

    # 3. Under controld exec.
    state = os.path.join(work, "state")
    exec_env = dict(env, TESSERA_PRELOAD=libtessera)
    with Controld(controld, state, env):
        capped_run("controld exec --memory 2GiB",
                   [controld, "exec", "--state-dir", state, "--memory", "2GiB", "--", python,
                    CLIENT], exec_env, simgpu, CAP)
        if not SYSTEM:
            shared_and_isolated(python, controld, state, exec_env, simgpu)
    # 5. On simgpu a node of its own whose kernels take 2 µs, so that the loop is bound by the
    # host, as it is on a real GPU, and the launch path's cost shows.
    tiny_env = env if SYSTEM else dict(env, SIMGPU_STATE=os.path.join(work, "tiny.state"),
                                       SIMGPU_KERNEL_NS=str(TINY_KERNEL_NS))
    tiny_state = os.path.join(work, "tiny")
    with Controld(controld, tiny_state, tiny_env):
        tiny_ops(python, controld, tiny_state, tiny_env,
                 dict(tiny_env, TESSERA_PRELOAD=libtessera))
    print(f"{len(failures)} failed" if failures else "all passed", flush=True)
    sys.exit(1 if failures else 0)


def tiny_ops(python, controld, state, env, exec_env, rounds=2):
    """5: the time per tiny op bare and under controld exec --compute burst:100, in turn."""
    runs = {"bare": [], "burst:100": []}
    commands = {
        "bare": ([python, TINY_OPS], env),
        "burst:100": ([controld, "exec", "--state-dir", state, "--compute", "burst:100", "--",
                       python, TINY_OPS], exec_env),
    }
    for r in range(rounds):
        # Alternating which goes first, so that a drift of the machine touches both alike.
        for side in (("bare", "burst:100") if r % 2 == 0 else ("burst:100", "bare")):
            cmd, side_env = commands[side]
            out = subprocess.run(cmd, env=side_env, capture_output=True, text=True, timeout=600)
            line = next((l for l in out.stdout.splitlines() if l.startswith("ops ")), None)
            if out.returncode != 0 or line is None:
                check(f"tiny ops ({side}) run", False, out.stderr[-2000:])
                return
            runs[side].append(json.loads(line[4:])["us_per_op"])
    bare, managed = (sorted(v)[len(v) // 2] for v in (runs["bare"], runs["burst:100"]))
    print(f"INFO tiny ops (20 000 x.add_(1)): {bare:.1f} µs per op bare, {managed:.1f} µs under "
          f"controld exec --compute burst:100 alone: {managed / bare:.2f} × bare "
          f"(the target: 1.10 ×; rounds bare {[round(v, 1) for v in runs['bare']]}, burst:100 {[round(v, 1) for v in runs['burst:100']]})",
          flush=True)


def shared_and_isolated(python, controld, state, env, simgpu):
    """4: two processes of one container share its cap; another container sees neither."""
    subprocess.run([controld, "container", "add", "pair", "--state-dir", state, "--gpus", "0",
                    "--memory", "2GiB"], env=env, check=True, capture_output=True)
    region = os.path.join(state, "pair.region")
    pair_env = dict(env, LD_PRELOAD=env["TESSERA_PRELOAD"], TESSERA_REGION=region)
    # Each asks for up to 768 MiB: with their contexts, more than the cap holds for both.
    first = Client([python, CLIENT, str(64 << 20), str(768 << 20)], pair_env)
    a = first.expect("report")
    second = Client([python, CLIENT, str(64 << 20), str(768 << 20)], pair_env)
    b = second.expect("report")
    held = held_by(simgpu, env, a["pid"]) + held_by(simgpu, env, b["pid"])
    check(f"two processes of one container hold at most its cap together ({held} bytes)",
          0 < held <= CAP)
    check("the second process sees what the first holds", b["free"] < a["free"], (a, b))
    check("the second process stops at the container's cap",
          b.get("oom") == "torch.OutOfMemoryError", b)
    nvml = os.path.join(os.path.dirname(HERE), "target", "nvml_client_frameworks")
    subprocess.run(["gcc", "-O1", "-o", nvml, os.path.join(HERE, "clients", "nvml_client.c"),
                    "-ldl"], check=True)
    out = subprocess.run([controld, "exec", "--state-dir", state, "--gpus", "1", "--", nvml],
                         env=env, capture_output=True, text=True)
    seen = json.loads(out.stdout) if out.returncode == 0 else {"error": out.stderr}
    pids = [p["pid"] for d in seen.get("devices", []) for p in d["processes"]]
    check("another container sees one GPU", seen.get("count") == 1, seen)
    check("another container sees neither process", a["pid"] not in pids
          and b["pid"] not in pids, seen)
    for c in (first, second):
        c.go()
        c.finish()


if __name__ == "__main__":
    main()
