"""The front-end's benchmarks (bench/torch_step.py, bench/torch_memory.py)
run once at a tiny size, so that neither stops running unseen: each must
exit 0 and print its ratio line (whose value a tiny size does not test)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


@pytest.mark.parametrize("bench,name", [("torch_step.py", "torch-step"),
                                        ("torch_memory.py", "torch-memory")])
def test_benchmark_runs_at_a_tiny_size(bench, name):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", bench),
                        "--smoke"], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(rf"^{name} ratio=[0-9.]+ target=", r.stdout, re.M), r.stdout
