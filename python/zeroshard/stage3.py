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
in order (forward, the backward's gathers, every micro-batch): that is the
trace. From then on each use of a unit finds its place in the trace, and
the units of the next uses that are not gathered are queued on a
background thread (the library releases the GIL), so they arrive while the
current one computes: as DeepSpeed's prefetch, up to
stage3_prefetch_bucket_size elements in flight, stopping at a unit
gathered already; small units share a call. A gather that finds its unit
prefetched waits for its call; one off the trace (an evaluation, a
different branch) finds its place again or gathers plainly. What is in
flight at a step's end (an old version) is dropped.

What stays gathered (DeepSpeed's zero_optimization keys, with its
defaults): during the first step every unit is released when its forward
or its gradients are done. From the second on, a unit about to be released
stays when the trace uses it again within stage3_max_reuse_distance
elements of other units' uses (1e9: a model smaller than that keeps its
units from forward to backward, and across micro-batches, as DeepSpeed
does), and while the units kept hold at most stage3_max_live_parameters
elements. A unit of at most stage3_param_persistence_threshold elements
(1e5) is persistent: the persistent units are gathered together, in one
call, at the first use of any of them after each step, and released only
at the next step. Every gathered unit holds the current version's bytes, so
what is kept changes no result, only the gathers (and the memory: see
memory_peak and zeroshard-ctl estimate --torch_units). Setting
stage3_max_reuse_distance and stage3_param_persistence_threshold to 0
keeps a unit only while it computes.

Parameters read outside their unit's forward (a weight tied between the
embedding and the head, nn.MultiheadAttention's out_proj.weight, an
F.linear on another module's weight, a ModuleList's parameters read by
code that iterates it): every trained parameter of a released unit is a
_Zero3Param (of a gathered one, a plain nn.Parameter again, so that its
ops pay for no hook), whose __torch_function__ gathers its unit when an op
reads it while the engine's forward runs. Such a gather belongs to
the innermost unit whose forward is running (released when that forward
ends) or, outside every unit, to the forward itself (released when
engine.forward returns); autograd's saved views and the gradient hooks
then treat it as any unit. Outside engine.forward nothing is gathered on
access: GatheredParameters is the way in, as in DeepSpeed.

Every rank must run the same modules in the same order (the
reduce-scatters pair up by order).
"""

import bisect
import concurrent.futures

import torch


# Recomputations running (activation checkpointing's forward again inside
# the backward, units.py): parameters are gathered on access there too.
_recomputing = [0]


class gather_on_access:
    """The context a checkpointed forward runs under (units.py)."""

    def __enter__(self):
        _recomputing[0] += 1

    def __exit__(self, *exc):
        _recomputing[0] -= 1
        return False


def _tracked(t):
    """A parameter these hooks place (its unit may be gathered or not)."""
    return isinstance(t, _Zero3Param) and t.__dict__.get("_zs_unit") is not None


class _Zero3Param(torch.nn.Parameter):
    """A trained parameter under ZeRO-3 (see the module docstring): an op
    that reads it inside engine.forward while its unit is released gathers
    the unit first. Everything else is nn.Parameter's."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, (list, tuple)):
                for b in a:
                    if _tracked(b):
                        b._zs_hooks.on_access(b._zs_unit)
            elif _tracked(a):
                a._zs_hooks.on_access(a._zs_unit)
        with torch._C.DisableTorchFunction():
            return func(*args, **kwargs)


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

    def __init__(self, engine, units, zero):
        # units: [(module, [(param, flat offset, numel)], unit offset, padded)]
        # zero: the resolved config's "zero" section, whose stage3_* keys
        # (DeepSpeed's defaults filled in by the parser) are read here.
        self.engine = engine
        self.units = units
        self.reuse = int(zero["stage3_max_reuse_distance"])
        self.live_cap = int(zero["stage3_max_live_parameters"])
        self.bucket = int(zero["stage3_prefetch_bucket_size"])
        threshold = int(zero["stage3_param_persistence_threshold"])
        self.persistent = [padded <= threshold for _, _, _, padded in units]
        self.live_elems = 0  # elements of the gathered units
        self.grad_elems = 0  # elements of the units' FP32 gradient sums
        self.gathers = 0     # calls to the servers (the persistent units: 1)
        self.gathered = 0    # the elements they brought
        self.live = [None] * len(units)      # the gathered buffer, or None
        self.arrived = [0] * len(units)      # gradients this micro-batch
        self.unit_grad = [None] * len(units)  # N ranks: the unit's FP32 sum
        self.handles = []
        self.grad_accs = []
        self.dtype = engine._dtype
        self.empty = torch.empty(0, dtype=self.dtype)
        self.seq = []        # units gathered, in order, in the first step
        self.order = None    # that order (the trace), once the first step is done
        self.uses = {}       # unit -> its positions in the trace, ascending
        self.pos = 0         # where this step is in it (after the last use)
        self.pending = {}    # unit -> future of its call's {unit: buffer}
        self.prefetched = 0  # gathers that found their unit prefetched
        self._pool = None
        self.owner = {}      # a live buffer's data_ptr -> its unit
        self.active = False  # engine.forward is running (gather on access)
        self.busy = False    # inside fetch / release (no gather on access)
        self.running = []    # units whose forward is running, innermost last
        self.borrowed = {}   # running unit (None: the forward) -> units it read
        self.closed_why = None   # set when the engine closes
        self.peak_bytes = 0  # the most the buffers below held at once
        for u, (_, params, _, _) in enumerate(units):
            for p, _, _ in params:
                p.__class__ = _Zero3Param
                p.__dict__["_zs_hooks"] = self
                p.__dict__["_zs_unit"] = u
        for u, (mod, params, _, _) in enumerate(units):
            self.handles.append(mod.register_forward_pre_hook(
                lambda m, inp, u=u: self._before_forward(u)))
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
        self.gathers += 1
        self.gathered += padded
        if e._prec == "fp16":
            tmp = torch.empty(padded, dtype=torch.float32)
            e._cluster.gather([(off, off + padded)], "fp32", tmp.numpy(),
                              min_version=version)
            buf.copy_(tmp)
        else:
            e._cluster.gather([(off, off + padded)], e._wire, e._np(buf),
                              min_version=version)
        return buf

    def _gather_many(self, us, version):
        """Units `us` (ascending) at `version` in one call to the servers:
        {unit: its own buffer}."""
        e = self.engine
        ranges = [(self.units[v][2], self.units[v][2] + self.units[v][3])
                  for v in us]
        fp16 = e._prec == "fp16"
        flat = torch.empty(sum(b - a for a, b in ranges),
                           dtype=torch.float32 if fp16 else self.dtype)
        self.gathers += 1
        self.gathered += flat.numel()
        e._cluster.gather(ranges, "fp32" if fp16 else e._wire,
                          flat.numpy() if fp16 else e._np(flat),
                          min_version=version)
        out, at = {}, 0
        for v, (a, b) in zip(us, ranges):
            buf = torch.empty(b - a, dtype=self.dtype,
                              pin_memory=e._device.type == "cuda")
            buf.copy_(flat[at:at + b - a])
            out[v] = buf
            at += b - a
        return out

    def fetch(self, u):
        """Gathers unit u at the engine's current version (idempotent)."""
        moved = self.order is not None and self._advance(u)
        if self.live[u] is None:
            if self.closed_why is not None:
                raise RuntimeError(self.closed_why)
            busy, self.busy = self.busy, True
            try:
                self._fetch(u)
            finally:
                self.busy = busy
        if moved:
            self._prefetch_next()

    def _fetch(self, u):
        e = self.engine
        future = self.pending.pop(u, None)
        if future is not None:
            bufs = future.result()   # u's call: each of its units placed
            for v in bufs:
                self.pending.pop(v, None)
            self.prefetched += 1
        elif self.persistent[u]:
            # Every persistent unit not gathered yet, in one call.
            bufs = self._gather_many(
                [v for v in range(len(self.units)) if self.persistent[v] and
                 self.live[v] is None and v not in self.pending],
                e.global_steps)
        else:
            bufs = {u: self._gather(u, e.global_steps)}
        for v, buf in bufs.items():
            self._place(v, buf)
        if self.order is None:
            self.seq.append(u)

    def _place(self, u, buf):
        e = self.engine
        _, params, off, padded = self.units[u]
        if e._staged:
            # Up to the model's device (CUDA; forced in tests on the CPU).
            dev = torch.empty(buf.numel(), dtype=self.dtype, device=e._device)
            dev.copy_(buf)
            buf = dev
        for p, poff, n in params:
            p.data = buf[poff - off:poff - off + n].view(e._shapes[id(p)])
            # Gathered: a plain parameter, so its ops skip the access hook.
            p.__class__ = torch.nn.Parameter
        self.live[u] = buf
        self.live_elems += padded
        self.owner[buf.data_ptr()] = u
        self._note()

    # --- the trace (see the module docstring) --------------------------------

    def _set_trace(self, order):
        self.order = order
        self.uses = {}
        for i, v in enumerate(order):
            self.uses.setdefault(v, []).append(i)
        # cum[i]: the elements of the uses before position i.
        self.cum = [0]
        for v in order:
            self.cum.append(self.cum[-1] + self.units[v][3])

    def _next_use(self, u, at):
        """The first position >= at where the trace uses u, or None."""
        where = self.uses.get(u)
        if not where:
            return None
        i = bisect.bisect_left(where, at)
        return where[i] if i < len(where) else None

    def _advance(self, u):
        """A use of u: the step's place in the trace moves to just after
        u's next use (True), or stays when u is the use it is at (a
        backward's many reads of one unit), or a gathered unit the rest of
        the trace does not use, or off the trace (False)."""
        p = self.pos
        if p > 0 and self.order[p - 1] == u:
            return False
        at = self._next_use(u, p)
        if at is None and self.live[u] is None:
            at = self._next_use(u, 0)   # a gather off the trace: resync
        if at is None:
            return False
        self.pos = at + 1
        return True

    # Units queued together go in one call up to this many elements: small
    # units share a call, large ones go alone so that the first arrives
    # while the next are sent.
    CALL_ELEMS = 1 << 20

    def _prefetch_next(self):
        """Queues the trace's next uses whose units are not gathered, as
        DeepSpeed's prefetch does: from the step's place, up to the first
        unit gathered already (a persistent one aside: those come together,
        never prefetched), while the units in flight hold fewer than
        stage3_prefetch_bucket_size elements and all gathered ones at most
        stage3_max_live_parameters. The calls run in order on one thread,
        CALL_ELEMS at most each (a larger unit alone)."""
        order = self.order
        if not order:
            return
        numel = sum(self.units[v][3] for v in self.pending)
        room = self.live_cap - self.live_elems
        queued = []
        for i in range(self.pos, len(order)):
            v = order[i]
            if self.persistent[v] or v in self.pending or v in queued:
                continue
            if self.live[v] is not None or numel >= self.bucket:
                break
            size = self.units[v][3]
            if numel + size > room:
                break
            queued.append(v)
            numel += size
        call, elems = [], 0
        for v in queued + [None]:
            size = 0 if v is None else self.units[v][3]
            if call and (v is None or elems + size > self.CALL_ELEMS):
                self._submit(sorted(call))
                call, elems = [], 0
            if v is not None:
                call.append(v)
                elems += size
        self._note()

    def _submit(self, us):
        """One call for units `us` on the prefetch thread."""
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="zeroshard-prefetch")
        version = self.engine.global_steps
        if len(us) == 1:
            future = self._pool.submit(
                lambda: {us[0]: self._gather(us[0], version)})
        else:
            future = self._pool.submit(self._gather_many, us, version)
        for v in us:
            self.pending[v] = future

    def _keeps(self, u):
        """Whether unit u, about to be released, stays gathered: persistent,
        or used again by the trace within stage3_max_reuse_distance elements
        while the gathered units hold at most stage3_max_live_parameters."""
        if self.order is None:
            return False   # the first step records the trace, keeping none
        if self.persistent[u]:
            return True
        at = self._next_use(u, self.pos)
        if at is None or self.cum[at] - self.cum[self.pos] >= self.reuse:
            return False
        return self.live_elems <= self.live_cap

    def held_bytes(self):
        """What the gathered units, the prefetches in flight and the
        units' FP32 gradient sums hold now."""
        size = self.empty.element_size()
        n = (self.live_elems + sum(self.units[v][3] for v in self.pending)) * size
        return n + self.grad_elems * 4

    def _note(self):
        self.peak_bytes = max(self.peak_bytes, self.held_bytes())

    def _drop_prefetches(self):
        for future in self.pending.values():
            try:
                future.result()
            except Exception:
                pass   # an old version's gather: nobody waits for it
        self.pending = {}

    def on_access(self, u):
        """An op read a parameter of released unit u (_Zero3Param)."""
        if (not self.active and not _recomputing[0]) or self.busy or \
                self.live[u] is not None:
            return
        self.fetch(u)
        owner = self.running[-1] if self.running else None
        self.borrowed.setdefault(owner, []).append(u)

    def _release_borrowed(self, owner):
        for v in self.borrowed.pop(owner, ()):
            if v not in self.running:
                self.release(v)

    def forward_done(self):
        """engine.forward returned: units read outside every unit's forward
        are released (autograd's saved views gather them again)."""
        self._release_borrowed(None)
        self.borrowed = {}
        self.running = []

    def release(self, u, keep=True):
        """Unit u's use is over: released unless it stays (_keeps); with
        keep=False whatever the rules say (its values may have changed)."""
        if self.live[u] is None or (keep and self._keeps(u)):
            return
        busy, self.busy = self.busy, True
        try:
            for p, _, _ in self.units[u][1]:
                p.data = self.empty
                p.__class__ = _Zero3Param
        finally:
            self.busy = busy
        self.owner.pop(self.live[u].data_ptr(), None)
        self.live[u] = None
        self.live_elems -= self.units[u][3]

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

    def _before_forward(self, u):
        self.fetch(u)
        self.running.append(u)

    def release_all(self):
        """Every unit released, the model's own initial tensors included
        (at a new version: after a step or a restore); the first call arms
        the gradient hooks, the first after a step ends the recording of
        the prefetch order."""
        self._drop_prefetches()
        busy, self.busy = self.busy, True
        for u in range(len(self.units)):
            for p, _, _ in self.units[u][1]:
                p.data = self.empty
                p.__class__ = _Zero3Param
            self.live[u] = None
        self.busy = busy
        self.owner = {}
        self.live_elems = 0
        if not self.grad_accs:
            self._arm_gradient_hooks()
        elif self.order is None and self.seq:
            self._set_trace(self.seq)
        self.pos = 0

    def _after_forward(self, u, out):
        if self.running and self.running[-1] == u:
            self.running.pop()
        self._release_borrowed(u)
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
                self.grad_elems += padded
                self._note()
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
            self.grad_elems -= self.unit_grad[u].numel()
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

    def remove(self, values=None):
        """Detaches from the module: the hooks removed, each parameter a
        plain nn.Parameter again holding values[unit] (the units' flat
        buffers, when given) or nothing."""
        self.shutdown()
        for h in self.handles:
            h.remove()
        self.handles = []
        busy, self.busy = self.busy, True
        e = self.engine
        for u, (_, params, off, _) in enumerate(self.units):
            buf = None if values is None else values[u]
            for p, poff, n in params:
                p.__dict__.pop("_zs_hooks", None)
                p.__dict__.pop("_zs_unit", None)
                p.__class__ = torch.nn.Parameter
                if buf is not None:
                    p.data = buf[poff - off:poff - off + n].view(
                        e._shapes[id(p)]).to(e._device)
        self.busy = busy
        self.live = [None] * len(self.units)
        self.live_elems = 0
        self.owner = {}
