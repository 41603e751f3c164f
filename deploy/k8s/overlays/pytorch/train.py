"""An example script written for DeepSpeed (replace it with yours): a small
next-token model on synthetic tokens, with DeepSpeed's argparse flags,
deepspeed.initialize and checkpoints in --ckpt (the PVC at /ckpt), resumed
after a restart."""

import argparse

import deepspeed
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--ckpt", default="/ckpt")
parser = deepspeed.add_config_arguments(parser)
args = parser.parse_args()
deepspeed.init_distributed()

VOCAB, CONTEXT, WIDTH = 256, 64, 128
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Embedding(VOCAB, WIDTH), torch.nn.LayerNorm(WIDTH),
    torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
    torch.nn.Linear(4 * WIDTH, VOCAB))
engine, optimizer, _, scheduler = deepspeed.initialize(
    args=args, model=model, model_parameters=model.parameters())
engine.load_checkpoint(args.ckpt)   # (None, None) on a first start
g = torch.Generator().manual_seed(1000 + deepspeed.comm.get_rank())
while engine.global_steps < args.steps:
    tokens = torch.randint(0, VOCAB, (engine.train_micro_batch_size_per_gpu(),
                                      CONTEXT + 1), generator=g)
    logits = engine(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                             tokens[:, 1:].reshape(-1))
    engine.backward(loss)
    engine.step()
engine.save_checkpoint(args.ckpt)
engine.destroy()
