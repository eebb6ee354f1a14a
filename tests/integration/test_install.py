#!/usr/bin/python3
"""`spotlab-kernel install`: where each option puts the kernelspec, and its errors.

Usage: test_install.py PATH-TO-spotlab-kernel [pytest options]
"""

import json
import os
import subprocess
import sys

import pytest

EXE = os.environ.get("SPOTLAB_KERNEL_EXE", "")
LOGOS = ("logo-32x32.png", "logo-64x64.png", "logo-svg.svg")


def install(tmp_path, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_DATA_HOME", "VIRTUAL_ENV", "CONDA_PREFIX")}
    env["HOME"] = str(tmp_path / "home")
    env.update(env_extra or {})
    return subprocess.run([EXE, "install", *args], capture_output=True, text=True, env=env,
                          timeout=30)


def assert_spec(folder, name="spotlab", display_name="Spot GPU (spotlab)"):
    with open(folder / "kernel.json") as f:
        spec = json.load(f)
    assert spec == {
        "argv": [os.path.realpath(EXE), "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "spotlab",
        "interrupt_mode": "message",
        "metadata": {"debugger": False},
    }
    for logo in LOGOS:
        assert (folder / logo).stat().st_size > 0, logo


def test_default_is_user(tmp_path):
    proc = install(tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "home" / ".local" / "share" / "jupyter" / "kernels" / "spotlab"
    assert proc.stdout.strip() == f"installed kernelspec spotlab in {folder}"
    assert_spec(folder)


def test_user_honours_xdg_data_home(tmp_path):
    proc = install(tmp_path, "--user", env_extra={"XDG_DATA_HOME": str(tmp_path / "xdg")})
    assert proc.returncode == 0, proc.stderr
    assert_spec(tmp_path / "xdg" / "jupyter" / "kernels" / "spotlab")


def test_prefix_with_name_and_display_name(tmp_path):
    proc = install(tmp_path, "--prefix", str(tmp_path / "p"), "--name", "spotlab-dev",
                   "--display-name=Spot GPU (dev)")
    assert proc.returncode == 0, proc.stderr
    assert_spec(tmp_path / "p" / "share" / "jupyter" / "kernels" / "spotlab-dev",
                display_name="Spot GPU (dev)")


@pytest.mark.parametrize("var", ["VIRTUAL_ENV", "CONDA_PREFIX"])
def test_sys_prefix_follows_the_environment(tmp_path, var):
    proc = install(tmp_path, "--sys-prefix", env_extra={var: str(tmp_path / "env")})
    assert proc.returncode == 0, proc.stderr
    assert_spec(tmp_path / "env" / "share" / "jupyter" / "kernels" / "spotlab")


def test_reinstall_replaces(tmp_path):
    prefix = str(tmp_path / "p")
    assert install(tmp_path, "--prefix", prefix, "--display-name", "old").returncode == 0
    assert install(tmp_path, "--prefix", prefix).returncode == 0
    assert_spec(tmp_path / "p" / "share" / "jupyter" / "kernels" / "spotlab")
    leftovers = [p for p in os.listdir(tmp_path / "p/share/jupyter/kernels/spotlab")
                 if ".tmp." in p]
    assert leftovers == []


@pytest.mark.parametrize("args,needle", [
    (["--bogus"], "unknown argument '--bogus'"),
    (["--prefix"], "--prefix needs a value"),
    (["--user", "--sys-prefix"], "choose one of"),
    (["--name", "two words"], "kernel name 'two words'"),
    (["--name", ""], "kernel name ''"),
])
def test_bad_usage(tmp_path, args, needle):
    proc = install(tmp_path, *args)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("args,needle", [
    (["-f"], "-f needs a value, the connection file"),
    (["--connection-file"], "--connection-file needs a value"),
    (["--bogus"], "unknown argument '--bogus'"),
])
def test_kernel_bad_usage(args, needle):
    proc = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert needle in proc.stderr


def test_unwritable_destination(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = install(tmp_path, "--prefix", str(blocker))
    assert proc.returncode == 1
    assert "cannot create" in proc.stderr and str(blocker) in proc.stderr


def test_help(tmp_path):
    proc = install(tmp_path, "--help")
    assert proc.returncode == 0
    assert "--sys-prefix" in proc.stdout


def test_kernel_help():
    proc = subprocess.run([EXE, "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    for opt in ("--sys-prefix", "--name NAME", "--display-name TEXT"):
        assert opt in proc.stdout


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: test_install.py PATH-TO-spotlab-kernel [pytest options]")
    os.environ["SPOTLAB_KERNEL_EXE"] = sys.argv[1]
    sys.exit(pytest.main([os.path.abspath(__file__), "-p", "no:cacheprovider", "-q", "-rfE",
                          *sys.argv[2:]]))
