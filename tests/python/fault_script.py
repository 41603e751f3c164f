"""A training loop for test_faults.py: one step on local servers, then
prints its run directory and its server's pid ("READY dir pid") and waits
for a line on stdin (the test's go, after it has done what it does to the
server), then makes steps until stopped.

    fault_script.py MODE      MODE: train | raise (an exception in the loop)
"""

import sys
import time

import torch

import zeroshard

mode = sys.argv[1]
torch.manual_seed(0)
model = torch.nn.Linear(8, 4)
engine, _, _, _ = zeroshard.initialize(model=model, config={
    "train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 2},
    "zeroshard": {"servers": 1, "shared_memory": False,
                  "timeouts": {"step_seconds": float(sys.argv[2])
                               if len(sys.argv) > 2 else 30.0}}})


def step():
    x = torch.randn(2, 8)
    engine.backward(engine(x).square().mean())
    engine.step()


step()
print("READY", engine._servers.out_dir, engine._servers.procs[0].pid,
      flush=True)
sys.stdin.readline()
if mode == "raise":
    raise ValueError("the user's loop failed")
t0 = time.monotonic()
try:
    while True:
        step()
except KeyboardInterrupt:
    print(f"INTERRUPTED after {time.monotonic() - t0:.2f} s", flush=True)
    raise
except Exception as e:
    print(f"FAILED after {time.monotonic() - t0:.2f} s: {e}", flush=True)
    raise
