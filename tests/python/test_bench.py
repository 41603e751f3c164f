"""The front-end's benchmarks (bench/torch_step.py, bench/torch_memory.py,
bench/torch_ranks.py) and the native trainer's torch peer
(bench/torch_native.py) run once at a tiny size, so that none stops running
unseen: each must exit 0 and print its closing line (whose value a tiny
size does not test)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


@pytest.mark.parametrize("bench,name", [("torch_step.py", "torch-step"),
                                        ("torch_memory.py", "torch-memory"),
                                        ("torch_native.py", "torch-native"),
                                        ("torch_native.py --arch=llama",
                                         "torch-native"),
                                        ("replicas.py", "replicas")])
def test_benchmark_runs_at_a_tiny_size(bench, name):
    script, *flags = bench.split()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", script),
                        "--smoke", *flags], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(rf"^{name} ratio=[0-9.]+ target=", r.stdout, re.M), r.stdout


def test_ranks_benchmark_runs_at_a_tiny_size():
    # bench/torch_ranks.py: one and two ranks under zeroshard-launch; the
    # two-rank row has a commit phase, the one-rank row none.
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench",
                                                     "torch_ranks.py"),
                        "--smoke"], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = re.findall(r"^ +([12]) +((?:[0-9.]+ +){5}[0-9.]+)$", r.stdout, re.M)
    assert [n for n, _ in rows] == ["1", "2"], r.stdout
    one = [float(v) for v in rows[0][1].split()]
    two = [float(v) for v in rows[1][1].split()]
    assert one[3] == 0.0 and two[3] > 0.0, r.stdout   # the commit column
    assert re.search(r"^torch-ranks commit=[0-9.]+ ms \([0-9.]+ % of the "
                     r"optimizer step, [0-9.]+ % of the whole step\) at 2 "
                     r"ranks$", r.stdout, re.M), r.stdout
