"""Bad input to the front-end: each a clear error naming the parameter,
module or key, raised before any server is started (initialize) or before
the servers' state changes (step)."""

import re

import pytest
import torch

import zeroshard
from zeroshard import engine as engine_module
import models
from test_engine import batches, config, make_model


def refused(model, match, cfg=None, **kwargs):
    before = set(engine_module._live_engines)
    with pytest.raises((ValueError, NotImplementedError, TypeError),
                       match=match):
        zeroshard.initialize(model=model, config=cfg or config(1, 1, 0.0),
                             **kwargs)
    # Nothing was started: no engine (and so no server) is left behind.
    assert set(engine_module._live_engines) == before


def test_a_model_with_no_trainable_parameters():
    m = make_model()
    for p in m.parameters():
        p.requires_grad_(False)
    refused(m, "the model has no trainable parameters")


def test_a_parameter_that_is_not_contiguous():
    m = make_model()
    m[0].weight.data = m[0].weight.data.t().contiguous().t()
    refused(m, re.escape("parameter 0.weight is not a contiguous dense tensor"))


def test_a_parameter_of_another_dtype():
    refused(make_model().double(),
            re.escape("parameter 0.weight is torch.float64"))


def test_a_module_with_sparse_gradients():
    m = torch.nn.Sequential(torch.nn.Embedding(10, 4, sparse=True),
                            torch.nn.Linear(4, 2))
    refused(m, re.escape("module 0 (Embedding) has sparse=True"))


def test_a_unit_naming_no_module():
    cfg = config(1, 1, 0.0)
    cfg["zeroshard"]["units"] = ["h.*", "blocks.*"]
    refused(models.gpt(), "zeroshard.units: 'blocks.\\*' names no module", cfg)
    cfg["zeroshard"]["units"] = {"min_params": 0}
    refused(models.gpt(), re.escape('{"min_params": N} with N >= 1'), cfg)


def test_checkpointing_needs_named_blocks():
    cfg = config(1, 1, 0.0)
    cfg["zeroshard"]["activation_checkpointing"] = {"policy": "every_block"}
    refused(make_model(), "the blocks are the units you name", cfg)


def test_an_optimizer_unlike_the_configs():
    m = make_model()
    refused(m, re.escape("the object passed has lr=0.001 but the config's "
                         "optimizer.params.lr is 0.003"),
            optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))
    refused(m, "RMSprop is not a rule the servers run",
            optimizer=torch.optim.RMSprop(m.parameters(), lr=1e-3))
    refused(m, "the object passed is torch.optim.SGD but the config's "
            "optimizer.type is 'AdamW'",
            optimizer=torch.optim.SGD(m.parameters(), lr=3e-3))
    refused(m, "it steps another optimizer than the one passed",
            lr_scheduler=torch.optim.lr_scheduler.StepLR(
                torch.optim.AdamW(m.parameters()), 1))


def test_an_optimizer_equal_to_the_configs_is_taken():
    m = make_model()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95),
                            eps=1e-8, weight_decay=0.01)
    engine, _, _, _ = zeroshard.initialize(model=m, optimizer=opt,
                                           config=config(1, 1, 0.0))
    engine.close()


def test_a_sparse_gradient_changes_nothing_on_the_servers():
    data = batches(2, 4)
    m = make_model()
    engine, _, _, _ = zeroshard.initialize(model=m, config=config(2, 1, 0.0))
    try:
        loss_fn = torch.nn.CrossEntropyLoss()
        engine.backward(loss_fn(engine(data[0][0]), data[0][1]))
        engine.step()
        before = engine.consolidated_state_dict()
        versions = [(s["max_version"], s["optimizer_step"], s["master_norm"]) for s in engine.inspect()]
        engine.backward(loss_fn(engine(data[1][0]), data[1][1]))
        m[0].weight.grad = m[0].weight.grad.to_sparse()
        with pytest.raises(ValueError, match=re.escape(
                "parameter 0.weight has a sparse gradient")):
            engine.step()
        assert [(s["max_version"], s["optimizer_step"], s["master_norm"]) for s in engine.inspect()] == versions
        after = engine.consolidated_state_dict()
        for n in before:
            assert torch.equal(before[n], after[n]), n
    finally:
        engine.close()


@pytest.mark.parametrize("shm", [True, False])
def test_a_gradient_the_servers_refuse_applies_nothing(shm):
    # Two million parameters: the push is several pieces, and the element
    # past the servers' bound (2^60, unclipped) is in the last one, so a push
    # that applied pieces as they arrived would change the first ones.
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(2048, 1024), torch.nn.Linear(1024, 4))
    c = config(1, 1, 0.0)
    c["zeroshard"]["shared_memory"] = shm
    engine, _, _, _ = zeroshard.initialize(model=m, config=c)
    try:
        assert engine.shared_memory_servers == (1 if shm else 0)
        x = torch.randn(2, 2048)
        engine.backward(engine(x).square().mean())
        engine.step()
        before = engine.consolidated_state_dict()
        state = [(s["max_version"], s["min_version"], s["optimizer_step"],
                  s["master_norm"]) for s in engine.inspect()]
        engine.backward(engine(x).square().mean())
        last = list(m.parameters())[-1]
        with torch.no_grad():
            last.grad[-1] = 1e19
        with pytest.raises(Exception, match=re.escape("2^60")):
            engine.step()
        assert [(s["max_version"], s["min_version"], s["optimizer_step"],
                 s["master_norm"]) for s in engine.inspect()] == state
        after = engine.consolidated_state_dict()
        for n in before:
            assert torch.equal(before[n], after[n]), n
    finally:
        engine.close()


def test_parameters_on_another_or_on_two_devices():
    m = make_model()
    m[3].to("meta")
    refused(m, re.escape("more than one device: 0.weight on cpu, 3.weight on meta"))
    refused(make_model().to("meta"),
            re.escape("parameter 0.weight is on meta: the engine trains CPU and CUDA"))


def test_collectives_refuse_the_other_kind_of_buffer_and_missing_backends():
    # The ranks' groups (zeroshard._zeroshard.Group): a Gloo group takes
    # host buffers and refuses device addresses; NCCL exists only in a CUDA
    # build and needs a device (none here): either way a clear error, not a
    # crash; an unknown backend is named.
    from zeroshard import _zeroshard
    engine, _, _, _ = zeroshard.initialize(model=make_model(),
                                           config=config(1, 1, 0.0))
    try:
        cluster = engine._cluster
        g = cluster.open_group(0, 1, "test/gloo", timeout_s=10)
        assert g.backend == "gloo"
        out = torch.zeros(4)
        g.reduce_scatter(torch.arange(4.0).numpy(), out.numpy(), 0.5)
        assert out.tolist() == [0.0, 0.5, 1.0, 1.5]   # host buffers: fine
        # The step's protocol over it: the same refusal of device
        # addresses, and buffers checked against the layout's sizes.
        p = cluster.step_protocol(g, 0, 1, step_timeout_s=10, two_phase=True)
        layout = engine._layout
        flat = torch.zeros(layout.total_elems)
        with pytest.raises(_zeroshard.ZeroshardError, match=re.escape(
                "reduce_scatter_device: this protocol's group takes host")):
            p.reduce_scatter_device(layout, flat.data_ptr(), flat.numel(),
                                    flat.data_ptr(), flat.numel(), 1.0)
        with pytest.raises(_zeroshard.ZeroshardError, match=re.escape(
                "all_gather_device: this protocol's group takes host")):
            p.all_gather_device(layout, flat.data_ptr(), flat.numel(), 4)
        with pytest.raises(_zeroshard.ZeroshardError,
                           match="reduce_scatter part"):
            p.reduce_scatter(layout, flat.numpy(), torch.zeros(3).numpy(), 1.0)
        with pytest.raises(_zeroshard.ZeroshardError, match="step_timeout_s"):
            cluster.step_protocol(g, 0, 1, step_timeout_s=0, two_phase=True)
        with pytest.raises(_zeroshard.ZeroshardError, match="need a group"):
            cluster.step_protocol(None, 0, 2, step_timeout_s=10,
                                  two_phase=True)
        with pytest.raises(_zeroshard.ZeroshardError,
                           match='backend "mpi" is not gloo or nccl'):
            cluster.open_group(0, 1, "test/mpi", timeout_s=10, backend="mpi")
        if not _zeroshard.has_nccl():
            with pytest.raises(_zeroshard.ZeroshardError, match=re.escape(
                    "collectives backend 'nccl' is not built")):
                cluster.open_group(0, 1, "test/nccl", timeout_s=10,
                                   backend="nccl")
            return
        try:   # a CUDA build: a GPU is needed
            n = cluster.open_group(0, 1, "test/nccl", timeout_s=10,
                                   backend="nccl")
        except _zeroshard.ZeroshardError as e:
            assert "needs a CUDA GPU, and none is visible" in str(e), str(e)
        else:
            assert n.backend == "nccl"
            buf = torch.zeros(4)
            with pytest.raises(_zeroshard.ZeroshardError, match=re.escape(
                    "reduce_scatter: this nccl group takes device buffers")):
                n.reduce_scatter(buf.numpy(), buf.numpy())
    finally:
        engine.close()
