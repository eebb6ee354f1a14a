#!/usr/bin/python3
"""Jupyter protocol conformance of spotlab-kernel (jupyter_kernel_test).

Usage: test_spotlab_kernel.py PATH-TO-spotlab-kernel [unittest options]

The kernel is started through a kernelspec that the binary under test
installs into a temporary prefix (`spotlab-kernel install --prefix`), the way
a front end finds it. The samples below are spotlab cell language
(DESIGN.md §3); jupyter_kernel_test checks the message shapes against the
5.x schemas and the contents against these samples.
"""

import os
import struct
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))

import jupyter_kernel_test  # noqa: E402
from jupyter_kernel_test.msgspec_v5 import validate_message  # noqa: E402
from kernelspec_env import DISPLAY_NAME, KERNEL_NAME, LOGOS, KernelspecEnv  # noqa: E402
from spotlab_home import PrivateHome  # noqa: E402

KERNEL_EXE = os.environ.get("SPOTLAB_KERNEL_EXE", "")

# A variable defined once the kernel is up, so completion has one to offer.
SETUP_CODE = "learning_rate_base = 3e-4"


class SpotlabKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = KERNEL_NAME
    language_name = "spotlab"
    file_extension = ".spotlab"

    code_hello_world = 'print "hello, world"'
    code_stderr = "%stderr error"

    completion_samples = [
        {"text": "tra", "matches": {"train"}},
        {"text": "learning_r", "matches": {"learning_rate_base"}},
        {"text": "print learning_rate_b", "matches": {"learning_rate_base"}},
    ]

    complete_code_samples = [
        "lr = 3e-4",
        'print "hello"',
        "x = 1\nprint x",
        "steps = 3000 \\\n  * 2",
        "%who",
    ]
    incomplete_code_samples = [
        "steps = 3000 \\",
        'print "an open string',
        "steps = (1 + 2",
    ]
    invalid_code_samples = [
        "lr = = 3",
        "= 5",
    ]

    code_inspect_sample = "train"

    code_generate_error = "print no_such_variable"

    code_execute_result = [
        {"code": "6*7", "result": "42"},
        {"code": "lr = 3e-4\nlr * 2", "result": "0.0006"},
    ]

    code_display_data = [
        {"code": "x = 1\nshow x", "mime": "text/plain"},
        {"code": "x = 1\nshow x", "mime": "text/html"},
    ]

    code_history_pattern = "6*7"
    supported_history_operations = ("tail", "range", "search")

    code_clear_output = "%clear"

    @classmethod
    def setUpClass(cls):
        if not KERNEL_EXE:
            raise RuntimeError("usage: test_spotlab_kernel.py PATH-TO-spotlab-kernel")
        cls.env = KernelspecEnv(KERNEL_EXE)
        cls.home = PrivateHome()  # history and any gateway stay out of the user's SPOTLAB_HOME
        cls.home.__enter__()
        try:
            super().setUpClass()
            reply = cls.kc.execute_interactive(SETUP_CODE, store_history=False, timeout=15)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"setup cell {SETUP_CODE!r} failed: {reply['content']}")
        except BaseException:
            cls.home.__exit__(None, None, None)
            cls.env.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.home.__exit__(None, None, None)
            cls.env.close()

    # ---- beyond jupyter_kernel_test: what DESIGN.md §2 fixes ----------------

    def test_kernelspec_install(self):
        spec = self.env.kernel_json()
        self.assertEqual(spec["argv"], [os.path.realpath(KERNEL_EXE), "-f", "{connection_file}"])
        self.assertEqual(spec["display_name"], DISPLAY_NAME)
        self.assertEqual(spec["language"], "spotlab")
        self.assertEqual(spec["interrupt_mode"], "message")
        self.assertEqual(spec["metadata"], {"debugger": False})
        self.assertIn(f"installed kernelspec {KERNEL_NAME} in {self.env.spec_dir}",
                      self.env.install_stdout)
        for logo in LOGOS:
            with open(os.path.join(self.env.spec_dir, logo), "rb") as f:
                data = f.read()
            if logo.endswith(".png"):
                self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n", logo)
                width, height = struct.unpack(">II", data[16:24])
                size = int(logo.split("-")[1].split("x")[0])
                self.assertEqual((width, height), (size, size), logo)
            else:
                self.assertIn(b"<svg", data, logo)

    def test_kernel_info_fields(self):
        self.flush_channels()
        msg_id = self.kc.kernel_info()
        reply = self.kc.get_shell_msg(timeout=jupyter_kernel_test.TIMEOUT)
        validate_message(reply, "kernel_info_reply", msg_id)
        content = reply["content"]
        self.assertEqual(content["protocol_version"], "5.3")
        self.assertEqual(content["implementation"], "spotlab-kernel")
        info = content["language_info"]
        self.assertEqual(info["name"], "spotlab")
        self.assertEqual(info["file_extension"], ".spotlab")
        self.assertEqual(info["mimetype"], "text/x-spotlab")
        self.assertEqual(reply["header"]["version"], "5.3")

    def test_execution_count_increments(self):
        self.flush_channels()
        first, _ = self.execute_helper("a = 1")
        second, _ = self.execute_helper("b = 2")
        self.assertEqual(second["content"]["execution_count"],
                         first["content"]["execution_count"] + 1)
        silent, _ = self.execute_helper("c = 3", silent=True, store_history=False)
        third, _ = self.execute_helper("d = 4")
        self.assertEqual(third["content"]["execution_count"],
                         second["content"]["execution_count"] + 1)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: test_spotlab_kernel.py PATH-TO-spotlab-kernel [unittest options]")
    KERNEL_EXE = sys.argv.pop(1)
    unittest.main(verbosity=2)
