"""The servers' registered rules through the front-end: a script's
torch.optim.AdamW, Adam, SGD or Adagrad object (or DeepSpeed's FusedAdam
and CPU Adagrad, or the config's "SGD" / "Adagrad" section) trains exactly
as torch's own optimizer, its groups' lr and weight decay live step by step; the params
the servers take once per run are refused where groups differ or a loop
changes them; the optimizer's state_dict is torch's layout."""

import pytest
import torch

import zeroshard
import zeroshard.deepspeed as deepspeed

from test_deepspeed_api import (base_config, bits_equal, data, make_model,
                                run_torch)


def run_engine(model, batches, config=None, sched=None, **init):
    engine, opt, _, zsched = zeroshard.initialize(
        model=model, config=config or base_config(), lr_scheduler=sched,
        **init)
    try:
        for x, y in batches:
            engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
            engine.step()
        return [p.detach().clone() for p in model.parameters()], opt, engine
    finally:
        engine.close()


def groups(model, **second):
    return [{"params": [model[0].weight, model[0].bias], "lr": 0.05},
            {"params": [model[2].weight, model[2].bias], "lr": 0.02,
             "weight_decay": 0.01, **second}]


MAKERS = {
    "sgd_nesterov_two_groups_steplr": lambda m: (
        torch.optim.SGD(groups(m), lr=0.1, momentum=0.9, nesterov=True),
        True),
    "sgd_dampening_decay": lambda m: (
        torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.8,
                        dampening=0.3, weight_decay=1e-3), False),
    "adagrad_two_groups_decay_initial": lambda m: (
        torch.optim.Adagrad(groups(m, eps=1e-6), lr=0.03, lr_decay=0.05,
                            initial_accumulator_value=0.2), True),
    "deepspeed_cpu_adagrad": lambda m: (
        deepspeed.ops.adagrad.DeepSpeedCPUAdagrad(m.parameters(), lr=0.02,
                                                  weight_decay=0.01), False),
    # torch's Adam is L2 weight decay, not AdamW's decoupled one (DeepSpeed's
    # type "Adam" alone would be AdamW), as is FusedAdam's adam_w_mode=False.
    "adam_l2_decay_two_groups": lambda m: (
        torch.optim.Adam(groups(m), lr=0.01, betas=(0.8, 0.9),
                         weight_decay=0.05), True),
    "fused_adam_l2": lambda m: (
        deepspeed.ops.adam.FusedAdam(m.parameters(), lr=0.01,
                                     weight_decay=0.05, adam_w_mode=False),
        False),
    "adamw_two_groups_betas": lambda m: (
        torch.optim.AdamW([{"params": [m[0].weight, m[0].bias],
                            "betas": (0.8, 0.95)},
                           {"params": [m[2].weight, m[2].bias]}],
                          lr=0.01, weight_decay=0.1), True),
}


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_the_scripts_optimizer_trains_as_torchs(kind):
    b = data(6)
    ref = make_model()
    opt, stepped = MAKERS[kind](ref)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5) if stepped else None
    want = run_torch(ref, opt, b, sched)
    model = make_model()
    opt, stepped = MAKERS[kind](model)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5) if stepped else None
    got, zopt, _ = run_engine(model, b, optimizer=opt, sched=sched)
    assert bits_equal(got, want)
    assert zopt.param_groups is opt.param_groups


def test_the_configs_section_trains_as_torchs():
    b = data(5)
    ref = make_model()
    want = run_torch(ref, torch.optim.SGD(ref.parameters(), lr=0.1,
                                          momentum=0.9, weight_decay=1e-3), b)
    cfg = base_config(optimizer={"type": "SGD", "params": {
        "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3}})
    got, _, _ = run_engine(make_model(), b, config=cfg)
    assert bits_equal(got, want)


def test_state_dict_is_torchs_layout_and_values():
    b = data(4)
    ref = make_model()
    topt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    run_torch(ref, topt, b)
    model = make_model()
    engine, opt, _, _ = zeroshard.initialize(
        model=model, config=base_config(),
        optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    try:
        for x, y in b:
            engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
            engine.step()
        mine = opt.state_dict()
        theirs = topt.state_dict()
        assert sorted(mine["state"]) == sorted(theirs["state"])
        for i, st in theirs["state"].items():
            assert torch.equal(mine["state"][i]["momentum_buffer"],
                               st["momentum_buffer"])
        # torch's own SGD takes it back.
        again = torch.optim.SGD(make_model().parameters(), lr=0.1,
                                momentum=0.9)
        again.load_state_dict(mine)
    finally:
        engine.close()


def test_params_the_servers_take_once_are_refused_where_they_vary():
    m = make_model()
    with pytest.raises(ValueError, match="differ in momentum"):
        zeroshard.initialize(model=m, config=base_config(),
                             optimizer=torch.optim.SGD(
                                 groups(m, momentum=0.5), lr=0.1,
                                 momentum=0.9))
    with pytest.raises(ValueError, match="maximize=True"):
        zeroshard.initialize(model=m, config=base_config(),
                             optimizer=torch.optim.SGD(
                                 m.parameters(), lr=0.1, maximize=True))
    engine, opt, _, _ = zeroshard.initialize(
        model=m, config=base_config(),
        optimizer=torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9))
    try:
        x, y = data(1)[0]
        engine.backward(torch.nn.functional.cross_entropy(engine(x), y))
        opt.param_groups[0]["momentum"] = 0.5
        with pytest.raises(ValueError, match="momentum=0.5: the servers "
                           "apply momentum=0.9 for the whole run"):
            engine.step()
    finally:
        engine.close()
