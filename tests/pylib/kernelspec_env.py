"""A private Jupyter environment holding the spotlab kernelspec of one build.

The conformance, integration and e2e suites start spotlab-kernel the way a
front end does: through a kernelspec. Each run installs one with
`spotlab-kernel install --prefix TMP` and points Jupyter at it alone, so a
kernelspec the user installed elsewhere can never shadow the build under test
(jupyter_core searches the user data dir before JUPYTER_PATH, hence
JUPYTER_DATA_DIR is moved into TMP as well).
"""

import json
import os
import shutil
import subprocess
import tempfile

KERNEL_NAME = "spotlab"
DISPLAY_NAME = "Spot GPU (spotlab)"
LOGOS = ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg")


class KernelspecEnv:
    """Installs the kernelspec of kernel_exe into a temporary prefix and
    switches this process's Jupyter paths to it until close()."""

    def __init__(self, kernel_exe):
        self.kernel_exe = os.path.realpath(kernel_exe)
        if not os.access(self.kernel_exe, os.X_OK):
            raise RuntimeError(f"spotlab-kernel not found or not executable: {kernel_exe}")
        self.root = tempfile.mkdtemp(prefix="spotlab-kspec-")
        self.prefix = os.path.join(self.root, "prefix")
        self.jupyter_path = os.path.join(self.prefix, "share", "jupyter")
        self.spec_dir = os.path.join(self.jupyter_path, "kernels", KERNEL_NAME)
        self._saved = {}
        proc = subprocess.run(
            [self.kernel_exe, "install", "--prefix", self.prefix],
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.install_stdout = proc.stdout
        self.install_stderr = proc.stderr
        if proc.returncode != 0:
            self.close()
            raise RuntimeError(
                f"spotlab-kernel install --prefix failed ({proc.returncode}): {proc.stderr.strip()}"
            )
        self._setenv("JUPYTER_PATH", self.jupyter_path)
        self._setenv("JUPYTER_DATA_DIR", os.path.join(self.root, "data"))
        self._setenv("JUPYTER_RUNTIME_DIR", os.path.join(self.root, "runtime"))
        self._setenv("JUPYTER_CONFIG_DIR", os.path.join(self.root, "config"))
        self._setenv("JUPYTER_PLATFORM_DIRS", "0")

    def _setenv(self, name, value):
        self._saved.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def kernel_json(self):
        with open(os.path.join(self.spec_dir, "kernel.json")) as f:
            return json.load(f)

    def close(self):
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved = {}
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
