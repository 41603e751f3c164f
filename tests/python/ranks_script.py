"""A training script for zeroshard-launch (tests/python/test_launch.py):
each rank trains the tests' model on its own micro-batches and writes its
parameters to OUT.rank<R>.pt.

    python3 -m zeroshard.launch --workers=2 ranks_script.py OUT STEPS GAS CLIP STAGE [FAIL_RANK]

Environment (the tests' variations):
  ZS_TEST_EXTRA_STEP_RANK=R   rank R makes one optimizer step more
  ZS_TEST_SAVE=DIR:K          save a checkpoint in DIR after step K
  ZS_TEST_RESUME=DIR          start from DIR's newest checkpoint
  ZS_TEST_POD=ADDR,...:CRED   pod mode: the servers' addresses and
                              credentials in the config (no launcher)
  ZS_TEST_CKPT=DIR:K          zeroshard.checkpoint: DIR, every K steps
  ZS_TEST_DIE=R:S:A,...       rank R exits with code 5 after step S when
                              ZEROSHARD_RESTART is A (zeroshard-launch
                              --max_restarts)
  ZS_TEST_STAGED=1            the host-staged path (CUDA parameters')
                              forced on the CPU parameters
  ZS_TEST_MUON=1              Muon for the matrices group (MUON_PARAMS)
  ZS_TEST_PREC=bf16|fp16      the model in BF16, or test_engine's FP16
                              HalfLinears under dynamic loss scaling
  ZS_TEST_MODEL=mha|gpt       test_zero3_access's MhaNet, or models' tied
                              GPT (with their data and loss)
  ZS_TEST_REPLICAS=1          zeroshard.replicas 2
  ZS_TEST_PACE=SECONDS        rank 0 writes OUT.step (the steps done) after
                              each step, and every rank sleeps SECONDS
"""

import os
import sys
import time

import torch

import zeroshard
import zeroshard.engine
from test_engine import HalfLinears, MUON_PARAMS, batches, config, make_model

out, steps, gas, clip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
stage = int(sys.argv[5])
fail_rank = int(sys.argv[6]) if len(sys.argv) > 6 else -1
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if rank == fail_rank:
    sys.exit(3)
extra = int(os.environ.get("ZS_TEST_EXTRA_STEP_RANK", "-1"))
save = os.environ.get("ZS_TEST_SAVE", "")
resume = os.environ.get("ZS_TEST_RESUME", "")
pod = os.environ.get("ZS_TEST_POD", "")
ckpt = os.environ.get("ZS_TEST_CKPT", "")
attempt = os.environ.get("ZEROSHARD_RESTART", "0")
die_after = {int(s) for r, s, a in (d.split(":") for d in
             os.environ.get("ZS_TEST_DIE", "").split(",") if d)
             if int(r) == rank and a == attempt}

zeroshard.engine._FORCE_HOST_STAGING = os.environ.get("ZS_TEST_STAGED") == "1"
cfg = config(1, gas, clip, stage=stage)
if pod:
    addresses, credentials = pod.rsplit(":", 1)
    cfg["zeroshard"]["servers"] = addresses.split(",")
    cfg["zeroshard"]["credentials"] = credentials
if os.environ.get("ZS_TEST_MUON") == "1":
    cfg["zeroshard"]["param_groups"] = {"matrices": {"optimizer": {
        "type": "Muon", "params": MUON_PARAMS}}}
if ckpt:
    d, every = ckpt.rsplit(":", 1)
    cfg["zeroshard"]["checkpoint"] = {"dir": d, "every_steps": int(every)}
if os.environ.get("ZS_TEST_REPLICAS") == "1":
    cfg["zeroshard"]["replicas"] = 2
pace = float(os.environ.get("ZS_TEST_PACE", "0"))
prec = os.environ.get("ZS_TEST_PREC", "")
if prec == "bf16":
    cfg["bf16"] = {"enabled": True}
elif prec == "fp16":
    cfg["fp16"] = {"enabled": True, "initial_scale_power": 8}
data = batches((steps + 1) * world * gas, 4)
model = HalfLinears() if prec == "fp16" else make_model()
loss_fn = torch.nn.CrossEntropyLoss()
which = os.environ.get("ZS_TEST_MODEL", "")
if which == "mha":
    import test_zero3_access
    model = test_zero3_access.make("mha")
    data = test_zero3_access.data((steps + 1) * world * gas)
elif which == "gpt":
    import models
    model = models.gpt()
    data = models.gpt_batches((steps + 1) * world * gas)
    loss_fn = models.gpt_loss
engine, _, _, _ = zeroshard.initialize(model=model, config=cfg)
assert engine._staged == zeroshard.engine._FORCE_HOST_STAGING
if resume:
    engine.load_checkpoint(resume)
# Every rank past its start (its first gather of the weights) before the
# servers' counters are read, and (where every rank makes the same steps
# and none dies) every rank done before they are read again: the window
# holds the steps alone.
engine._barrier()
sent = sum(st["rpc_bytes_out"] for st in engine.inspect())
for s in range(engine.global_steps, steps + (1 if rank == extra else 0)):
    for m in range(gas):
        x, y = data[(s * world + rank) * gas + m]
        x = x.bfloat16() if prec == "bf16" else x
        engine.backward(loss_fn(engine(x).float(), y))
        engine.step()
    if save and s + 1 == int(save.rsplit(":", 1)[1]):
        engine.save_checkpoint(save.rsplit(":", 1)[0])
    if s + 1 in die_after:
        os._exit(5)
    if pace > 0:
        if rank == 0:
            with open(f"{out}.step.tmp", "w") as f:
                f.write(str(s + 1))
            os.replace(f"{out}.step.tmp", f"{out}.step")
        time.sleep(pace)
if stage == 3:
    # Parameters are released outside their module's forward; a forward
    # under no_grad gathers and releases every unit once more.
    with torch.no_grad():
        engine(data[0][0])
    assert all(p.numel() == 0 for p in model.parameters())
# What the servers sent over the steps (every rank's calls), and what this
# rank's model holds: the tests compare both.
same_steps = extra < 0 and not die_after
if same_steps:
    engine._barrier()
sent = sum(st["rpc_bytes_out"] for st in engine.inspect()) - sent
if same_steps:
    # No rank gathers the consolidated state below before every rank has
    # read the counters (a rank ahead once added a whole set of values).
    engine._barrier()
local = ([] if stage == 3 else
         [p.detach().clone() for _, p in model.named_parameters()])
torch.save({"sent": sent, "local": local, "total": engine._total},
           f"{out}.rank{rank}.extra.pt")
sd = engine.consolidated_state_dict()
torch.save([sd[n] for n, _ in model.named_parameters()], f"{out}.rank{rank}.pt")
engine.close()
