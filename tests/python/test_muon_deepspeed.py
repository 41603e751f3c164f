"""DeepSpeed 0.19's "Muon" optimizer section through the front-end: Muon
on the weights a script marks use_muon=True (convolution kernels viewed as
(out, in * kh * kw), as the published code does), AdamW with
MuonWithAuxAdam's defaults on the rest, against an in-process run of the
published Muon update (Keller Jordan's muon_update over
zeropower_via_newtonschulz5, as tests/fixtures/make_muon_golden.py writes
it) and torch's AdamW: a CNN and a small ViT (patch embedding, class token,
position embedding, one torch encoder layer, head)."""

import os
import sys

import pytest
import torch

import zeroshard

from test_deepspeed_api import base_config

# The published zeropower_via_newtonschulz5, as the Muon fixtures write it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "fixtures"))
from make_muon_golden import zeropower  # noqa: E402


def muon_update(grad, momentum, beta=0.95, nesterov=True):
    momentum.lerp_(grad, 1 - beta)
    update = grad.lerp_(momentum, beta) if nesterov else momentum
    if update.ndim == 4:
        update = update.view(len(update), -1)
    update = zeropower(update)
    update *= max(1, grad.size(-2) / grad.size(-1)) ** 0.5
    return update


def cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, (3, 2)), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 5, 16), torch.nn.ReLU(),
        torch.nn.Linear(16, 5))


class TinyViT(torch.nn.Module):
    def __init__(self, dim=16, patch=4, image=8, classes=5):
        super().__init__()
        self.conv_proj = torch.nn.Conv2d(3, dim, patch, stride=patch)
        self.class_token = torch.nn.Parameter(torch.zeros(1, 1, dim))
        n = (image // patch) ** 2 + 1
        self.pos_embedding = torch.nn.Parameter(torch.randn(1, n, dim) * 0.02)
        self.encoder = torch.nn.TransformerEncoderLayer(
            dim, 2, dim_feedforward=32, dropout=0.0, batch_first=True,
            norm_first=True)
        self.ln = torch.nn.LayerNorm(dim)
        self.heads = torch.nn.Linear(dim, classes)

    def forward(self, x):
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(len(x), -1, -1), x], dim=1)
        x = self.encoder(x + self.pos_embedding)
        return self.heads(self.ln(x[:, 0]))


def vit():
    torch.manual_seed(0)
    model = TinyViT()
    # The key part of the attention's input bias has a gradient of zero
    # (softmax does not see it) made of rounding noise, which Adam's
    # normalization turns into steps of +-lr either way: frozen in both runs.
    for m in model.modules():
        if isinstance(m, torch.nn.MultiheadAttention):
            m.in_proj_bias.requires_grad_(False)
    return model


def mark(model, head):
    # As DeepSpeed asks: Muon for the hidden weights of two dimensions or
    # more, AdamW for the head, the embeddings and every 1-D tensor.
    for name, p in model.named_parameters():
        p.use_muon = (p.dim() >= 2 and not name.startswith(head)
                      and "embedding" not in name and "class_token" not in name)


def batches(n, shape):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(4, *shape, generator=g),
             torch.randint(0, 5, (4,), generator=g)) for _ in range(n)]


def reference(model, data, lr, adam_lr):
    muon = [p for p in model.parameters() if p.use_muon]
    rest = [p for p in model.parameters() if not p.use_muon]
    adam = torch.optim.AdamW(rest, lr=adam_lr, betas=(0.9, 0.95), eps=1e-10,
                             weight_decay=0)
    bufs = {id(p): torch.zeros_like(p) for p in muon}
    for x, y in data:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        with torch.no_grad():
            for p in muon:
                p.add_(muon_update(p.grad.clone(), bufs[id(p)]).view(p.shape),
                       alpha=-lr)
        adam.step()
        model.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("make,head,shape", [
    (cnn, "7.", (3, 8, 8)), (vit, "heads.", (3, 8, 8))])
def test_muon_as_deepspeed_writes_it_trains_as_the_published_code(
        make, head, shape):
    data = batches(4, shape)
    ref = make()
    mark(ref, head)
    want = reference(ref, data, lr=0.02, adam_lr=3e-4)
    model = make()
    mark(model, head)
    engine, _, _, _ = zeroshard.initialize(
        model=model, model_parameters=model.parameters(),
        config=base_config(optimizer={"type": "Muon", "params": {
            "muon_lr": 0.02, "adam_lr": 3e-4}}))
    try:
        for x, y in data:
            engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
            engine.step()
    finally:
        engine.close()
    got = [p.detach() for p in model.parameters()]
    start = [p.detach() for p in make().parameters()]
    for (name, p), g, w, s in zip(model.named_parameters(), got, want, start):
        if not p.requires_grad:
            continue
        moved = (w - s).abs().max().item()
        assert moved > 0, name
        # The Newton-Schulz products sum in another order than torch's.
        assert (g - w).abs().max().item() <= 1e-3 * moved + 1e-7, name
