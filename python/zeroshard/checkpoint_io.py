"""Reading a front-end checkpoint without servers: the FP32 masters of its
shard files (each verified against the manifest first) under the module's
own names, with the frozen parameters and buffers rank 0 saved beside them.
What deepspeed.utils.zero_to_fp32 and load_checkpoint(load_module_only=True)
read."""

import io
import os

import torch

from . import _zeroshard


def step_folder(directory, step):
    return os.path.join(directory, f"step-{step:020d}")


def read_fp32(directory, step=None, exclude_frozen_parameters=False,
              buffers=True):
    """(step folder, {name: FP32 tensor}) of `directory`'s newest complete
    checkpoint (or `step`'s): every trained parameter from the servers'
    masters, then (unless excluded) the frozen parameters, and the buffers,
    from rank 0's state. A checkpoint that zeroshard.initialize's engine did
    not write (zeroshard-train's) has no table of names: refused, saying
    so."""
    step, flat = _zeroshard.read_checkpoint_masters(directory, step)
    folder = step_folder(directory, step)
    engine_file = os.path.join(folder, "zeroshard_engine.pt")
    if not os.path.exists(engine_file):
        raise ValueError(
            f"{folder}: no zeroshard_engine.pt, so no table of the module's "
            "names (a zeroshard-train checkpoint: zeroshard-ctl restore and "
            "export read those)")
    state = torch.load(engine_file)
    table = state.get("layout")
    if table is None:
        raise ValueError(f"{engine_file}: written before checkpoints kept "
                         "the module's names")
    flat = torch.from_numpy(flat)
    out = {}
    for name, off, n, shape in table:
        out[name] = flat[off:off + n].clone().view(shape)
    rank0 = os.path.join(folder, "zeroshard_rank0.pt")
    if os.path.exists(rank0):
        r = torch.load(rank0)
        if not exclude_frozen_parameters and r.get("frozen") is not None:
            out.update(torch.load(io.BytesIO(r["frozen"])))
        if buffers and r.get("buffers") is not None:
            out.update(torch.load(io.BytesIO(r["buffers"])))
    return folder, out
