"""Replicas through the front-end (docs/DESIGN.md, "Replicas"): with
"zeroshard": {"replicas": 2} every server also keeps a copy of the slot
before its own, so a server killed mid-run costs the torch loop no step,
and the parameters stay torch's AdamW bit for bit."""

import os
import signal

import pytest
import torch

import zeroshard
from test_engine import batches, config, make_model, torch_reference, weights


@pytest.mark.parametrize("stage,victim", [(2, 1), (3, 0)])
def test_a_killed_server_costs_no_step_and_no_bit(stage, victim):
    steps, gas = 6, 1
    data = batches(steps * gas, 4)
    ref = torch_reference(make_model(), data, gas, 1.0, 0.01, steps)
    model = make_model()
    c = config(3, gas, 1.0, stage=stage)
    c["zeroshard"]["replicas"] = 2
    engine, _, _, _ = zeroshard.initialize(
        model=model, model_parameters=model.parameters(), config=c)
    loss_fn = torch.nn.CrossEntropyLoss()
    try:
        for s in range(steps):
            if s == 3:
                proc = engine._servers.procs[victim]
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            x, y = data[s]
            engine.backward(loss_fn(engine(x), y))
            engine.step()
            assert engine.global_steps == s + 1
            for i, (p, r) in enumerate(zip(weights(engine, model, stage),
                                           ref[s])):
                assert torch.equal(p, r), (
                    f"step {s + 1}, parameter {i}: max |diff| "
                    f"{(p - r).abs().max().item()}")
    finally:
        engine.close()
