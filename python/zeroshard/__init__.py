"""zeroshard for PyTorch: a torch model trains against zeroshard's shard
servers through DeepSpeed's engine API.

    import zeroshard
    engine, optimizer, loader, scheduler = zeroshard.initialize(
        model=model, model_parameters=model.parameters(),
        training_data=dataset, config="ds_config.json")
    for batch in loader:
        loss = compute_loss(engine(batch))
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint("ckpt/")

The servers hold the FP32 master weights and the optimizer state; the config
is the DeepSpeed JSON zeroshard-train reads, through the same parser. With
"zeroshard": {"servers": S} as a count, initialize starts S local servers
with per-run credentials and engine.close() (also run at exit) stops them.
"""

from ._zeroshard import ZeroshardError, resolve_config
import torch

from .engine import ZeroshardEngine
from .outputs import RunOutputs

__all__ = ["initialize", "GatheredParameters", "RunOutputs", "ZeroshardEngine",
           "ZeroshardError", "resolve_config"]


class _Optimizer:
    """The optimizer initialize returns: the servers run it; step() and
    zero_grad() serve the plain torch loop (loss.backward();
    optimizer.step()), each step() one optimizer step."""

    def __init__(self, engine):
        self._engine = engine

    @property
    def param_groups(self):
        lrs = self._engine.get_lr()
        return [{"lr": lr} for lr in lrs]

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("closures are not supported")
        self._engine._optimizer_step()
        self._engine.micro_steps += self._engine.gradient_accumulation_steps()

    def zero_grad(self, set_to_none=False):
        self._engine.zero_grad(set_to_none)


class _Scheduler:
    """The schedule is the servers' (the config's "scheduler"); this reports
    it. step() does nothing: the servers advance it with each optimizer
    step."""

    def __init__(self, engine):
        self._engine = engine

    def get_last_lr(self):
        return self._engine.get_lr()

    def step(self, *args, **kwargs):
        del args, kwargs


def initialize(args=None, model=None, optimizer=None, model_parameters=None,
               training_data=None, lr_scheduler=None, mpu=None,
               dist_init_required=None, collate_fn=None, config=None,
               config_params=None):
    """DeepSpeed's initialize: returns (engine, optimizer, training
    dataloader or None, lr scheduler)."""
    if model is None:
        raise ValueError("zeroshard.initialize: model is required")
    if mpu is not None:
        raise NotImplementedError("mpu: model parallelism is not supported")
    del dist_init_required
    if config is None:
        config = config_params
    engine = ZeroshardEngine(model, model_parameters=model_parameters,
                             optimizer=optimizer, config=config, args=args,
                             training_data=training_data,
                             collate_fn=collate_fn, lr_scheduler=lr_scheduler)
    return (engine, _Optimizer(engine), engine.training_dataloader,
            _Scheduler(engine))


class GatheredParameters:
    """Full values of `params` inside a `with` block, as DeepSpeed's
    deepspeed.zero.GatheredParameters: under stage 3 the units holding them
    are gathered on entry and released on exit; under stages 1 and 2 they
    are whole already. Writes inside the block are not sent to the servers:
    modifier_rank other than None is refused (the servers take new master
    weights only before the first step, SetMasterWeights)."""

    def __init__(self, params, modifier_rank=None, fwd_module=None,
                 enabled=True):
        del fwd_module
        if modifier_rank is not None:
            raise NotImplementedError(
                "GatheredParameters(modifier_rank=...): writing parameters "
                "back to the servers after training started is not supported")
        if isinstance(params, torch.nn.Parameter):
            params = [params]
        self._params = list(params) if enabled else []
        self._units = []

    def __enter__(self):
        from .engine import _live_engines
        want = {id(p) for p in self._params}
        for e in list(_live_engines):
            hooks = e._hooks
            if hooks is None:
                continue
            for u, (_, params, _, _) in enumerate(hooks.units):
                if hooks.live[u] is None and any(id(p) in want
                                                 for p, _, _ in params):
                    hooks.fetch(u)
                    self._units.append((hooks, u))
        return self

    def __exit__(self, *exc):
        for hooks, u in self._units:
            hooks.release(u)
        self._units = []
        return False
