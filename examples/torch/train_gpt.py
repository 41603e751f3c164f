"""A nanoGPT-style GPT in plain torch, trained through zeroshard on the
main job's corpus and shape (byte tokens, 4 layers, 4 heads, width 128,
context 128): ZeRO-3 with each block a unit, BF16, every block's
activations checkpointed (gpt_zero3.json).

    bash scripts/run-torch-example.sh gpt [--steps=N] [--out=DIR]
    # or, built already:
    PYTHONPATH=build/python /usr/bin/python3 examples/torch/train_gpt.py
    build/bin/zeroshard-launch --workers=2 examples/torch/train_gpt.py
"""

import math
import os

import torch
from torch import nn

import example_loop

HERE = os.path.dirname(os.path.abspath(__file__))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.attn = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc_proj(nn.functional.gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=256, context=128, width=128, layers=4, heads=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight   # tied, as GPT-2
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class Windows(torch.utils.data.Dataset):
    """Every context-long window of the byte stream that starts at a
    multiple of `stride`: (tokens, the next tokens)."""

    def __init__(self, data, context, stride):
        self.data = data.long()
        self.context = context
        self.n = (len(data) - context - 1) // stride
        self.stride = stride

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        s = i * self.stride
        w = self.data[s:s + self.context + 1]
        return w[:-1], w[1:]


def loss_fn(logits, y):
    return nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                       y.reshape(-1))


def main():
    args, cfg = example_loop.parse_flags(
        __doc__.splitlines()[0], os.path.join(HERE, "gpt_zero3.json"),
        "out/torch-gpt", 200)
    torch.manual_seed(cfg["zeroshard"].get("seed", 42))
    corpus = example_loop.licenses_corpus()
    split = len(corpus) - len(corpus) // 20          # 5% for validation
    context = 128
    train_set = Windows(corpus[:split], context, stride=context // 2)
    val = Windows(corpus[split:], context, stride=context)
    val_batch = torch.utils.data.default_collate([val[i] for i in range(min(16, len(val)))])

    def evaluate(engine):
        with torch.no_grad():
            return loss_fn(engine(val_batch[0]), val_batch[1]).item()

    example_loop.train(args, cfg, GPT(), train_set, loss_fn, context,
                       evaluate, "torch GPT (ZeRO-3, BF16)")


if __name__ == "__main__":
    main()
