"""What the bench scripts share: the machine's names for their results, a model's inputs (a zoo
model's names, random feeds), the timing loop and kiln's per-node profile."""
import collections
import json
import os
import platform
import statistics
import subprocess
import time


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def gpu_name():
    """"NAME, DRIVER" of each GPU (joined by "; "), or None without nvidia-smi."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip().replace("\n", "; ") if r.returncode == 0 and r.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def input_names(model_path):
    """The graph inputs that are not initializers, in order; None without the onnx package (kiln
    then makes random inputs of the declared shapes)."""
    try:
        import onnx
    except ImportError:
        return None
    m = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


def random_feeds(model):
    """Random inputs for the graph inputs that are not initializers, in order, from one generator
    seeded 0: floating-point inputs standard normal, integer inputs named *mask* ones, other
    integers in [0, 1000); symbolic dimensions 1. model: an onnx.ModelProto or a path (its
    external weights not loaded)."""
    import numpy as np
    import onnx
    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(model, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
        dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
        if dt.kind == "f":
            feeds[i.name] = rng.standard_normal(shape).astype(dt)
        elif "mask" in i.name:
            feeds[i.name] = np.ones(shape, dt)
        else:
            feeds[i.name] = rng.integers(0, 1000, shape).astype(dt)
    return feeds


def timed(fn, seconds_cap, n=1000, clock=time.perf_counter):
    """The median time of fn() in ms over n runs, or fewer (at least 3) once seconds_cap of wall
    time has passed; clock: time.perf_counter (wall) or time.process_time (this process's CPU)."""
    ts = []
    t_end = time.perf_counter() + seconds_cap
    for _ in range(n):
        t = clock()
        fn()
        ts.append((clock() - t) * 1e3)
        if time.perf_counter() > t_end and len(ts) >= 3:
            break
    return statistics.median(ts)


def kiln_node_profile(build, model, provider, threads, iters, env=None, quiet=False):
    """`BUILD/kiln bench MODEL` under flock /tmp/kiln-bench.lock (the shared box's benchmark lock)
    with KILN_PROFILE: per node its execution times after the first (ms), per node its trace
    arguments (op, inputs, outputs), and the run times after the first (ms). env: extra
    environment; quiet: kiln's stderr discarded too."""
    trace = f"/tmp/kiln_node_profile_{os.getpid()}.json"
    subprocess.run(["flock", "/tmp/kiln-bench.lock", f"{build}/kiln", "bench", model, "--provider", provider,
                    "--threads", str(threads), "--warmup", "10", "--iterations", str(iters)],
                   env=dict(os.environ, KILN_PROFILE=trace, **(env or {})), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL if quiet else None, check=True)
    with open(trace) as f:
        ev = json.load(f)
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    os.unlink(trace)
    per, info = collections.defaultdict(list), {}
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "cpu" and not e["args"].get("first"):
            per[e["name"]].append(e["dur"] / 1000)
            info[e["name"]] = e["args"]
    return per, info, [e["dur"] / 1000 for e in ev if e.get("cat") == "run"][1:]
