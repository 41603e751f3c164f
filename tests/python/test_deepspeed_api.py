"""DeepSpeed's public API over zeroshard (zeroshard.deepspeed): every name
a script calls exists and works, the optimizer and scheduler a script
gives are the ones that train (bit for bit torch's), DeepSpeed's defaults,
(zeroshard-launch --deepspeed and torchrun running a DeepSpeed-style
script: test_deepspeed_launchers.py)."""

import argparse
import json
import os

import pytest
import torch

import zeroshard
import zeroshard.deepspeed as deepspeed

HERE = os.path.dirname(os.path.abspath(__file__))


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 5))


def data(n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 12, generator=g),
             torch.randint(0, 5, (4,), generator=g)) for _ in range(n)]


def base_config(**extra):
    c = {"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0.5,
         "zero_optimization": {"stage": 2}, "zeroshard": {"servers": 1}}
    c.update(extra)
    return c


def bits_equal(a, b):
    return all(torch.equal(x.detach(), y.detach()) for x, y in zip(a, b))


# --- the surface ----------------------------------------------------------

MODULE_NAMES = [
    "comm.init_distributed", "comm.get_rank", "comm.get_world_size",
    "comm.get_local_rank", "comm.barrier", "comm.all_reduce",
    "comm.all_gather", "comm.broadcast", "comm.is_initialized",
    "accelerator.get_accelerator", "zero.Init", "zero.GatheredParameters",
    "zero.register_external_parameter",
    "utils.safe_get_full_fp32_param", "utils.safe_get_full_grad",
    "utils.safe_get_full_optimizer_state", "utils.safe_set_full_fp32_param",
    "utils.safe_set_full_optimizer_state", "utils.safe_set_full_grad",
    "utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint",
    "utils.logger", "utils.log_dist",
    "runtime.engine.DeepSpeedEngine", "runtime.zero.partition_parameters",
    "runtime.dataloader.RepeatingLoader", "runtime.utils.see_memory_usage",
    "ops.adam.FusedAdam", "ops.adam.DeepSpeedCPUAdam", "ops.lamb.FusedLamb",
    "checkpointing.checkpoint", "moe.layer.MoE",
    "moe.utils.split_params_into_different_moe_groups_for_optimizer",
    "pipe.PipelineModule", "init_distributed", "add_config_arguments",
    "runtime.lr_schedules.WarmupLR", "runtime.lr_schedules.WarmupDecayLR",
    "runtime.lr_schedules.WarmupCosineLR", "runtime.config.ADAM_OPTIMIZER",
    "runtime.zero.stage3.DeepSpeedZeroOptimizer_Stage3",
    "runtime.fp16.unfused_optimizer.FP16_UnfusedOptimizer",
    "utils.torch.required_torch_version", "ops.op_builder.FusedAdamBuilder",
    "ops.__compatible_ops__", "checkpointing.configure",
    "DeepSpeedEngine", "initialize", "__version__"]


@pytest.mark.parametrize("name", MODULE_NAMES)
def test_every_module_name_exists(name):
    obj = deepspeed
    for part in name.split("."):
        obj = getattr(obj, part)   # an AttributeError fails the test
    assert obj is not None


def test_the_moe_split_without_experts_and_the_cpu_device_count(monkeypatch):
    groups = [{"params": [torch.nn.Parameter(torch.zeros(2))]}]
    split = deepspeed.moe.utils.split_params_into_different_moe_groups_for_optimizer
    assert split(groups) == groups
    expert = torch.nn.Parameter(torch.zeros(2))
    expert.allreduce = False   # how DeepSpeed marks an expert's parameter
    with pytest.raises(NotImplementedError, match="expert parameters"):
        split([{"params": [expert]}])
    acc = deepspeed.accelerator.get_accelerator()
    if acc.device_name() == "cpu":
        monkeypatch.setenv("LOCAL_SIZE", "3")
        assert acc.device_count() == 3


def test_unsupported_parts_say_why():
    for make in (lambda: deepspeed.pipe.PipelineModule(layers=[]),
                 lambda: deepspeed.moe.layer.MoE(hidden_size=4),
                 lambda: deepspeed.ops.lamb.FusedLamb([]),
                 lambda: deepspeed.init_inference(None)):
        with pytest.raises(NotImplementedError, match="not supported"):
            make()


def test_add_config_arguments_and_initialize_from_args(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(base_config(optimizer={
        "type": "AdamW", "params": {"lr": 1e-3}})))
    parser = deepspeed.add_config_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--deepspeed", "--deepspeed_config", str(path)])
    assert args.deepspeed and args.deepspeed_config == str(path)
    model = make_model()
    engine, opt, loader, sched = deepspeed.initialize(
        args=args, model=model, model_parameters=model.parameters())
    try:
        assert isinstance(engine, deepspeed.DeepSpeedEngine)
        assert isinstance(opt, torch.optim.Optimizer)
        assert loader is None and sched is None   # no scheduler anywhere
        assert deepspeed.comm.is_initialized()
        assert deepspeed.comm.get_world_size() == 1
    finally:
        engine.close()


ENGINE_CALLS = [
    ("local_rank", 0), ("global_rank", 0), ("world_size", 1),
    ("dp_world_size", 1), ("device", torch.device("cpu")),
    ("skipped_steps", 0), ("global_samples", 8),
    ("fp16_enabled()", False), ("bfloat16_enabled()", False),
    ("gradient_clipping()", 0.5), ("zero_optimization_stage()", 2),
    ("steps_per_print()", 3), ("was_step_applied()", True),
    ("train_micro_batch_size_per_gpu()", 4),
    ("is_gradient_accumulation_boundary()", False),
    ("zero_gather_16bit_weights_on_model_save()", False)]


def test_engine_attributes_and_methods(tmp_path, capfd):
    model = make_model()
    engine, opt, _, _ = zeroshard.initialize(
        model=model, model_parameters=model.parameters(),
        config=base_config(gradient_accumulation_steps=2, steps_per_print=3,
                           optimizer={"type": "AdamW",
                                      "params": {"lr": 1e-3}}))
    try:
        for x, y in data(2):
            engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
            engine.step()
        for expr, want in ENGINE_CALLS:
            got = eval("engine." + expr)
            assert got == want, (expr, got, want)
        assert engine.optimizer is opt
        assert engine.get_global_grad_norm() > 0
        with engine.no_sync():
            pass
        engine.set_gradient_accumulation_boundary(True)
        assert engine.is_gradient_accumulation_boundary()
        engine.set_gradient_accumulation_boundary(False)
        # saving the module in the compute dtype, and its masters
        engine.save_16bit_model(str(tmp_path), "m.bin")
        sd = torch.load(tmp_path / "m.bin")
        masters = engine.consolidated_state_dict()
        assert set(sd) == set(model.state_dict())
        assert all(torch.equal(sd[k], masters[k]) for k in masters)
        full = deepspeed.utils.safe_get_full_fp32_param(model[0].weight)
        assert torch.equal(full, masters["0.weight"])
        engine.empty_partition_cache()
        engine.offload_states()
        engine.reload_states()
        assert opt.loss_scale == 1.0 and opt.overflow is False
        # load_checkpoint on a directory without one
        assert engine.load_checkpoint(str(tmp_path / "none")) == (None, None)
    finally:
        engine.destroy()
    with pytest.raises(RuntimeError, match="closed"):
        engine(torch.randn(1, 12))


# --- the optimizer a script gives is the one that trains -------------------

def run_torch(model, opt, batches, sched=None, lr_of=None):
    for it, (x, y) in enumerate(batches):
        if lr_of is not None:
            for g in opt.param_groups:
                g["lr"] = lr_of(it)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()
    return [p.detach().clone() for p in model.parameters()]


def run_engine(model, batches, lr_of=None, **init):
    engine, opt, _, _ = zeroshard.initialize(
        model=model, config=base_config(), **init)
    try:
        for it, (x, y) in enumerate(batches):
            if lr_of is not None:
                for g in opt.param_groups:
                    g["lr"] = lr_of(it)
            engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
            engine.step()
        return [p.detach().clone() for p in model.parameters()], opt
    finally:
        engine.close()


def nano_lr(it):
    # nanoGPT's shape: linear warmup, then cosine decay to a floor.
    import math
    if it < 3:
        return 6e-3 * (it + 1) / 3
    r = min(1.0, (it - 3) / 5)
    return 6e-4 + 0.5 * (1 + math.cos(math.pi * r)) * (6e-3 - 6e-4)


def test_param_group_lr_written_every_iteration_equals_torch():
    b = data(9)
    ref = make_model()
    want = run_torch(ref, torch.optim.AdamW(ref.parameters(), lr=1.0,
                                            weight_decay=0.1),
                     b, lr_of=nano_lr)
    model = make_model()
    got, _ = run_engine(
        model, b, lr_of=nano_lr,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1.0,
                                    weight_decay=0.1))
    assert bits_equal(got, want)


def two_groups(model):
    return [{"params": [model[0].weight, model[0].bias], "lr": 2e-3},
            {"params": [model[2].weight, model[2].bias], "lr": 5e-3,
             "weight_decay": 0.0, "betas": (0.8, 0.9)}]


@pytest.mark.parametrize("kind", ["lambda", "onecycle", "cosine_callable"])
def test_client_schedulers_equal_torch(kind):
    b = data(7)

    def make(model):
        opt = torch.optim.AdamW(two_groups(model), weight_decay=0.05)
        if kind == "lambda":
            return opt, torch.optim.lr_scheduler.LambdaLR(
                opt, lambda s: (s + 1) / 4 if s < 3 else 0.5 ** (s - 3))
        if kind == "onecycle":
            return opt, torch.optim.lr_scheduler.OneCycleLR(
                opt, max_lr=[4e-3, 8e-3], total_steps=len(b))
        return opt, (lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(
            o, T_max=5))

    ref = make_model()
    opt, sched = make(ref)
    if callable(sched) and not hasattr(sched, "step"):
        sched = sched(opt)
    want = run_torch(ref, opt, b, sched=sched)
    model = make_model()
    opt, sched = make(model)
    got, zopt = run_engine(model, b, optimizer=opt, lr_scheduler=sched)
    assert bits_equal(got, want)
    assert zopt.param_groups is opt.param_groups   # one set of dicts


def test_callable_optimizer_and_one_group_changed_alone():
    b = data(6)
    ref = make_model()
    ropt = torch.optim.AdamW(two_groups(ref), weight_decay=0.05)
    want = []
    for it, (x, y) in enumerate(b):
        if it == 2:
            ropt.param_groups[1]["weight_decay"] = 0.3
            ropt.param_groups[1]["betas"] = (0.5, 0.6)
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        ropt.step()
        ropt.zero_grad()
    want = [p.detach().clone() for p in ref.parameters()]

    model = make_model()
    engine, opt, _, _ = zeroshard.initialize(
        model=model, config=base_config(),
        model_parameters=two_groups(model),
        optimizer=lambda params: torch.optim.AdamW(params,
                                                   weight_decay=0.05))
    try:
        for it, (x, y) in enumerate(b):
            if it == 2:
                opt.param_groups[1]["weight_decay"] = 0.3
                opt.param_groups[1]["betas"] = (0.5, 0.6)
            engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
            engine.step()
        assert bits_equal([p.detach() for p in model.parameters()], want)
    finally:
        engine.close()


def test_an_optimizer_the_servers_have_no_rule_for_is_refused():
    model = make_model()
    with pytest.raises(ValueError,
                       match="torch.optim.rmsprop.RMSprop is not a rule"):
        zeroshard.initialize(model=model, config=base_config(),
                             optimizer=torch.optim.RMSprop(model.parameters(),
                                                           lr=0.1))


def test_no_optimizer_anywhere_is_an_error():
    with pytest.raises(ValueError, match="no optimizer"):
        zeroshard.initialize(model=make_model(), config=base_config())


def test_bad_group_values_are_refused_before_anything_is_sent():
    model = make_model()
    engine, opt, _, _ = zeroshard.initialize(
        model=model, config=base_config(),
        optimizer=torch.optim.AdamW(model.parameters()))
    try:
        x, y = data(1)[0]
        engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
        opt.param_groups[0]["lr"] = float("nan")
        with pytest.raises(ValueError, match=r"param_groups\[0\]: lr=nan"):
            engine.step()
    finally:
        engine.close()


# --- DeepSpeed's defaults --------------------------------------------------

def test_deepspeed_defaults(capfd):
    model = make_model()
    cfg = base_config(optimizer={"type": "AdamW", "params": {"lr": 1e-3}})
    del cfg["zero_optimization"], cfg["gradient_clipping"]
    engine, _, _, _ = zeroshard.initialize(model=model, config=cfg)
    try:
        assert engine.zero_optimization_stage() == 0
        assert engine.gradient_clipping() == 1.0
    finally:
        engine.close()
    assert "ZeRO stage 0" in capfd.readouterr().err
    for kind in ("WarmupDecayLR", "WarmupCosineLR"):
        cfg = base_config(optimizer={"type": "AdamW", "params": {"lr": 1e-3}},
                          scheduler={"type": kind,
                                     "params": {"warmup_num_steps": 5}})
        with pytest.raises(ValueError, match="total_num_steps"):
            zeroshard.initialize(model=make_model(), config=cfg)


@pytest.mark.parametrize("kind,params", [
    # 1000 warm-up steps and no run length: never cut (WarmupLR has no end)
    ("WarmupLR", {"warmup_num_steps": 1000, "warmup_type": "linear"}),
    ("WarmupLR", {"warmup_num_steps": 5, "warmup_min_lr": 1e-5}),
    ("WarmupDecayLR", {"warmup_num_steps": 3, "total_num_steps": 7,
                       "warmup_min_lr": 2e-5, "warmup_type": "linear"}),
    ("WarmupCosineLR", {"warmup_num_steps": 8, "total_num_steps": 20,
                        "warmup_min_ratio": 0.1})])
def test_the_configs_scheduler_is_deepspeeds_step_for_step(kind, params):
    # DeepSpeed's scheduler starts at iteration -1 and is stepped after
    # each optimizer step: step k uses iteration k - 2 (the warmup's start
    # before that). The reference is tests/fixtures' independent emulation
    # of DeepSpeed's classes.
    from test_engine import fixture_module
    golden = fixture_module("make_deepspeed_lr_golden")
    kw = dict(params)
    if kind == "WarmupDecayLR":
        ref = golden.WarmupDecayLR(1e-3, kw.pop("total_num_steps"), **kw)
    elif kind == "WarmupCosineLR":   # its warmup phase (the fixture's)
        ref = golden.WarmupCosineLR(1e-3, kw.pop("total_num_steps"), **kw)
    else:
        ref = golden.WarmupLR(1e-3, **kw)
    model = make_model()
    cfg = base_config(optimizer={"type": "AdamW", "params": {"lr": 1e-3}},
                      scheduler={"type": kind, "params": params})
    engine, opt, _, sched = zeroshard.initialize(model=model, config=cfg)
    try:
        for k, (x, y) in enumerate(data(8), start=1):
            start = 0.0 if kind == "WarmupCosineLR" else params.get(
                "warmup_min_lr", 0.0)
            want = ref.get_lr(k - 2) if k >= 2 else start
            assert opt.param_groups[0]["lr"] == want, (k, want)
            assert engine.get_lr() == [want] and sched.get_last_lr() == [want]
            engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
            engine.step()
    finally:
        engine.close()


# --- optimizer.state_dict() in torch's layout -------------------------------

@pytest.mark.parametrize("load", ["after", "before"])
def test_optimizer_state_dict_is_torchs_and_a_resumed_loop_continues(
        tmp_path, load):
    # load="before": nanoGPT's order, the state loaded into the torch
    # optimizer before initialize (which then sends it to the servers).
    b = data(8)
    ref = make_model()
    ropt = torch.optim.AdamW(two_groups(ref), weight_decay=0.05)
    want = run_torch(ref, ropt, b, lr_of=nano_lr)
    torch_sd_after_4 = None

    ref2 = make_model()
    ropt2 = torch.optim.AdamW(two_groups(ref2), weight_decay=0.05)
    run_torch(ref2, ropt2, b[:4], lr_of=nano_lr)
    torch_sd_after_4 = ropt2.state_dict()

    # First half: 4 steps, then save the model and the optimizer as
    # nanoGPT does (torch.save of both state dicts).
    model = make_model()
    opt0 = torch.optim.AdamW(two_groups(model), weight_decay=0.05)
    engine, opt, _, _ = zeroshard.initialize(model=model, config=base_config(),
                                             optimizer=opt0)
    try:
        for it, (x, y) in enumerate(b[:4]):
            for g in opt.param_groups:
                g["lr"] = nano_lr(it)
            engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
            engine.step()
        sd = opt.state_dict()
        torch.save({"model": model.state_dict(), "optimizer": sd},
                   tmp_path / "ckpt.pt")
    finally:
        engine.close()
    # The layout and the values are torch's.
    assert set(sd["state"]) == set(torch_sd_after_4["state"])
    for i, st in torch_sd_after_4["state"].items():
        assert float(sd["state"][i]["step"]) == float(st["step"])
        for k in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(sd["state"][i][k], st[k]), (i, k)
    assert [g["params"] for g in sd["param_groups"]] == \
        [g["params"] for g in torch_sd_after_4["param_groups"]]

    # Second half, in a new engine (new servers) from the saved files.
    saved = torch.load(tmp_path / "ckpt.pt")
    model = make_model(seed=5)   # other initial values, then loaded
    model.load_state_dict(saved["model"])
    opt0 = torch.optim.AdamW(two_groups(model), weight_decay=0.05)
    if load == "before":
        opt0.load_state_dict(saved["optimizer"])
    engine, opt, _, _ = zeroshard.initialize(model=model, config=base_config(),
                                             optimizer=opt0)
    try:
        if load == "after":
            opt.load_state_dict(saved["optimizer"])
        for it, (x, y) in enumerate(b[4:], start=4):
            for g in opt.param_groups:
                g["lr"] = nano_lr(it)
            engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
            engine.step()
        assert bits_equal([p.detach() for p in model.parameters()], want)
        # The accessors read and write the same state.
        w = model[2].weight
        got = deepspeed.utils.safe_get_full_optimizer_state(w, "exp_avg")
        assert torch.equal(got, opt.state_dict()["state"][2]["exp_avg"])
        deepspeed.utils.safe_set_full_optimizer_state(
            w, torch.full_like(got, 0.25), "exp_avg")
        assert torch.equal(
            deepspeed.utils.safe_get_full_optimizer_state(w, "exp_avg"),
            torch.full_like(got, 0.25))
        assert float(deepspeed.utils.safe_get_full_optimizer_state(
            w, "step")) == 8.0
    finally:
        engine.close()


def test_load_state_dict_refuses_a_mismatch():
    model = make_model()
    engine, opt, _, _ = zeroshard.initialize(
        model=model, config=base_config(),
        optimizer=torch.optim.AdamW(model.parameters()))
    try:
        with pytest.raises(ValueError, match="saved groups hold"):
            opt.load_state_dict({"state": {}, "param_groups": [
                {"params": [0]}]})
        with pytest.raises(ValueError, match="step counts differ"):
            p = list(model.parameters())
            opt.load_state_dict({"state": {
                0: {"step": torch.tensor(1.), "exp_avg": torch.zeros_like(p[0]),
                    "exp_avg_sq": torch.zeros_like(p[0])},
                1: {"step": torch.tensor(2.), "exp_avg": torch.zeros_like(p[1]),
                    "exp_avg_sq": torch.zeros_like(p[1])}},
                "param_groups": [{"params": list(range(len(p)))}]})
    finally:
        engine.close()


# --- checkpoints: weights without servers, and the module alone -------------

def bn_model(seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.BatchNorm1d(16),
                            torch.nn.ReLU(), torch.nn.Linear(16, 5))
    m[0].bias.requires_grad_(False)   # a frozen parameter
    return m


def train_bn(engine, n, seed):
    for x, y in data(n, seed=seed):
        engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
        engine.step()


def test_zero_to_fp32_and_load_module_only(tmp_path):
    cfg = base_config(optimizer={"type": "AdamW", "params": {"lr": 1e-2}})
    model = bn_model()
    engine, _, _, _ = zeroshard.initialize(
        model=model, config=cfg,
        model_parameters=[p for p in model.parameters()])   # frozen dropped
    try:
        train_bn(engine, 3, seed=1)
        engine.save_checkpoint(str(tmp_path / "ck"), tag="t1",
                               client_state={"it": 3})
        masters = engine.consolidated_state_dict()
        saved = {k: v.clone() for k, v in model.state_dict().items()}
    finally:
        engine.close()
    z = deepspeed.utils.zero_to_fp32
    sd = z.get_fp32_state_dict_from_zero_checkpoint(str(tmp_path / "ck"),
                                                    tag="t1")
    assert set(sd) == set(saved)
    for k, v in saved.items():
        want = masters.get(k, v)
        assert torch.equal(sd[k], want), k
    assert "0.bias" not in z.get_fp32_state_dict_from_zero_checkpoint(
        str(tmp_path / "ck"), tag="t1", exclude_frozen_parameters=True)
    fresh = z.load_state_dict_from_zero_checkpoint(bn_model(seed=9),
                                                   str(tmp_path / "ck"), "t1")
    assert torch.equal(fresh[1].running_mean, saved["1.running_mean"])
    out = z.convert_zero_checkpoint_to_fp32_state_dict(
        str(tmp_path / "ck"), str(tmp_path / "out"), tag="t1")
    assert torch.equal(torch.load(out)["3.weight"], masters["3.weight"])

    # load_module_only into a run that trained on: its weights become the
    # checkpoint's, its optimizer state and step count stay.
    model = bn_model(seed=4)
    engine, opt, _, _ = zeroshard.initialize(model=model, config=cfg)
    try:
        train_bn(engine, 2, seed=7)
        before = opt.state_dict()
        path, client = engine.load_checkpoint(str(tmp_path / "ck"), tag="t1",
                                              load_module_only=True)
        assert client == {"it": 3} and path.endswith("step-" + "0" * 19 + "3")
        assert engine.global_steps == 2
        for k, v in sd.items():
            assert torch.equal(model.state_dict()[k].float(), v), k
        after = opt.state_dict()
        for i, st in before["state"].items():
            assert torch.equal(after["state"][i]["exp_avg"], st["exp_avg"])
            assert float(after["state"][i]["step"]) == 2.0
        train_bn(engine, 1, seed=8)   # and it trains on from there
        assert engine.global_steps == 3
    finally:
        engine.close()

    # A damaged shard file is named, never read.
    folder = tmp_path / "ck" / "t1" / ("step-" + "0" * 19 + "3")
    shard = next(p for p in folder.iterdir() if p.name.startswith("shard-"))
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 1
    shard.write_bytes(bytes(raw))
    with pytest.raises(zeroshard.ZeroshardError, match=shard.name):
        z.get_fp32_state_dict_from_zero_checkpoint(str(tmp_path / "ck"), "t1")


def test_a_resumed_run_with_dropout_and_the_engines_loader_is_bit_identical(
        tmp_path):
    ds = torch.utils.data.TensorDataset(torch.randn(64, 12),
                                        torch.randint(0, 5, (64,)))
    cfg = base_config(optimizer={"type": "AdamW", "params": {"lr": 1e-2}})

    def model():
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.Linear(12, 32),
                                   torch.nn.Dropout(0.3),
                                   torch.nn.Linear(32, 5))

    def start(seed):
        m = model()
        torch.manual_seed(seed)   # whatever the process's RNG holds
        engine, _, loader, _ = zeroshard.initialize(model=m, config=cfg,
                                                    training_data=ds)
        return m, engine, loader

    def run(engine, loader, steps):
        it = iter(loader)
        for _ in range(steps):
            x, y = next(it)
            engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
            engine.step()

    m, engine, loader = start(11)
    try:
        run(engine, loader, 6)
        want = [p.detach().clone() for p in m.parameters()]
    finally:
        engine.close()

    m, engine, loader = start(11)
    try:
        run(engine, loader, 3)
        engine.save_checkpoint(str(tmp_path / "ck"))
    finally:
        engine.close()
    m, engine, loader = start(99)
    try:
        engine.load_checkpoint(str(tmp_path / "ck"))
        run(engine, loader, 3)
        assert bits_equal([p.detach() for p in m.parameters()], want)
    finally:
        engine.close()


# DeepSpeed 0.19's config keys (its runtime/config.py, constants.py and the
# ZeRO, offload and precision models), each with a value it accepts.
DEEPSPEED_KEYS = {
    "": {"amp": {}, "dataloader_drop_last": True, "disable_allgather": True,
         "dump_state": True, "gradient_allreduce_op": "sum",
         "gradient_predivide_factor": 1.0, "graph_harvesting": True,
         "log_level": "info", "managed_gradient_accumulation": True,
         "memory_breakdown": True, "prescale_gradients": True,
         "sparse_gradients": True, "use_data_before_expert_parallelism": True,
         "zero_allow_untested_optimizer": True,
         "zero_force_ds_cpu_optimizer": True, "hybrid_engine": {},
         "pipeline": {}, "eigenvalue": {}, "elasticity": {},
         "progressive_layer_drop": {}, "sparse_attention": {},
         "torch_autocast": {}, "checkpoint": {}, "data_types": {},
         "communication_data_type": "fp32",
         "seq_parallel_communication_data_type": "fp32",
         "weight_quantization": {}, "compression_training": {}, "aio": {},
         "autotuning": {}, "flops_profiler": {}, "tensorboard": {},
         "wandb": {}, "csv_monitor": {}, "comet": {}, "nebula": {},
         "curriculum_learning": {}, "data_efficiency": {},
         "comms_logger": {}, "compile": {}, "timers": {},
         "steps_per_print": 10, "wall_clock_breakdown": True,
         "tensor_parallel": {}, "expert_parallel": {}},
    "zero_optimization": {
        k: True for k in (
            "contiguous_gradients reduce_scatter allgather_partitions "
            "overlap_comm load_from_fp32_weights elastic_checkpoint "
            "ignore_unused_parameters round_robin_gradients "
            "stage3_gather_16bit_weights_on_model_save "
            "stage3_gather_fp16_weights_on_model_save "
            "use_multi_rank_bucket_allreduce cpu_offload_param "
            "cpu_offload_use_pin_memory stage3_use_all_reduce_for_fetch_params "
            "stage3_allgather_sequential legacy_stage1 zero_quantized_weights "
            "zero_quantized_nontrainable_weights zero_quantized_gradients "
            "mics_hierarchical_params_gather memory_efficient_linear "
            "pipeline_loading_checkpoint override_module_apply "
            "log_trace_cache_warnings enable_sanity_checks "
            "save_muon_momentum_buffer_in_memory").split()},
    "zero_optimization.sizes": {
        k: 1000 for k in (
            "reduce_bucket_size allgather_bucket_size sub_group_size "
            "stage3_prefetch_bucket_size stage3_param_persistence_threshold "
            "stage3_model_persistence_threshold stage3_max_live_parameters "
            "stage3_max_reuse_distance stage3_module_granularity_threshold "
            "zero_hpz_partition_size mics_shard_size").split()},
    "zero_optimization.objects": {"zenflow": {}, "zeropp_loco_param": {},
                                  "leaf_module": {}},
    "zero_optimization.offload_optimizer": {
        "device": "cpu", "nvme_path": "/tmp", "buffer_count": 4,
        "buffer_size": 1000, "max_in_cpu": 1000, "pin_memory": True,
        "pipeline_read": False, "pipeline_write": False, "fast_init": False,
        "ratio": 1.0, "super_offload": False, "cpuadam_cores_perc": 0.8},
    "zero_optimization.offload_param": {
        "device": "cpu", "nvme_path": "/tmp", "buffer_count": 4,
        "buffer_size": 1000, "max_in_cpu": 1000, "pin_memory": True},
    "bf16": {"enabled": True, "immediate_grad_update": True,
             "check_grad_overflow": True, "bf16_master_weights_and_grads": True,
             "bf16_optimizer_states": True},
    "fp16": {"enabled": True, "auto_cast": False, "loss_scale": 0,
             "initial_scale_power": 16, "loss_scale_window": 1000,
             "hysteresis": 2, "consecutive_hysteresis": False,
             "min_loss_scale": 1, "fp16_master_weights_and_grads": False},
}


@pytest.mark.parametrize("section", sorted(DEEPSPEED_KEYS))
def test_every_deepspeed_0_19_key_is_known(section):
    cfg = {"train_micro_batch_size_per_gpu": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
    keys = DEEPSPEED_KEYS[section]
    if section == "":
        cfg.update(keys)
    elif section.startswith("zero_optimization."):
        sub = section.split(".", 1)[1]
        cfg["zero_optimization"] = {"stage": 3}
        if sub in ("sizes", "objects"):
            cfg["zero_optimization"].update(keys)
        else:
            cfg["zero_optimization"][sub] = keys
    else:
        cfg[section] = dict(keys)
    if section == "zero_optimization":
        cfg["zero_optimization"] = dict(keys, stage=3)
    _, warnings = zeroshard.resolve_config(json.dumps(cfg))
    unknown = [w for w in warnings if "unknown" in w]
    assert not unknown, unknown


def test_a_bf16_step_with_non_finite_gradients_is_skipped_and_counted():
    model = make_model()
    engine, opt, _, _ = zeroshard.initialize(
        model=model, config=base_config(
            bf16={"enabled": True},
            optimizer={"type": "AdamW", "params": {"lr": 1e-3}}))
    try:
        before = [p.detach().clone() for p in model.parameters()]
        x, y = data(1)[0]
        x = x.to(torch.bfloat16)
        x[0, 0] = float("inf")
        engine.backward(torch.nn.functional.cross_entropy(
            engine(x).float(), y))
        engine.step()
        assert not engine.was_step_applied() and opt.overflow
        assert engine.skipped_steps == 1 and engine.global_steps == 1
        assert bits_equal([p.detach() for p in model.parameters()], before)
        x, y = data(1)[0]
        engine.backward(torch.nn.functional.cross_entropy(
            engine(x.to(torch.bfloat16)).float(), y))
        engine.step()
        assert engine.was_step_applied() and engine.skipped_steps == 1
        assert not bits_equal([p.detach() for p in model.parameters()], before)
    finally:
        engine.close()
