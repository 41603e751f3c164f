"""`pip install .` into a fresh venv that sees Debian's torch, then the
README's PyTorch example run with that venv's python and no PYTHONPATH,
and the programs pip put on its bin/. The build reuses this test run's
CMake build tree (ZEROSHARD_BIN_DIR's parent), so it compiles nothing."""

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def readme_example():
    text = open(os.path.join(ROOT, "README.md")).read()
    m = re.search(r"```python\n(.*?)```", text, re.S)
    assert m, "the README has no python example"
    return m.group(1)


def test_pip_install_then_the_readme_example(tmp_path):
    bin_dir = os.environ.get("ZEROSHARD_BIN_DIR")
    if not bin_dir:
        pytest.skip("ZEROSHARD_BIN_DIR names no build tree to reuse")
    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                        str(venv)], capture_output=True, text=True, timeout=120)
    if r.returncode != 0 and "ensurepip" in r.stdout + r.stderr:
        pytest.skip("python3-venv is not installed (scripts/install-deps.sh "
                    "installs it)")
    assert r.returncode == 0, r.stderr
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "ZEROSHARD_BIN_DIR")}
    env["ZEROSHARD_BUILD_DIR"] = os.path.dirname(os.path.abspath(bin_dir))
    r = subprocess.run([str(venv / "bin" / "pip"), "install",
                        "--no-build-isolation", "--no-index", ROOT],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for prog in ("zeroshard-launch", "zeroshard-server"):
        assert os.access(venv / "bin" / prog, os.X_OK), prog
    (tmp_path / "train.py").write_text(readme_example())
    r = subprocess.run([str(venv / "bin" / "python"), "train.py"], env=env,
                       cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    # It imported the installed package, not the build tree's.
    r2 = subprocess.run([str(venv / "bin" / "python"), "-c",
                         "import zeroshard, sys; print(zeroshard.__file__)"],
                        env=env, capture_output=True, text=True, timeout=60)
    assert str(venv) in r2.stdout, r2.stdout + r2.stderr
    assert any(n.startswith("step-") for n in os.listdir(tmp_path / "ckpt"))
    r = subprocess.run([str(venv / "bin" / "zeroshard-launch"), "--help"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--deepspeed" in r.stdout, r.stderr
