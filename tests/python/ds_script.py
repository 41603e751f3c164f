"""A small training script written the way DeepSpeed scripts are (not
copied from any): argparse with deepspeed.add_config_arguments, --local_rank
from the launcher, deepspeed.init_distributed, deepspeed.initialize with
args, engine.backward / step, save_checkpoint. Run by test_deepspeed_launchers.py
under `zeroshard-launch --deepspeed`.

    ds_script.py [--local_rank=R] --deepspeed --deepspeed_config=C OUT STEPS
"""

import argparse
import json
import os

import deepspeed
import deepspeed.comm as dist
import torch
from deepspeed.accelerator import get_accelerator

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("out")
parser.add_argument("steps", type=int)
parser = deepspeed.add_config_arguments(parser)
args = parser.parse_args()

deepspeed.init_distributed()
# DeepSpeed's launcher passes --local_rank; torchrun sets LOCAL_RANK.
local_rank = args.local_rank if args.local_rank >= 0 else int(
    os.environ["LOCAL_RANK"])
assert local_rank == int(os.environ["LOCAL_RANK"]), local_rank
get_accelerator().set_device(local_rank)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(),
                            torch.nn.Linear(16, 3))
engine, optimizer, _, _ = deepspeed.initialize(
    args=args, model=model, model_parameters=model.parameters())
assert isinstance(engine, deepspeed.DeepSpeedEngine)
assert isinstance(optimizer, torch.optim.Optimizer)
g = torch.Generator().manual_seed(100 + dist.get_rank())
device = get_accelerator().device_name(engine.local_rank)
for _ in range(args.steps):
    x = torch.randn(4, 6, generator=g).to(device)
    y = torch.randint(0, 3, (4,), generator=g).to(device)
    loss = torch.nn.functional.cross_entropy(engine(x), y)
    engine.backward(loss)
    engine.step()
# optimizer.state_dict() is a local call (nanoGPT saves on rank 0 alone):
# rank 0 saves it, rank 1 reads it too, and training goes on.
sd = optimizer.state_dict()
assert sd["state"] and float(sd["state"][0]["step"]) == engine.global_steps
if dist.get_rank() == 0:
    torch.save(sd, os.path.join(args.out, "optimizer.pt"))
x = torch.randn(4, 6, generator=g).to(device)
y = torch.randint(0, 3, (4,), generator=g).to(device)
engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
engine.step()
t = torch.tensor([float(engine.global_steps)])
dist.all_reduce(t)
engine.save_checkpoint(os.path.join(args.out, "ckpt"),
                       client_state={"rank_sum": float(t)})
if dist.get_rank() == 0:
    with open(os.path.join(args.out, "done.json"), "w") as f:
        json.dump({"steps": engine.global_steps, "sum": float(t),
                   "world": dist.get_world_size(),
                   "stage": engine.zero_optimization_stage(),
                   "clip": engine.gradient_clipping()}, f)
engine.destroy()
