"""The torch examples run (a few steps each) and leave what zeroshard-train
leaves: metrics.csv with a row per step, the loss plot and a checkpoint;
--resume goes on from it."""

import csv
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(name, out, *flags):
    return subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "torch", f"train_{name}.py"),
         f"--out={out}", "--quiet", *flags],
        capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("name,steps", [("cnn", 3), ("gpt", 2)])
def test_example_trains_and_leaves_its_outputs(tmp_path, name, steps):
    out = tmp_path / name
    r = run(name, out, f"--steps={steps}")
    assert r.returncode == 0, r.stderr
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(x["step"]) for x in rows] == list(range(steps))
    # DeepSpeed's warmup schedulers start at their warmup's start (0 here)
    # for the first two steps.
    assert all(float(x["loss"]) > 0 and float(x["lr"]) >= 0 for x in rows)
    assert rows[-1]["val_loss"] != ""
    assert (out / "loss.svg").read_text().startswith("<svg") or \
        "<svg" in (out / "loss.svg").read_text()
    assert "checkpoint:" in r.stdout
    r = run(name, out, f"--steps={steps + 1}", "--resume")
    assert r.returncode == 0, r.stderr
    assert f"resumed at step {steps}" in r.stdout
    r = run(name, out, f"--steps={steps + 1}", "--resume")
    assert r.returncode != 0 and "nothing left to do" in r.stderr
