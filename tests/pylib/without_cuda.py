"""Running programs as on a machine without CUDA's libraries: a mount
namespace (unshare, which needs root) where the folders of the CUDA
libraries that spotlab-train's CUDA backend loads are empty."""
import os
import subprocess

UNSHARE = ["unshare", "-m", "--propagation", "private"]


def backend_of(train_exe):
    return os.path.join(os.path.dirname(os.path.abspath(train_exe)), "libspotlab-train-cuda.so")


def hiding_command(train_exe):
    """(shell commands that hide the backend's CUDA libraries, run inside
    UNSHARE; "") or (None, why they cannot be hidden here)."""
    backend = backend_of(train_exe)
    if not os.path.exists(backend):
        return None, "no CUDA backend in this build"
    libs = subprocess.run(["ldd", backend], capture_output=True, text=True).stdout
    dirs = sorted({os.path.dirname(l.split("=>")[1].split("(")[0].strip()) for l in libs.splitlines()
                   if "=>" in l and any(n in l for n in ("libcudart", "libcublas", "libnccl"))})
    if not dirs:
        return None, "the backend names no CUDA library"
    hide = " && ".join('mount -t tmpfs none "%s"' % d for d in dirs)
    r = subprocess.run(UNSHARE + ["sh", "-c", hide], capture_output=True, text=True)
    if r.returncode != 0:
        return None, "cannot hide them: " + r.stderr.strip()
    return hide, ""
