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


def initialize(args=None, model=None, optimizer=None, model_parameters=None,
               training_data=None, lr_scheduler=None, distributed_port=29500,
               mpu=None, dist_init_required=None, collate_fn=None,
               config=None, mesh_param=None, config_params=None):
    """DeepSpeed's initialize: returns (engine, optimizer, training
    dataloader or None, lr scheduler)."""
    if model is None:
        raise ValueError("zeroshard.initialize: model is required")
    if mpu is not None:
        raise NotImplementedError("mpu: model parallelism is not supported")
    if mesh_param is not None:
        raise NotImplementedError(
            "mesh_param: sequence and tensor parallelism are not supported")
    del dist_init_required, distributed_port
    if config is None:
        config = config_params
    engine = ZeroshardEngine(model, model_parameters=model_parameters,
                             optimizer=optimizer, config=config, args=args,
                             training_data=training_data,
                             collate_fn=collate_fn, lr_scheduler=lr_scheduler)
    return (engine, engine.optimizer, engine.training_dataloader,
            engine.lr_scheduler)


def _bits(t):
    """t's elements as integers of the same width (bitwise comparison)."""
    return t.view({torch.float32: torch.int32, torch.bfloat16: torch.int16,
                   torch.float16: torch.int16}[t.dtype])


class GatheredParameters:
    """Full values of `params` inside a `with` block, as DeepSpeed's
    deepspeed.zero.GatheredParameters: under stage 3 the units holding them
    are gathered on entry and released on exit; under stages 1 and 2 they
    are whole already.

    With modifier_rank=R, what rank R writes into them inside the block
    goes to the servers' master weights on exit (every rank must enter the
    block, as in DeepSpeed): the elements R changed are written in FP32,
    the others keep their FP32 master values (not the compute dtype's
    rounding of them), the optimizer state and step stay, and every rank
    then holds the new values. Writes on other ranks are dropped, as
    DeepSpeed's broadcast from the modifier drops them."""

    def __init__(self, params, modifier_rank=None, fwd_module=None,
                 enabled=True):
        del fwd_module
        if isinstance(params, torch.Tensor):
            params = [params]
        self._params = list(params) if enabled else []
        self._modifier = modifier_rank
        self._units = []
        self._engines = []

    def __enter__(self):
        from .engine import _live_engines
        want = {id(p) for p in self._params}
        for e in list(_live_engines):
            mine = list({id(p): p for p in self._params
                         if id(p) in e._shapes}.values())
            if not mine:
                continue
            if self._modifier is not None and not (
                    isinstance(self._modifier, int)
                    and 0 <= self._modifier < e.world):
                raise ValueError(
                    f"GatheredParameters: modifier_rank={self._modifier!r} "
                    f"is not a rank of this run (0 to {e.world - 1})")
            hooks = e._hooks
            if hooks is not None:
                for u, (_, params, _, _) in enumerate(hooks.units):
                    if hooks.live[u] is None and any(id(p) in want
                                                     for p, _, _ in params):
                        hooks.fetch(u)
                        self._units.append((hooks, u))
            if self._modifier is not None:
                # What the block starts from, to see what it changed.
                e._need_open()
                before = {id(p): p.detach().clone() for p in mine}
                self._engines.append((e, mine, before))
        return self

    def __exit__(self, exc_type, *exc):
        try:
            if exc_type is None:
                for e, mine, before in self._engines:
                    self._write_back(e, mine, before)
        finally:
            # Released whatever stage 3 would keep, as DeepSpeed partitions
            # them on exit: a write without modifier_rank is dropped, and a
            # written one is gathered anew when used.
            for hooks, u in self._units:
                hooks.release(u, keep=False)
            self._units = []
            self._engines = []
        return False

    def _write_back(self, e, mine, before):
        where = {id(p): (off, n) for p, off, n in e._slots}
        mine = sorted(mine, key=lambda p: where[id(p)][0])
        ranges = [(where[id(p)][0], where[id(p)][0] + where[id(p)][1])
                  for p in mine]
        if e.rank == self._modifier:
            total = sum(n for _, n in (where[id(p)] for p in mine))
            masters = torch.empty(total, dtype=torch.float32)
            e._cluster.gather(ranges, "fp32", masters.numpy(),
                              min_version=e.global_steps)
            at = 0
            for p in mine:
                n = where[id(p)][1]
                now = p.detach().reshape(-1)
                changed = _bits(now) != _bits(before[id(p)].reshape(-1))
                now, changed = now.cpu(), changed.cpu()   # a device's, too
                seg = masters[at:at + n]
                seg[changed] = now[changed].float()
                at += n
            e._cluster.set_master_weight_ranges(ranges, masters.numpy())
        e._barrier()
        if e._hooks is None:
            e._gather()   # every rank takes the new values
            return
        # Stage 3: the units this block gathered are released on exit and
        # gathered anew when used; one that was live already is gathered
        # again now.
        h = e._hooks
        h._drop_prefetches()   # gathered before the write
        ours = {u for hooks, u in self._units if hooks is h}
        ids = {id(p) for p in mine}
        for u, (_, params, _, _) in enumerate(h.units):
            if (u not in ours and h.live[u] is not None
                    and any(id(p) in ids for p, _, _ in params)):
                h.release(u, keep=False)
                h.fetch(u)
