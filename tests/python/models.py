"""The models the front-end's tests train: a nanoGPT-shaped GPT with tied
embeddings, a CNN with BatchNorm, a model with frozen layers and one with
an unused parameter. Each is built from a seed, so a reference and the
engine start from the same values."""

import math

import torch
from torch import nn


# zero_optimization keys under which stage 3 keeps a unit gathered only
# while it computes: what the tests of the gather-and-release machinery run
# under (DeepSpeed's defaults keep a small model's units gathered for the
# whole step: test_zero3_keep.py).
ZERO3_RELEASE = {"stage3_max_reuse_distance": 0,
                 "stage3_param_persistence_threshold": 0,
                 "stage3_prefetch_bucket_size": 1}   # one unit ahead


def zero_section(stage):
    """The zero_optimization section of the machinery tests' configs."""
    return dict({"stage": stage}, **(ZERO3_RELEASE if stage == 3 else {}))


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
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc_proj(nn.functional.gelu(self.fc(self.ln_2(x))))


class TinyGPT(nn.Module):
    """nanoGPT's shape: token and position embeddings, pre-norm blocks, a
    final norm, and a head tied to the token embedding."""

    def __init__(self, vocab=32, context=8, width=16, layers=2, heads=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight   # tied

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gpt(seed=0):
    torch.manual_seed(seed)
    return TinyGPT()


def gpt_batches(n, micro=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        tok = torch.randint(0, 32, (micro, 9), generator=g)
        out.append((tok[:, :-1], tok[:, 1:]))
    return out


def gpt_loss(logits, y):
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       y.reshape(-1))


def cnn(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1, stride=2), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Flatten(), nn.Linear(4 * 4 * 4, 3))


def cnn_batches(n, micro=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(micro, 1, 8, 8, generator=g),
             torch.randint(0, 3, (micro,), generator=g)) for _ in range(n)]


def frozen(seed=0):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(12, 16), nn.Tanh(), nn.Linear(16, 16),
                      nn.Tanh(), nn.Linear(16, 5))
    for p in m[0].parameters():
        p.requires_grad_(False)
    return m


class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(12, 5)
        self.unused = nn.Linear(12, 5)   # never called

    def forward(self, x):
        return self.used(x)


def with_unused(seed=0):
    torch.manual_seed(seed)
    return WithUnused()
