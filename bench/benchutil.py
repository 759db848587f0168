"""What the bench scripts share: the machine's names for their results and a zoo model's inputs."""
import platform
import subprocess


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
