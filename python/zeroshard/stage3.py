"""ZeRO stage 3 for the PyTorch front-end: a unit's parameters exist on a
rank only while its module runs.

A unit is a module that owns parameters directly (engine.py's layout). Its
forward pre-hook gathers the unit's range of the current version from the
servers into a buffer of its own and points the parameters' .data at it;
its forward hook releases them (each .data becomes an empty tensor) and
wraps the module's outputs in _PreBackward, whose backward gathers the unit
again before autograd reaches the module's own backward. After each
parameter's gradient is accumulated (a hook on its AccumulateGrad node, as
DeepSpeed does), the gradient is added into this rank's share and dropped;
when the whole unit has its gradients the parameters are released again.

This rank's share: one rank alone keeps the whole flat gradient (the sums are
then those of stages 1 and 2, bit for bit); with N ranks each unit's
gradient is reduce-scattered into the rank's partition as soon as the unit
is complete, so a rank holds a partition's gradient and, at any time, the
parameters of the units that are running.

What autograd saves: a module's backward needs its weights, and torch saves
them as views (addmm saves weight.t()), which would keep every unit's buffer
alive from its forward to its backward. Under engine.forward a
saved-tensors hook records a view of a live unit's buffer as (unit, offset,
shape, stride) instead, and rebuilds it from the unit's buffer when
backward asks for it (gathering the unit again if it was released): a
unit's parameters then exist only while it computes, as ZeRO-3 promises.

Prefetch: the units gathered during the first optimizer step are recorded
in order (forward, the backward's gathers, every micro-batch); from then on,
each gather starts the next unit of that order on a background thread (the
library releases the GIL), so it arrives while the current one computes. A
gather that finds its unit prefetched waits for it; one off the recorded
order (an evaluation, a different branch) finds its place again or gathers
plainly. At most one unit is in flight beyond the live ones, and what is in
flight at a step's end (an old version) is dropped.

Every rank must run the same modules in the same order (the
reduce-scatters pair up by order), and a parameter must be used only inside
the module that owns it (tied weights read elsewhere need stage 1 or 2).
"""

import concurrent.futures

import torch


class _PreBackward(torch.autograd.Function):
    """Identity on the module's outputs; its backward gathers the unit."""

    @staticmethod
    def forward(ctx, hooks, unit, *outs):
        ctx.hooks = hooks
        ctx.unit = unit
        return tuple(o.detach() for o in outs)

    @staticmethod
    def backward(ctx, *grads):
        ctx.hooks.fetch(ctx.unit)
        return (None, None) + grads


def _wrap(hooks, unit, out):
    if isinstance(out, torch.Tensor):
        if out.requires_grad:
            return _PreBackward.apply(hooks, unit, out)[0]
        return out
    if isinstance(out, (tuple, list)):
        idx = [i for i, o in enumerate(out)
               if isinstance(o, torch.Tensor) and o.requires_grad]
        if not idx:
            return out
        wrapped = _PreBackward.apply(hooks, unit, *[out[i] for i in idx])
        items = list(out)
        for i, w in zip(idx, wrapped):
            items[i] = w
        if type(out) is tuple:
            return tuple(items)
        if type(out) is list:
            return items
        return type(out)(*items)  # a namedtuple
    return None  # not wrappable: the unit stays gathered until its gradients


class UnitHooks:
    """The stage-3 hooks of one engine (see the module docstring)."""

    def __init__(self, engine, units):
        # units: [(module, [(param, flat offset, numel)], unit offset, padded)]
        self.engine = engine
        self.units = units
        self.live = [None] * len(units)      # the gathered buffer, or None
        self.arrived = [0] * len(units)      # gradients this micro-batch
        self.unit_grad = [None] * len(units)  # N ranks: the unit's FP32 sum
        self.handles = []
        self.grad_accs = []
        self.dtype = engine._dtype
        self.empty = torch.empty(0, dtype=self.dtype)
        self.seq = []        # units gathered, in order, in the first step
        self.order = None    # that order, once the first step is done
        self.pos = 0         # where this step is in it
        self.pending = {}    # unit -> future of its gathered buffer
        self.prefetched = 0  # gathers that found their unit prefetched
        self._pool = None
        self.owner = {}      # a live buffer's data_ptr -> its unit
        for u, (mod, params, _, _) in enumerate(units):
            self.handles.append(mod.register_forward_pre_hook(
                lambda m, inp, u=u: self.fetch(u)))
            self.handles.append(mod.register_forward_hook(
                lambda m, inp, out, u=u: self._after_forward(u, out)))

    def _arm_gradient_hooks(self):
        # On each parameter's AccumulateGrad node, taken while its .data
        # has the compute dtype and its full shape: torch gives a parameter
        # a new node when .data changes dtype (an FP32 model under BF16),
        # whose hooks the old one's are not, and the node checks gradients
        # against the shape it was made with. Held here, so the node lives
        # as long as the hooks.
        for u, (_, params, _, _) in enumerate(self.units):
            for i, (p, _, _) in enumerate(params):
                p.data = torch.empty(self.engine._shapes[id(p)],
                                     dtype=self.dtype)
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                p.data = self.empty
                acc.register_hook(
                    lambda *_, u=u, i=i: self._grad_ready(u, i))
                self.grad_accs.append(acc)

    # --- parameters -------------------------------------------------------

    def _gather(self, u, version):
        """Unit u's range at `version`, in a new host buffer (pinned for a
        CUDA model)."""
        e = self.engine
        _, _, off, padded = self.units[u]
        buf = torch.empty(padded, dtype=self.dtype,
                          pin_memory=e._device.type == "cuda")
        if e._prec == "fp16":
            tmp = torch.empty(padded, dtype=torch.float32)
            e._cluster.gather([(off, off + padded)], "fp32", tmp.numpy(),
                              min_version=version)
            buf.copy_(tmp)
        else:
            e._cluster.gather([(off, off + padded)], e._wire, e._np(buf),
                              min_version=version)
        return buf

    def fetch(self, u):
        """Gathers unit u at the engine's current version (idempotent)."""
        if self.live[u] is not None:
            return
        e = self.engine
        _, params, off, _ = self.units[u]
        future = self.pending.pop(u, None)
        if future is not None:
            buf = future.result()
            self.prefetched += 1
        else:
            buf = self._gather(u, e.global_steps)
        if e._staged:
            # Up to the model's device (CUDA; forced in tests on the CPU).
            dev = torch.empty(buf.numel(), dtype=self.dtype, device=e._device)
            dev.copy_(buf)
            buf = dev
        for p, poff, n in params:
            p.data = buf[poff - off:poff - off + n].view(e._shapes[id(p)])
        self.live[u] = buf
        self.owner[buf.data_ptr()] = u
        if self.order is None:
            self.seq.append(u)
        else:
            self._prefetch_after(u)

    def _prefetch_after(self, u):
        order = self.order
        if not order:
            return
        at = next((i for i in range(self.pos, len(order)) if order[i] == u),
                  None)
        if at is None:
            at = next((i for i in range(len(order)) if order[i] == u), None)
        if at is None:
            return
        self.pos = at + 1
        if self.pos >= len(order) or self.pending:
            return
        nxt = order[self.pos]
        if self.live[nxt] is not None:
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="zeroshard-prefetch")
        self.pending[nxt] = self._pool.submit(self._gather, nxt,
                                              self.engine.global_steps)

    def _drop_prefetches(self):
        for future in self.pending.values():
            try:
                future.result()
            except Exception:
                pass   # an old version's gather: nobody waits for it
        self.pending = {}

    def release(self, u):
        if self.live[u] is None:
            return
        for p, _, _ in self.units[u][1]:
            p.data = self.empty
        self.owner.pop(self.live[u].data_ptr(), None)
        self.live[u] = None

    # --- saved tensors (see the module docstring) --------------------------

    def pack(self, t):
        if self.owner and t.layout == torch.strided and t.numel() > 0:
            u = self.owner.get(t.storage().data_ptr())
            if u is not None:
                return (u, t.storage_offset(), tuple(t.shape), t.stride())
        return t

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        u, offset, shape, stride = packed
        self.fetch(u)
        return self.live[u].as_strided(shape, stride, offset)

    def saving(self):
        """The context engine.forward runs the model under."""
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def release_all(self):
        """Every unit released, the model's own initial tensors included
        (at a new version: after a step or a restore); the first call arms
        the gradient hooks, the first after a step ends the recording of
        the prefetch order."""
        self._drop_prefetches()
        for u in range(len(self.units)):
            for p, _, _ in self.units[u][1]:
                p.data = self.empty
            self.live[u] = None
        self.owner = {}
        if not self.grad_accs:
            self._arm_gradient_hooks()
        elif self.order is None and self.seq:
            self.order = self.seq
        self.pos = 0

    def _after_forward(self, u, out):
        if not torch.is_grad_enabled():
            self.release(u)
            return None
        wrapped = _wrap(self, u, out)
        if wrapped is None:
            return None  # kept gathered: released when its gradients are in
        self.release(u)
        return wrapped

    # --- gradients --------------------------------------------------------

    def _grad_ready(self, u, i):
        e = self.engine
        p, poff, n = self.units[u][1][i]
        g = p.grad
        if g is None:
            return
        p.grad = None
        g = g.cpu()   # the rank's share is on the host (a no-op on the CPU)
        if e._group is None:
            e._flat_grad[poff:poff + n].add_(g.reshape(-1))
        else:
            _, _, off, padded = self.units[u]
            if self.unit_grad[u] is None:
                self.unit_grad[u] = torch.zeros(padded, dtype=torch.float32)
            self.unit_grad[u][poff - off:poff - off + n].add_(
                g.reshape(-1).float())
        self.arrived[u] += 1
        if self.arrived[u] == len(self.units[u][1]):
            self._unit_done(u)

    def _unit_done(self, u):
        e = self.engine
        self.arrived[u] = 0
        if e._group is not None and self.unit_grad[u] is not None:
            b, end = e._my_ranges[u]
            at = e._part_offsets[u]
            out = torch.empty(end - b, dtype=torch.float32)
            e._group.reduce_scatter(self.unit_grad[u].numpy(), out.numpy(),
                                    1.0 / e.world)
            e._part_grad[at:at + end - b].add_(out)
            self.unit_grad[u] = None
        self.release(u)

    def flush(self):
        """At the accumulation boundary: units whose gradients came in part
        (a parameter unused this micro-batch) are completed, in unit order."""
        for u in range(len(self.units)):
            if self.arrived[u] or self.unit_grad[u] is not None:
                self._unit_done(u)

    def shutdown(self):
        """Waits for the prefetch thread and ends it (engine.close())."""
        self._drop_prefetches()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def remove(self):
        self.shutdown()
        for h in self.handles:
            h.remove()
        self.handles = []
