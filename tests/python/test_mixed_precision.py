"""Mixed precision of the whole module, as DeepSpeed's module.bfloat16():
under BF16 a model with BatchNorm and a frozen block trains at stages 1, 2
and 3, bit for bit the reference: the same module cast to BF16 (its
buffers and frozen parameters too), FP32 masters of the trained parameters
stepped by torch's AdamW with the BF16 gradients widened."""

import copy

import pytest
import torch

import zeroshard


def bn_cnn(seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(8, 5))
    for p in m[3].parameters():   # a frozen block
        p.requires_grad_(False)
    return m


def batches(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 3, 8, 8, generator=g),
             torch.randint(0, 5, (4,), generator=g)) for _ in range(n)]


def reference(data, steps, clip):
    """The module in BF16 (buffers and frozen parameters included), FP32
    masters of its trained parameters stepped by torch's AdamW."""
    master = bn_cnn()
    low = copy.deepcopy(master).to(torch.bfloat16)
    trained = [(pm, pl) for pm, pl in zip(master.parameters(),
                                          low.parameters()) if pm.requires_grad]
    opt = torch.optim.AdamW([pm for pm, _ in trained], lr=3e-3,
                            betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    for s in range(steps):
        x, y = data[s]
        torch.nn.functional.cross_entropy(low(x.bfloat16()).float(),
                                          y).backward()
        for pm, pl in trained:
            pm.grad = pl.grad.float()
            pl.grad = None
        torch.nn.utils.clip_grad_norm_([pm for pm, _ in trained], clip)
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            for pm, pl in trained:
                pl.copy_(pm.to(torch.bfloat16))
    return master, low


def config(stage, servers, **extra):
    """AdamW as the references step it, at `stage` on `servers` servers."""
    c = {"train_micro_batch_size_per_gpu": 4,
         "zero_optimization": {"stage": stage},
         "optimizer": {"type": "AdamW", "params": {
             "lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8,
             "weight_decay": 0.01}},
         "zeroshard": {"servers": servers}}
    c.update(extra)
    return c


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_a_batchnorm_cnn_with_a_frozen_block_trains_under_bf16(stage):
    steps, clip = 3, 0.5
    data = batches(steps)
    master, low = reference(data, steps, clip)
    model = bn_cnn()
    engine, _, _, _ = zeroshard.initialize(
        model=model, model_parameters=model.parameters(),
        config=config(stage, 2, gradient_clipping=clip,
                      bf16={"enabled": True}))
    try:
        for x, y in data:
            engine.backward(torch.nn.functional.cross_entropy(
                engine(x.bfloat16()).float(), y))
            engine.step()
        masters = engine.consolidated_state_dict()
        for name, p in master.named_parameters():
            if p.requires_grad:
                assert torch.equal(masters[name], p), name
        for (name, b), rb in zip(model.named_buffers(), low.buffers()):
            assert b.dtype == rb.dtype and torch.equal(b, rb), name
        for p in model[3].parameters():
            assert p.dtype == torch.bfloat16
    finally:
        engine.close()


def test_torch_autocast_from_the_config_equals_torchs():
    # DeepSpeed's "torch_autocast": FP32 parameters and masters, the forward
    # under torch.autocast(bfloat16): bit for bit torch doing the same.
    data = batches(3)
    ref = bn_cnn()
    for p in ref.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(ref.parameters(), lr=3e-3, betas=(0.9, 0.95),
                            eps=1e-8, weight_decay=0.01)
    for x, y in data:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            out = ref(x)
        torch.nn.functional.cross_entropy(out.float(), y).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
    model = bn_cnn()
    for p in model.parameters():
        p.requires_grad_(True)
    engine, _, _, _ = zeroshard.initialize(model=model, config=config(
        2, 1, torch_autocast={"enabled": True, "dtype": "bfloat16"}))
    try:
        for x, y in data:
            engine.backward(torch.nn.functional.cross_entropy(
                engine(x).float(), y))
            engine.step()
        assert all(p.dtype == torch.float32 for p in model.parameters())
        for (n, p), r in zip(model.named_parameters(), ref.parameters()):
            assert torch.equal(p, r), n
    finally:
        engine.close()
    with pytest.raises(ValueError, match="give one"):
        zeroshard.initialize(model=bn_cnn(), config={
            "train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": True},
            "torch_autocast": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})


def test_fp16_on_the_cpu_with_a_convolution_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"fp16 on the CPU: module 0 \(Conv2d\)"):
        zeroshard.initialize(model=bn_cnn(), config={
            "train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zeroshard": {"servers": 1}})
