"""The front-end on the models users bring: a nanoGPT-shaped GPT with tied
embeddings (stages 2 and 3, named units, activation checkpointing), a CNN
with BatchNorm (its buffers checkpointed), frozen layers and an unused
parameter; each bit for bit against torch.optim.AdamW in one process."""

import os

import pytest
import torch

import zeroshard
import models
from test_engine import config


def reference(model, data, loss_fn, steps, gas, wd=0.01):
    """torch's AdamW over the trainable parameters; a parameter with no
    gradient gets a zero one (the servers see zeros for it, as DeepSpeed's
    flat partitions do)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=wd)
    out = []
    for s in range(steps):
        for m in range(gas):
            x, y = data[s * gas + m]
            (loss_fn(model(x), y) / gas).backward()
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()
        out.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return out


def train(model, data, loss_fn, steps, gas, cfg, check=None):
    engine, _, _, _ = zeroshard.initialize(model=model, config=cfg)
    got = []
    try:
        for s in range(steps):
            for m in range(gas):
                x, y = data[s * gas + m]
                engine.backward(loss_fn(engine(x), y))
                engine.step()
            got.append(engine.consolidated_state_dict())
        if check:
            check(engine)
    finally:
        engine.close()
    return got


def assert_same(got, ref, names):
    for s, (g, r) in enumerate(zip(got, ref)):
        assert set(g) == set(names), sorted(set(g) ^ set(names))
        for n in names:
            assert torch.equal(g[n], r[n]), (
                f"step {s + 1}, {n}: max |diff| {(g[n] - r[n]).abs().max()}")


@pytest.mark.parametrize("stage,units,policy", [
    (2, None, "none"),
    (3, None, "none"),   # the head's read of the tied weight gathers it
    (3, {"min_params": 1500}, "none"),
    (3, {"min_params": 1500}, "every_block"),
    (2, ["h.*"], "every_block")])
def test_tied_gpt(stage, units, policy):
    steps, gas = 3, 2
    data = models.gpt_batches(steps * gas)
    ref = reference(models.gpt(), data, models.gpt_loss, steps, gas)
    cfg = config(2, gas, 1.0, stage=stage,
                 activation_checkpointing={"policy": policy})
    cfg["zeroshard"]["activation_checkpointing"] = cfg.pop(
        "activation_checkpointing")
    if units is not None:
        cfg["zeroshard"]["units"] = units
    model = models.gpt()
    names = [n for n, _ in model.named_parameters()]   # the tie once
    assert "lm_head.weight" not in names
    calls = []
    model.h[1].fc.register_forward_pre_hook(lambda *_: calls.append(1))

    def check(engine):
        # A checkpointed block runs its forward again in the backward.
        if policy != "none":
            assert engine.checkpointed_units == ["h.0", "h.1"]
            assert len(calls) == 2 * steps * gas
        else:
            assert engine.checkpointed_units == []
            assert len(calls) == steps * gas
    assert_same(train(model, data, models.gpt_loss, steps, gas, cfg, check),
                ref, names)


def test_cnn_with_batchnorm_and_its_buffers_in_the_checkpoint(tmp_path):
    steps, gas = 3, 1
    data = models.cnn_batches(steps + 1)
    loss_fn = torch.nn.CrossEntropyLoss()
    ref_model = models.cnn()
    ref = reference(ref_model, data, loss_fn, steps, gas)
    model = models.cnn()
    engine, _, _, _ = zeroshard.initialize(model=model,
                                           config=config(1, gas, 1.0))
    try:
        for s in range(steps):
            engine.backward(loss_fn(engine(data[s][0]), data[s][1]))
            engine.step()
            sd = engine.consolidated_state_dict()
            for n, r in ref[s].items():
                assert torch.equal(sd[n], r), (s, n)
        for (n, b), (_, rb) in zip(model.named_buffers(),
                                   ref_model.named_buffers()):
            assert torch.equal(b, rb), n   # running statistics, same bits
        saved = {n: b.clone() for n, b in model.named_buffers()}
        path = engine.save_checkpoint(str(tmp_path))
        assert os.path.exists(os.path.join(path, "zeroshard_rank0.pt"))
        engine.backward(loss_fn(engine(data[steps][0]), data[steps][1]))
        engine.step()
        assert not torch.equal(model[1].running_mean, saved["1.running_mean"])
        engine.load_checkpoint(str(tmp_path))
        for n, b in model.named_buffers():
            assert torch.equal(b, saved[n]), n
    finally:
        engine.close()


@pytest.mark.parametrize("stage", [2, 3])
def test_frozen_layers_are_not_sent(stage):
    steps = 3
    data = __import__("test_engine").batches(steps, 4)
    loss_fn = torch.nn.CrossEntropyLoss()
    ref = reference(models.frozen(), data, loss_fn, steps, 1)
    model = models.frozen()
    frozen_before = model[0].weight.detach().clone()
    got = train(model, data, loss_fn, steps, 1, config(1, 1, 1.0, stage=stage))
    names = ["2.weight", "2.bias", "4.weight", "4.bias"]
    assert_same(got, ref, names)
    assert torch.equal(model[0].weight, frozen_before)


@pytest.mark.parametrize("stage", [2, 3])
def test_an_unused_parameter_trains_on_a_zero_gradient(stage):
    steps, gas = 3, 2
    data = __import__("test_engine").batches(steps * gas, 4)
    loss_fn = torch.nn.CrossEntropyLoss()
    ref = reference(models.with_unused(), data, loss_fn, steps, gas)
    got = train(models.with_unused(), data, loss_fn, steps, gas,
                config(2, gas, 1.0, stage=stage))
    assert_same(got, ref, ["used.weight", "used.bias", "unused.weight",
                           "unused.bias"])
