"""The environment a user who tuned a torch training loop on a CPU runs it
under, for the benches that compare with torch (torch_step.py,
torch_native.py): glibc's allocator keeps its memory, and OpenBLAS runs
each product on the calling thread, under torch's own intra-op threads
(with both pools at two threads on two cores they spin against each other,
and a step's median runs 2-3x its fastest)."""

import os
import sys

TUNED = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 36),
         "OPENBLAS_NUM_THREADS": "1"}


def run_tuned():
    """Re-executes this script under TUNED unless it already runs under it
    (the allocator reads its settings only at start)."""
    if any(os.environ.get(k) != v for k, v in TUNED.items()):
        env = dict(os.environ, **TUNED)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
