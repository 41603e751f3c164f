"""The PyTorch front-end against torch itself: a torch model trained through
zeroshard.initialize (servers holding the FP32 masters and AdamW's state)
ends every step with the same parameter bits as the same model trained by
torch.optim.AdamW with clip_grad_norm_ and gradient accumulation.

    PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python
"""

import copy
import importlib.util
import os
import sys

import pytest
import torch

import zeroshard


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(12, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
        torch.nn.Linear(32, 5))


def batches(n, micro, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(micro, 12, generator=g),
             torch.randint(0, 5, (micro,), generator=g)) for _ in range(n)]


def config(servers=2, gas=2, clip=1.0, wd=0.01, stage=2, **extra):
    # Stage 3 keeps a unit gathered only while it computes, so the tests
    # here exercise the gathers and releases (models.ZERO3_RELEASE).
    import models
    c = {"train_micro_batch_size_per_gpu": 4,
         "zero_optimization": models.zero_section(stage),
         "gradient_accumulation_steps": gas,
         "gradient_clipping": clip,
         "optimizer": {"type": "AdamW", "params": {
             "lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8,
             "weight_decay": wd}},
         "zeroshard": {"servers": servers}}
    c.update(extra)
    return c


def torch_reference(model, data, gas, clip, wd, steps, groups=None):
    opt = torch.optim.AdamW(groups or model.parameters(), lr=3e-3,
                            betas=(0.9, 0.95), eps=1e-8, weight_decay=wd)
    loss_fn = torch.nn.CrossEntropyLoss()
    history = []
    for s in range(steps):
        for m in range(gas):
            x, y = data[s * gas + m]
            (loss_fn(model(x), y) / gas).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
        history.append([p.detach().clone() for p in model.parameters()])
    return history


def weights(engine, model, stage):
    """The model's parameters; under stage 3 (empty outside a forward) the
    servers' FP32 masters, which an FP32 model equals."""
    if stage < 3:
        return [p.detach() for p in model.parameters()]
    for p in model.parameters():
        assert p.numel() == 0   # released outside the module's forward
    sd = engine.consolidated_state_dict()
    return [sd[n] for n, _ in model.named_parameters()]


# Stages 1 and 2 reach the local servers through shared memory unless the
# config says otherwise (the last case: gRPC alone); stage 3 over gRPC.
@pytest.mark.parametrize("servers,gas,clip,stage,shm", [
    (1, 1, 0.0, 2, True), (2, 2, 1.0, 2, True), (3, 3, 0.05, 1, True),
    (2, 2, 1.0, 3, True), (1, 3, 0.05, 3, True), (2, 2, 1.0, 2, False)])
def test_matches_torch_adamw_bit_for_bit(servers, gas, clip, stage, shm):
    steps = 4
    data = batches(steps * gas, 4)
    ref = torch_reference(make_model(), data, gas, clip, 0.01, steps)

    model = make_model()
    c = config(servers, gas, clip, stage=stage)
    c["zeroshard"]["shared_memory"] = shm
    engine, _, _, _ = zeroshard.initialize(
        model=model, model_parameters=model.parameters(), config=c)
    loss_fn = torch.nn.CrossEntropyLoss()
    try:
        shm = shm and stage < 3
        assert engine.shared_memory_servers == (servers if shm else 0)
        calls = [s["rpc_calls"].get("OpenRegion", 0)
                 for s in engine.inspect()]
        assert calls == [1 if shm else 0] * servers
        for s in range(steps):
            for m in range(gas):
                x, y = data[s * gas + m]
                engine.backward(loss_fn(engine(x), y))
                engine.step()
            assert engine.global_steps == s + 1
            for i, (p, r) in enumerate(zip(weights(engine, model, stage),
                                           ref[s])):
                assert torch.equal(p, r), (
                    f"step {s + 1}, parameter {i}: max |diff| "
                    f"{(p - r).abs().max().item()}")
        if stage == 3:   # steps after the first gathered ahead
            assert engine._hooks.prefetched > 0
        # The servers' masters are the model's values (FP32 training).
        if stage < 3:
            sd = engine.consolidated_state_dict()
            for name, p in model.named_parameters():
                assert torch.equal(sd[name], p.detach()), name
    finally:
        engine.close()


def test_param_group_dicts_and_the_torch_style_loop():
    steps = 3
    data = batches(steps, 4)
    ref_model = make_model()
    decay = [p for n, p in ref_model.named_parameters() if p.dim() > 1]
    rest = [p for n, p in ref_model.named_parameters() if p.dim() <= 1]
    ref = torch_reference(ref_model, data, 1, 0.0, 0.1, steps,
                          groups=[{"params": decay, "weight_decay": 0.1},
                                  {"params": rest, "weight_decay": 0.0}])
    model = make_model()
    decay = [p for n, p in model.named_parameters() if p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if p.dim() <= 1]
    engine, optimizer, _, _ = zeroshard.initialize(
        model=model, config=config(1, 1, 0.0, wd=0.1),
        model_parameters=[{"params": decay, "weight_decay": 0.1},
                          {"params": rest, "weight_decay": 0.0}])
    loss_fn = torch.nn.CrossEntropyLoss()
    try:
        for s in range(steps):
            x, y = data[s]
            loss_fn(model(x), y).backward()   # no engine call in between
            optimizer.step()
            optimizer.zero_grad()
            for p, r in zip(model.parameters(), ref[s]):
                assert torch.equal(p, r)
        assert engine.global_steps == steps
    finally:
        engine.close()


def test_checkpoint_round_trip(tmp_path):
    data = batches(4, 4)
    model = make_model()
    engine, _, _, _ = zeroshard.initialize(
        model=model, config=config(2, 1, 1.0))
    loss_fn = torch.nn.CrossEntropyLoss()
    try:
        for s in range(2):
            engine.backward(loss_fn(engine(data[s][0]), data[s][1]))
            engine.step()
        path = engine.save_checkpoint(str(tmp_path), client_state={"k": 7})
        assert os.path.basename(path) == "step-%020d" % 2
        saved = [p.detach().clone() for p in model.parameters()]
        for s in range(2, 4):
            engine.backward(loss_fn(engine(data[s][0]), data[s][1]))
            engine.step()
        after = [p.detach().clone() for p in model.parameters()]
        assert not all(torch.equal(a, b) for a, b in zip(saved, after))
        got, client = engine.load_checkpoint(str(tmp_path))
        assert got == path and client == {"k": 7}
        assert engine.global_steps == 2
        for p, s in zip(model.parameters(), saved):
            assert torch.equal(p, s)
        # Training on from the restored step repeats the same steps.
        for s in range(2, 4):
            engine.backward(loss_fn(engine(data[s][0]), data[s][1]))
            engine.step()
        for p, a in zip(model.parameters(), after):
            assert torch.equal(p, a)
    finally:
        engine.close()


def test_bad_config_names_the_key():
    model = make_model()
    with pytest.raises(zeroshard.ZeroshardError, match="gradient_clipping"):
        zeroshard.initialize(model=model, config=config(1, 1, -1.0))
    with pytest.raises(zeroshard.ZeroshardError, match="zeroshard.servers"):
        zeroshard.initialize(model=model,
                             config=config(1, 1, 0.0) | {"zeroshard": {"servers": "x"}})


def masters_reference(master, dtype, data, steps, gas, clip=0.0, scale=1.0,
                      inputs=lambda x: x):
    """FP32 masters stepped by torch's AdamW under a copy of the model in
    `dtype`: its gradients of (loss / gas) * scale, widened to FP32 and
    unscaled, clipped there; the copy takes the masters' rounding after each
    step. The masters after each step."""
    low = copy.deepcopy(master).to(dtype)
    opt = torch.optim.AdamW(master.parameters(), lr=3e-3, betas=(0.9, 0.95),
                            eps=1e-8, weight_decay=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    ref = []
    for s in range(steps):
        for m in range(gas):
            x, y = data[s * gas + m]
            ((loss_fn(low(inputs(x)).float(), y) / gas) * scale).backward()
        for pm, pl in zip(master.parameters(), low.parameters()):
            pm.grad = pl.grad.float() * (1.0 / scale)
            pl.grad = None
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(master.parameters(), clip)
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            for pm, pl in zip(master.parameters(), low.parameters()):
                pl.copy_(pm.to(dtype))
        ref.append([p.detach().clone() for p in master.parameters()])
    return ref


@pytest.mark.parametrize("stage", [2, 3])
def test_bf16_is_fp32_masters_under_a_bf16_model(stage):
    # The reference: FP32 masters stepped by torch's AdamW with the BF16
    # gradients (widened, clipped in FP32), the model their BF16 rounding.
    steps, gas, clip = 3, 2, 0.5
    data = batches(steps * gas, 4)
    ref = masters_reference(make_model(), torch.bfloat16, data, steps, gas,
                            clip=clip, inputs=lambda x: x.bfloat16())
    loss_fn = torch.nn.CrossEntropyLoss()

    model = make_model()
    engine, _, _, _ = zeroshard.initialize(
        model=model, config=config(2, gas, clip, stage=stage,
                                   bf16={"enabled": True}))
    try:
        for s in range(steps):
            for m in range(gas):
                x, y = data[s * gas + m]
                engine.backward(loss_fn(engine(x.bfloat16()).float(), y))
                engine.step()
            if stage == 3:   # released outside a forward: inside one
                with zeroshard.GatheredParameters(list(model.parameters())):
                    got = [p.detach().clone() for p in model.parameters()]
            else:
                got = list(model.parameters())
            for p, r in zip(got, ref[s]):
                assert p.dtype == torch.bfloat16
                assert torch.equal(p, r.bfloat16())
        sd = engine.consolidated_state_dict()
        for (name, _), r in zip(model.named_parameters(), ref[-1]):
            assert torch.equal(sd[name], r), name
    finally:
        engine.close()


class HalfLinears(torch.nn.Module):
    """FP16 parameters computed in FP32 (torch's CPU has no FP16 matmul):
    the gradients still arrive in FP16, as on a GPU."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(12, 32)
        self.b = torch.nn.Linear(32, 5)

    def forward(self, x):
        h = torch.nn.functional.linear(x, self.a.weight.float(), self.a.bias.float())
        h = torch.nn.functional.gelu(h)
        return torch.nn.functional.linear(h, self.b.weight.float(), self.b.bias.float())


def fp16_config(power, gas=1):
    return config(1, gas, 0.0, fp16={"enabled": True,
                                     "initial_scale_power": power,
                                     "hysteresis": 2})


def test_fp16_is_fp32_masters_with_the_loss_scale_removed():
    steps, gas, scale = 3, 2, 2.0 ** 8
    data = batches(steps * gas, 4)
    ref = masters_reference(HalfLinears(), torch.float16, data, steps, gas,
                            scale=scale)
    loss_fn = torch.nn.CrossEntropyLoss()

    model = HalfLinears()
    engine, _, _, _ = zeroshard.initialize(model=model,
                                           config=fp16_config(8, gas))
    try:
        for s in range(steps):
            for m in range(gas):
                x, y = data[s * gas + m]
                engine.backward(loss_fn(engine(x), y))
                engine.step()
            for p, r in zip(model.parameters(), ref[s]):
                assert p.dtype == torch.float16
                assert torch.equal(p, r.half())
        assert engine.loss_scale() == scale
    finally:
        engine.close()


def test_fp16_overflow_skips_the_step_and_backs_the_scale_off():
    data = batches(20, 4)
    model = HalfLinears()
    engine, _, _, _ = zeroshard.initialize(model=model,
                                           config=fp16_config(30))
    loss_fn = torch.nn.CrossEntropyLoss()
    before = [p.detach().clone() for p in model.parameters()]
    scales = []
    try:
        for s in range(20):
            x, y = data[s]
            scales.append(engine.loss_scale())
            engine.backward(loss_fn(engine(x), y))
            engine.step()
            if engine.loss_scale() == scales[-1] and s > 1:
                break   # a clean step: the scale stayed
        # Hysteresis 2: the first overflow keeps the scale, the next halve it.
        assert scales[0] == scales[1] == 2.0 ** 30
        assert scales[2] == 2.0 ** 29
        # Every skipped step left the weights; the clean one moved them.
        assert engine.global_steps == len(scales)
        assert not all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
        inspected = engine.inspect()
        assert all(i["optimizer_step"] == 1 for i in inspected)
    finally:
        engine.close()


def test_gathered_parameters_under_stage_3():
    model = make_model()
    want = [p.detach().clone() for p in model.parameters()]
    engine, _, _, _ = zeroshard.initialize(model=model,
                                           config=config(2, 1, 0.0, stage=3))
    try:
        assert all(p.numel() == 0 for p in model.parameters())
        first = model[0].weight
        with zeroshard.GatheredParameters([first]):
            assert torch.equal(first, want[0])
            assert model[3].weight.numel() == 0   # another unit: not gathered
        assert first.numel() == 0
        with pytest.raises(ValueError, match="modifier_rank=1 is not a rank"):
            with zeroshard.GatheredParameters([first], modifier_rank=1):
                pass
    finally:
        engine.close()


@pytest.mark.parametrize("stage", [2, 3])
def test_gathered_parameters_writes_go_to_the_servers(stage):
    # Two steps, then a write inside GatheredParameters(modifier_rank=0),
    # then two more: every step equals torch's AdamW with the same write
    # made to its parameter between the steps (its moments kept).
    steps, gas = 4, 1
    data = batches(steps, 4)
    loss_fn = torch.nn.CrossEntropyLoss()
    ref_model = make_model()
    opt = torch.optim.AdamW(ref_model.parameters(), lr=3e-3,
                            betas=(0.9, 0.95), eps=1e-8, weight_decay=0.01)
    model = make_model()
    engine, _, _, _ = zeroshard.initialize(
        model=model, config=config(2, gas, 1.0, stage=stage))
    try:
        for s in range(steps):
            if s == 2:
                with torch.no_grad():
                    ref_model[0].weight[3].fill_(0.25)
                    ref_model[3].bias.mul_(-1.0)
                with zeroshard.GatheredParameters(
                        [model[0].weight, model[3].bias], modifier_rank=0):
                    with torch.no_grad():
                        model[0].weight[3].fill_(0.25)
                        model[3].bias.mul_(-1.0)
                assert engine.global_steps == 2
                sd = engine.consolidated_state_dict()
                assert torch.equal(sd["0.weight"], ref_model[0].weight)
                assert torch.equal(sd["3.bias"], ref_model[3].bias)
            x, y = data[s]
            loss_fn(ref_model(x), y).backward()
            torch.nn.utils.clip_grad_norm_(ref_model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            engine.backward(loss_fn(engine(x), y))
            engine.step()
            for p, r in zip(weights(engine, model, stage),
                            ref_model.parameters()):
                assert torch.equal(p, r), f"step {s + 1}"
    finally:
        engine.close()


def test_gathered_parameters_writes_keep_the_untouched_fp32_masters():
    # A BF16 model: the elements the block did not change keep their FP32
    # master values, not their BF16 rounding.
    model = make_model()
    engine, _, _, _ = zeroshard.initialize(
        model=model, config=config(1, 1, 0.0, bf16={"enabled": True}))
    loss_fn = torch.nn.CrossEntropyLoss()
    try:
        x, y = batches(1, 4)[0]
        engine.backward(loss_fn(engine(x.bfloat16()).float(), y))
        engine.step()
        before = engine.consolidated_state_dict()["0.weight"]
        assert not torch.equal(before, before.bfloat16().float())
        with zeroshard.GatheredParameters([model[0].weight], modifier_rank=0):
            with torch.no_grad():
                model[0].weight[0, :5] = 2.0
        after = engine.consolidated_state_dict()["0.weight"]
        assert torch.equal(after[0, :5], torch.full((5,), 2.0))
        assert torch.equal(after[0, 5:], before[0, 5:])
        assert torch.equal(after[1:], before[1:])
        assert torch.equal(model[0].weight, after.bfloat16())
    finally:
        engine.close()


def test_lion_on_the_servers_is_the_published_update_bit_for_bit():
    # "optimizer": {"type": "Lion"}: the servers keep one slot (exp_avg) and
    # apply Chen et al.'s update; the reference is that update in torch ops
    # on the same model, with torch's clipping.
    steps, lr, betas, wd = 4, 3e-4, (0.9, 0.99), 0.1
    data = batches(steps, 4)
    loss_fn = torch.nn.CrossEntropyLoss()
    ref = make_model()
    moments = [torch.zeros_like(p) for p in ref.parameters()]
    model = make_model()
    cfg = config(2, 1, 1.0)
    cfg["optimizer"] = {"type": "Lion", "params": {
        "lr": lr, "betas": list(betas), "weight_decay": wd}}
    engine, _, _, _ = zeroshard.initialize(model=model, config=cfg)
    try:
        assert list(engine.inspect()[0]["state_norms"]) == ["exp_avg"]
        for s in range(steps):
            x, y = data[s]
            loss_fn(ref(x), y).backward()
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
            with torch.no_grad():
                for p, m in zip(ref.parameters(), moments):
                    p.mul_(1 - lr * wd)
                    update = m.clone().mul_(betas[0]).add(
                        p.grad, alpha=1 - betas[0]).sign_()
                    p.add_(update, alpha=-lr)
                    m.mul_(betas[1]).add_(p.grad, alpha=1 - betas[1])
                    p.grad = None
            engine.backward(loss_fn(engine(x), y))
            engine.step()
            for p, r in zip(model.parameters(), ref.parameters()):
                assert torch.equal(p, r), f"step {s + 1}"
    finally:
        engine.close()


def test_adamw8bit_on_the_servers_is_adamw_with_its_state_quantized():
    # "optimizer": {"type": "AdamW8bit"}: the servers keep m and v in 8 bits,
    # in blocks of 2048 counted from each server's first element. The
    # reference: torch's AdamW whose state is quantized the same way after
    # every step (the codec of tests/fixtures/make_quant8_golden.py) over the
    # servers' flat ranges, bit for bit.
    q = fixture_module("make_quant8_golden")
    maps = {"exp_avg": q.dynamic_map(True), "exp_avg_sq": q.dynamic_map(False)}
    steps = 4
    data = batches(steps, 4)
    loss_fn = torch.nn.CrossEntropyLoss()
    ref = make_model()
    opt = torch.optim.AdamW(ref.parameters(), lr=3e-3, betas=(0.9, 0.95),
                            eps=1e-8, weight_decay=0.01, foreach=False)
    model = make_model()
    cfg = config(2, 1, 1.0)
    cfg["optimizer"]["type"] = "AdamW8bit"
    engine, _, _, _ = zeroshard.initialize(model=model, config=cfg)
    try:
        owned = [tuple(s["owned"]) for s in engine.inspect()]
        where = {id(p): (off, n) for p, off, n in engine._slots}
        pairs = [(r, where[id(p)]) for p, r in zip(model.parameters(),
                                                   ref.parameters())]
        total = max(e for _, e in owned)
        for s in range(steps):
            x, y = data[s]
            loss_fn(ref(x), y).backward()
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            for key, code in maps.items():
                flat = torch.zeros(total)
                for r, (off, n) in pairs:
                    flat[off:off + n] = opt.state[r][key].reshape(-1)
                for b, e in owned:
                    codes, absmax = q.quantize(flat[b:e], 2048, code)
                    flat[b:e] = q.dequantize(codes, absmax, 2048, code)
                with torch.no_grad():
                    for r, (off, n) in pairs:
                        opt.state[r][key].copy_(flat[off:off + n].view_as(r))
            engine.backward(loss_fn(engine(x), y))
            engine.step()
            for p, r in zip(model.parameters(), ref.parameters()):
                assert torch.equal(p, r), f"step {s + 1}"
        # Not FP32-state AdamW: the quantization shows.
        plain = make_model()
        torch_reference(plain, data, 1, 1.0, 0.01, steps)
        assert any(not torch.equal(p, r) for p, r in
                   zip(model.parameters(), plain.parameters()))
    finally:
        engine.close()


# The Muon group of the tests (test_launch.py's ranks too).
MUON_PARAMS = {"lr": 0.02, "momentum": 0.95, "weight_decay": 0.1}


def fixture_module(name):
    """A fixture script of tests/fixtures (each imports its neighbour
    make_adamw_golden.py): muon_step and adafactor_step are the published
    steps written out there."""
    fixtures = os.path.join(os.path.dirname(__file__), "..", "fixtures")
    if fixtures not in sys.path:
        sys.path.insert(0, fixtures)
    path = os.path.join(fixtures, name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def train_engine(model, cfg, data, steps):
    """`steps` steps of one micro-batch each through zeroshard.initialize."""
    loss_fn = torch.nn.CrossEntropyLoss()
    engine, _, _, _ = zeroshard.initialize(model=model, config=cfg)
    try:
        for s in range(steps):
            x, y = data[s]
            engine.backward(loss_fn(engine(x), y))
            engine.step()
    finally:
        engine.close()


@pytest.mark.parametrize("servers", [1, 2])
def test_muon_for_the_matrices_group_follows_the_published_step(servers):
    # zeroshard.param_groups.matrices.optimizer = Muon: each Linear weight
    # is updated whole by Muon on a server (kept whole across the servers'
    # boundary), the biases and the LayerNorm by AdamW without decay (the
    # default groups). Not bit for bit: the Newton-Schulz products sum in
    # oneDNN's order, torch's in its own; within 2e-6 of the weights after
    # 4 steps (2.5e-7 measured, on weights that moved by 0.05), while a
    # perturbed momentum moves them by 3e-3.
    muon_step = fixture_module("make_muon_golden").muon_step
    steps = 4
    lr, mom, wd = (MUON_PARAMS[k] for k in ("lr", "momentum", "weight_decay"))
    data = batches(steps, 4)
    loss_fn = torch.nn.CrossEntropyLoss()

    def reference(momentum):
        ref = make_model()
        matrices = [ref[0].weight, ref[3].weight]
        rest = [p for p in ref.parameters()
                if all(p is not m for m in matrices)]
        adam = torch.optim.AdamW(rest, lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                                 weight_decay=0.0)
        bufs = [torch.zeros_like(m) for m in matrices]
        for s in range(steps):
            x, y = data[s]
            loss_fn(ref(x), y).backward()
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
            with torch.no_grad():
                for p, b in zip(matrices, bufs):
                    muon_step(p, p.grad.clone(), b, lr, momentum, wd, True)
                    p.grad = None
            adam.step()
            adam.zero_grad()
        return ref

    ref = reference(mom)
    model = make_model()
    cfg = config(servers, 1, 1.0)
    cfg["zeroshard"]["param_groups"] = {"matrices": {"optimizer": {
        "type": "Muon", "params": MUON_PARAMS}}}
    train_engine(model, cfg, data, steps)
    for (name, p), r in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p, r, rtol=0, atol=2e-6), name
    # The matrices moved by Muon's step, not AdamW's: a perturbed momentum
    # is told apart.
    other = reference(0.9)
    assert not torch.allclose(model[0].weight, other[0].weight, rtol=0,
                              atol=2e-6)


@pytest.mark.parametrize("servers", [2])
def test_adafactor_as_the_optimizer_type_follows_the_published_step(servers):
    # optimizer.type = Adafactor (Hugging Face's defaults, a first moment):
    # every tensor updated whole by Adafactor on a server, the matrices'
    # second moment factored. Not bit for bit: the row, column and RMS sums
    # run in double on the servers, in FP32 in torch.
    step_fn = fixture_module("make_adafactor_golden").adafactor_step
    steps = 4
    data = batches(steps, 4)
    loss_fn = torch.nn.CrossEntropyLoss()
    options = {"lr": None, "eps1": 1e-30, "eps2": 1e-3, "clip_threshold": 1.0,
               "decay_rate": -0.8, "beta1": 0.9, "weight_decay": 0.0,
               "scale_parameter": True, "relative_step": True,
               "warmup_init": False}

    def reference(opts):
        ref = make_model()
        states = []
        for p in ref.parameters():
            st = {"step": 0, "m": torch.zeros_like(p)}
            if p.dim() >= 2:
                st["row"] = torch.zeros(p.shape[0])
                st["col"] = torch.zeros(p.shape[1])
            else:
                st["v"] = torch.zeros_like(p)
            states.append(st)
        for s in range(steps):
            x, y = data[s]
            loss_fn(ref(x), y).backward()
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
            with torch.no_grad():
                for p, st in zip(ref.parameters(), states):
                    step_fn(p, p.grad.clone(), st, opts)
                    p.grad = None
        return ref

    ref = reference(options)
    model = make_model()
    cfg = config(servers, 1, 1.0)
    cfg["optimizer"] = {"type": "Adafactor", "params": {"beta1": 0.9}}
    train_engine(model, cfg, data, steps)
    for (name, p), r in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p, r, rtol=0, atol=1e-6), \
            (name, (p - r).abs().max().item())
    # Groups of the caller's own would drop the classes' rules: refused.
    with pytest.raises(ValueError, match="tensor rules"):
        zeroshard.initialize(model=model, config=cfg, model_parameters=[
            {"params": list(model.parameters())}])
    # A perturbed beta1 is told apart.
    other = reference(dict(options, beta1=0.8))
    assert not torch.allclose(model[0].weight, other[0].weight, rtol=0,
                              atol=1e-6)


def test_a_non_finite_gradient_skips_the_step_without_clipping():
    # One rank, FP32, no clipping: a NaN anywhere in the gradient (found a
    # chunk at a time) skips the step; the weights and the step count on
    # the servers stay, and the next step trains.
    model = make_model()
    engine, _, _, _ = zeroshard.initialize(model=model,
                                           config=config(1, 1, 0.0))
    loss_fn = torch.nn.CrossEntropyLoss()
    try:
        before = [p.detach().clone() for p in model.parameters()]
        x, y = batches(1, 4)[0]
        engine.backward(loss_fn(engine(x), y))
        model[3].bias.grad[2] = float("nan")
        engine.step()
        assert engine.last_step_skipped()
        for p, b in zip(model.parameters(), before):
            assert torch.equal(p, b)
        engine.backward(loss_fn(engine(x), y))
        engine.step()
        assert not engine.last_step_skipped()
        assert not torch.equal(model[0].weight, before[0])
    finally:
        engine.close()


def test_a_checkpoint_does_not_restore_under_another_rule(tmp_path):
    data = batches(1, 4)
    loss_fn = torch.nn.CrossEntropyLoss()
    model = make_model()
    engine, _, _, _ = zeroshard.initialize(model=model, config=config(1, 1, 0.0))
    try:
        engine.backward(loss_fn(engine(data[0][0]), data[0][1]))
        engine.step()
        engine.save_checkpoint(str(tmp_path))
    finally:
        engine.close()
    cfg = config(1, 1, 0.0)
    cfg["optimizer"] = {"type": "Lion", "params": {"lr": 1e-4}}
    model = make_model()
    engine, _, _, _ = zeroshard.initialize(model=model, config=cfg)
    try:
        with pytest.raises(zeroshard.ZeroshardError) as e:
            engine.load_checkpoint(str(tmp_path))
        assert "another optimizer configuration" in str(e.value)
        assert "optimizer.type: AdamW -> Lion" in str(e.value), str(e.value)
        assert engine.global_steps == 0
    finally:
        engine.close()


def test_bad_weight_ranges_are_refused_and_write_nothing():
    # The client's SetMasterWeightRanges checks the whole list before any
    # byte is sent: out of order, overlapping, past the end, or a value
    # count that does not match.
    model = make_model()
    engine, _, _, _ = zeroshard.initialize(model=model, config=config(2, 1, 0.0))
    try:
        before = engine.consolidated_state_dict()
        total = engine._total
        c = engine._cluster
        for ranges, n in (([(10, 20), (0, 5)], 15), ([(0, 10), (5, 15)], 20),
                          ([(total - 4, total + 4)], 8), ([(0, 10)], 9)):
            with pytest.raises(zeroshard.ZeroshardError, match="INVALID_ARGUMENT"):
                c.set_master_weight_ranges(ranges, torch.zeros(n).numpy())
        after = engine.consolidated_state_dict()
        for k in before:
            assert torch.equal(before[k], after[k]), k
        # A good list across the servers' boundary writes those ranges only.
        half = engine.inspect()[1]["owned"][0]
        c.set_master_weight_ranges([(half - 3, half + 3)], torch.full((6,), 7.0).numpy())
        flat = torch.empty(total)
        c.gather([(0, total)], "fp32", flat.numpy())
        assert torch.equal(flat[half - 3:half + 3], torch.full((6,), 7.0))
        assert not torch.equal(flat[half - 4:half - 3], torch.full((1,), 7.0))
    finally:
        engine.close()


@pytest.mark.parametrize("bf16,stage", [(False, 2), (True, 2), (False, 3),
                                        (True, 3)])
def test_the_host_staged_path_trains_the_same_bits(monkeypatch, bf16, stage):
    # Parameters off the CPU (CUDA) train through host staging buffers;
    # forced here on CPU tensors, the staged path must give the bits of the
    # direct one (clipping, accumulation and a GatheredParameters write
    # included).
    import zeroshard.engine as engine_module
    data = batches(6, 4)
    loss_fn = torch.nn.CrossEntropyLoss()
    results = []
    for staged in (False, True):
        monkeypatch.setattr(engine_module, "_FORCE_HOST_STAGING", staged)
        model = make_model()
        extra = {"bf16": {"enabled": True}} if bf16 else {}
        engine, _, _, _ = zeroshard.initialize(
            model=model, config=config(2, 2, 0.5, stage=stage, **extra))
        try:
            assert engine._staged == staged
            for s in range(3):
                if s == 1:
                    with zeroshard.GatheredParameters([model[0].bias],
                                                      modifier_rank=0):
                        with torch.no_grad():
                            model[0].bias[:3] = 0.5
                for m in range(2):
                    x, y = data[s * 2 + m]
                    x = x.bfloat16() if bf16 else x
                    engine.backward(loss_fn(engine(x).float(), y))
                    engine.step()
            results.append(engine.consolidated_state_dict())
        finally:
            engine.close()
    for k in results[0]:
        assert torch.equal(results[0][k], results[1][k]), k
