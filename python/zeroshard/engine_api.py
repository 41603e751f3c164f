"""DeepSpeed's engine API beyond training's core (ZeroshardEngine holds
that): the attributes and queries scripts call, the returned optimizer and
scheduler, and the per-step hyper-parameters they give the servers."""

import contextlib
import logging
import os
import sys

import torch

from . import _zeroshard
from .optimizer import ServerSchedule, ZeroshardOptimizer

_log = logging.getLogger("zeroshard")


class DeepSpeedEngineApi:
    """Mixed into ZeroshardEngine; see the module docstring."""

    # --- the optimizer and the scheduler ---------------------------------

    def _make_optimizer(self):
        """self.optimizer and self.lr_scheduler, as initialize returns
        them. The groups are live (what they hold at a step is what the
        servers apply) unless the config gives its tensor classes their own
        settings or rules (zeroshard.param_groups, Adafactor, Muon): then
        one group shows the schedule's lr, and writes to it are refused."""
        o = self._cfg["optimizer"]
        defaults = {"lr": o["lr"], "betas": (o["beta1"], o["beta2"]),
                    "eps": o["eps"], "weight_decay": o["weight_decay"]}
        self.skipped_steps = 0
        self.global_samples = 0
        self._step_applied = True
        client = self._client_optimizer
        self._live_groups = self._torch_groups is not None
        if not self._live_groups:
            groups = [{"params": list(self._order)}]
            shared = None
        elif client is not None:
            groups = [{**{k: v for k, v in g.items() if k != "params"},
                       "params": list(g["params"])}
                      for g in client.param_groups]
            shared = client.param_groups
        else:
            groups = [{**defaults, **{k: v for k, v in g.items()
                                      if k != "params"},
                       "params": list(g["params"])}
                      for g in self._torch_groups]
            shared = None
        # torch refuses a group without parameters; a frozen-only group's
        # dicts still come through `shared`.
        self.optimizer = ZeroshardOptimizer(
            self, [g for g in groups if g["params"]] or
            [{"params": list(self._order)}], defaults, shared=shared)
        self.optimizer._rule_params = {
            k: float(v) for k, v in o.get("rule_params", {}).items()}
        if not self._live_groups:
            self.optimizer.param_groups[0]["lr"] = self._server_lr()
        sched = self._client_scheduler
        if sched is not None and not self._live_groups:
            raise ValueError(
                "lr_scheduler: the config's zeroshard.param_groups or tensor "
                "rules (Adafactor, Muon) fix each class's learning rate; a "
                "client scheduler needs torch's parameter groups")
        if sched is not None and not hasattr(sched, "step"):
            if not callable(sched):
                raise TypeError("lr_scheduler: a scheduler (with step()) or "
                                "a callable taking the optimizer")
            sched = sched(self.optimizer)   # DeepSpeed's callable form
        if sched is not None:
            owner = getattr(sched, "optimizer", None)
            if owner is not None and owner is not self.optimizer and (
                    client is None or owner is not client):
                raise ValueError(
                    "lr_scheduler: it steps another optimizer than the one "
                    "passed to initialize, so its learning rates would not "
                    "reach the servers")
            self.lr_scheduler = sched
        elif not self._live_groups:
            # The servers run the config's schedule: this reports it.
            self.lr_scheduler = ServerSchedule(self, self.optimizer)
        elif self._ds_scheduler is not None:
            # DeepSpeed's class for the config's section, stepped by the
            # engine as a client's is.
            from .deepspeed import lr_schedules
            kind, params = self._ds_scheduler
            self.lr_scheduler = lr_schedules.from_config(
                kind, params, self.optimizer, self._cfg["optimizer"])
        else:
            self.lr_scheduler = None
        if client is not None and client.state:
            # State the script loaded into its torch optimizer before
            # initialize (nanoGPT's resume): the servers take it.
            self._pending_client_state = client.state_dict()

    def _check_fp16_on_cpu(self, model):
        """fp16 on the CPU: torch has no FP16 convolution there, so a model
        with one would fail at its first forward; refused now, naming it
        (DeepSpeed refuses fp16 on a device without it at initialize)."""
        if self._prec != "fp16" or self._device.type != "cpu":
            return
        convs = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d,
                 torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d,
                 torch.nn.ConvTranspose3d)
        for name, m in model.named_modules():
            if isinstance(m, convs):
                raise ValueError(
                    f"fp16 on the CPU: module {name} ({type(m).__name__}) has "
                    f"no FP16 kernel on the CPU in torch {torch.__version__}; "
                    "use bf16 (\"bf16\": {\"enabled\": true}) or a GPU")

    def _cast_the_rest(self, model):
        """Under BF16 / FP16 the whole module computes in that dtype, as
        DeepSpeed's module.bfloat16() / half(): the trained parameters are
        views of the flat buffer (that dtype, FP32 masters on the servers);
        here the frozen ones and the floating-point buffers (BatchNorm's
        running statistics) follow."""
        if self._dtype == torch.float32:
            return
        trained = {id(p) for p in self._order}
        with torch.no_grad():
            for p in model.parameters():
                if id(p) not in trained and p.is_floating_point():
                    p.data = p.data.to(self._dtype)
            for m in model.modules():
                for name, b in m._buffers.items():
                    if b is not None and b.is_floating_point():
                        m._buffers[name] = b.to(self._dtype)

    def _server_lr(self):
        """The learning rate the servers' own schedule gives the next step
        (the config's classes decide the groups: not live)."""
        return self._config.learning_rate_at(self._applied_steps() + 1)

    def get_lr(self):
        """The learning rate of the next optimizer step, per group (what
        the groups hold, as DeepSpeed's engine reports)."""
        return [g["lr"] for g in self.optimizer.param_groups]

    def _applied_steps(self):
        return self.global_steps - self.skipped_steps

    def _step_settings(self):
        """This step's (lr, weight_decay, beta1, beta2, eps) for each group
        the servers hold; None where the config's classes fix them."""
        if not self._live_groups:
            want = self._server_lr()
            got = self.optimizer.param_groups[0]["lr"]
            if got != want:
                raise ValueError(
                    f"optimizer.param_groups[0][\"lr\"] = {got}: the config's "
                    "zeroshard.param_groups or tensor rules (Adafactor, Muon) "
                    "fix each class's learning rate to the schedule "
                    f"({want} at this step)")
            return None
        every = self.optimizer.settings()
        return [every[i] for i in self._server_group_of]

    def _after_step(self, applied):
        """DeepSpeed's bookkeeping after an optimizer step: counts, the
        scheduler (stepped only when the step was applied), the progress
        line every steps_per_print steps."""
        self._step_applied = applied
        if not applied:
            self.skipped_steps += 1
        self.global_samples += self._train_batch
        # torch's schedulers count their optimizer's steps (and warn when
        # they step first): the servers' step is this optimizer's.
        for o in (self.optimizer, self._client_optimizer):
            if o is not None and hasattr(o, "_step_count"):
                o._step_count += 1
        if applied and self.lr_scheduler is not None:
            # The servers' own schedule is only reported; any other is the
            # script's or DeepSpeed's class, stepped as DeepSpeed steps it.
            if isinstance(self.lr_scheduler, ServerSchedule):
                self.lr_scheduler._advance()
            else:
                self.lr_scheduler.step()
        every = self._steps_per_print or 0
        if every and self.rank == 0 and self.global_steps % every == 0:
            lrs = [g["lr"] for g in self.optimizer.param_groups]
            print(f"zeroshard: step={self.global_steps}, skipped="
                  f"{self.skipped_steps}, lr={lrs}, loss_scale="
                  f"{self.loss_scale()}", file=sys.stderr, flush=True)

    # --- who and where --------------------------------------------------

    @property
    def global_rank(self):
        return self.rank

    @property
    def local_rank(self):
        v = os.environ.get("LOCAL_RANK")
        return int(v) if v not in (None, "") else self.rank

    @property
    def world_size(self):
        return self.world

    @property
    def dp_world_size(self):
        return self.world

    @property
    def device(self):
        return self._device

    # --- what the config says ---------------------------------------------

    def fp16_enabled(self):
        return self._prec == "fp16"

    def bfloat16_enabled(self):
        return self._prec == "bf16"

    def gradient_clipping(self):
        return self._clip

    def zero_optimization_stage(self):
        return self._ds_stage

    def zero_optimization(self):
        return self._ds_stage > 0

    def steps_per_print(self):
        return self._steps_per_print

    def train_micro_batch_size_per_gpu(self):
        return self._micro

    def zero_gather_16bit_weights_on_model_save(self):
        return bool(self._zero_keys.get(
            "stage3_gather_16bit_weights_on_model_save",
            self._zero_keys.get("stage3_gather_fp16_weights_on_model_save",
                                False)))

    # --- the step's state -------------------------------------------------

    def was_step_applied(self):
        """Whether the last optimizer step changed the weights (False when
        its gradients were not finite and it was skipped)."""
        return self._step_applied

    def set_gradient_accumulation_boundary(self, is_boundary):
        """Makes the next step() an optimizer step (True) or a micro-step
        (False) whatever the count says, as DeepSpeed's manual boundary."""
        self._forced_boundary = bool(is_boundary)

    @contextlib.contextmanager
    def no_sync(self):
        """DeepSpeed's no_sync: backward passes inside it accumulate
        without reducing. The ranks here reduce once per optimizer step, at
        step(), so every backward already does that."""
        yield

    def get_mom(self):
        return [g.get("betas") for g in self.optimizer.param_groups]

    # --- saving the module ------------------------------------------------

    def _zero3_consolidated_16bit_state_dict(self, exclude_frozen_parameters=False):
        """The module's state dict with every trainable parameter whole, in
        the compute dtype (the servers' masters rounded once), on rank 0;
        None on the other ranks (every rank must call it)."""
        self._need_open()
        masters = self.consolidated_state_dict()
        out = None
        if self.rank == 0:
            dtype = self._dtype
            out = {}
            trainable = {self._names[id(p)] for p in self._order}
            for name, t in self.module.state_dict().items():
                if name in masters:
                    out[name] = masters[name].to(dtype)
                elif name in trainable:
                    continue
                else:
                    frozen = name in self._names.values()
                    if frozen and exclude_frozen_parameters:
                        continue
                    out[name] = t.detach().cpu().clone()
        self._barrier()
        return out

    def save_16bit_model(self, save_dir, save_filename="pytorch_model.bin",
                         exclude_frozen_parameters=False):
        """torch.save of _zero3_consolidated_16bit_state_dict() into
        save_dir/save_filename, by rank 0; True once written."""
        sd = self._zero3_consolidated_16bit_state_dict(
            exclude_frozen_parameters=exclude_frozen_parameters)
        if self.rank == 0:
            os.makedirs(save_dir, exist_ok=True)
            torch.save(sd, os.path.join(save_dir, save_filename))
        self._barrier()
        return True

    save_fp16_model = save_16bit_model

    # --- memory -------------------------------------------------------------

    def memory_peak(self):
        """The most bytes this rank's engine has held of the parameters and
        gradients at once (its own buffers: the flat parameters and
        gradient, or under stage 3 the gradient or its partition plus the
        gathered units, the prefetches and the units' FP32 gradient sums);
        not autograd's transient gradients, activations or torch's own
        memory. What zeroshard-ctl estimate --torch_units estimates."""
        grads = [t for t in (self._flat_grad,
                             getattr(self, "_part_grad", None))
                 if t is not None]
        fixed = sum(t.numel() * t.element_size() for t in grads)
        if self._hooks is None:
            fixed += self._flat_param.numel() * self._flat_param.element_size()
            return fixed
        return fixed + self._hooks.peak_bytes

    def unit_sizes(self):
        """The units' padded sizes in elements, in layout order (for
        zeroshard-ctl estimate --torch_units)."""
        return [padded for _, _, _, padded in self._layout.units()]

    def empty_partition_cache(self):
        """Releases every gathered ZeRO-3 unit (gathered again when used)."""
        self._need_open()
        if self._hooks is not None:
            self._hooks.release_all()

    def offload_states(self, include=None, device=None, pin_memory=True,
                       non_blocking=False):
        """DeepSpeed moves the optimizer state off the device; here it never
        is on it (the servers hold it), and under stage 3 the gathered
        units are released."""
        del include, device, pin_memory, non_blocking
        self.empty_partition_cache()

    def reload_states(self, non_blocking=False):
        """The counterpart of offload_states: nothing to bring back (the
        units are gathered again when used)."""
        del non_blocking
        self._need_open()

    def destroy(self):
        """DeepSpeed's destroy: close()."""
        self.close()

    def compile(self, *args, **kwargs):
        raise NotImplementedError(
            f"engine.compile: torch.compile needs torch 2 (this is torch "
            f"{torch.__version__}), and the engine's hooks are not traced")

    def is_compiled(self):
        return False

    # --- loading the weights alone ------------------------------------------

    def _load_weights_only(self, directory, strict=True, scheduler=False):
        """load_checkpoint(load_module_only=True): the newest checkpoint's
        masters (read from its files by rank 0, which then writes them to
        the servers), frozen parameters and buffers; the optimizer state,
        the servers' versions and the engine's counters stay. Returns
        (path, client_state)."""
        from . import checkpoint_io
        path = ""
        if self.rank == 0:
            path, values = checkpoint_io.read_fp32(directory)
            mine = {self._names[id(p)]: (off, n) for p, off, n in self._slots}
            missing = sorted(set(mine) - set(values))
            if missing and strict:
                raise RuntimeError(
                    f"load_checkpoint(load_module_only=True): {path} has no "
                    f"{missing[:4]} (load_module_strict=False loads the rest)")
            ranges, chunks = [], []
            for name, (off, n) in sorted(mine.items(), key=lambda x: x[1][0]):
                if name not in values:
                    continue
                v = values[name].reshape(-1)
                if v.numel() != n:
                    raise RuntimeError(
                        f"load_checkpoint: {name} has {v.numel()} elements in "
                        f"{path}, {n} here")
                ranges.append((off, off + n))
                chunks.append(v)
            if ranges:
                self._cluster.set_master_weight_ranges(
                    ranges, torch.cat(chunks).numpy())
        if self._group is not None:
            path = self._group.broadcast(path.encode(), 0).decode()
        # Frozen parameters and buffers: rank 0's, read by every rank.
        from . import rank_state
        first = os.path.join(path, "zeroshard_rank0.pt")
        if os.path.exists(first):
            zero = torch.load(first)
            try:
                rank_state.load_buffers(self.module, zero["buffers"])
                if zero.get("frozen") is not None:
                    rank_state.load_frozen(self.module, zero["frozen"])
            except RuntimeError:
                if strict:
                    raise
        state = torch.load(os.path.join(path, "zeroshard_engine.pt"))
        if scheduler:
            self._restore_schedule(state)
        self._barrier()
        self._gather()
        return path, state["client_state"]

    # --- checkpointed hyper-parameters ---------------------------------------

    def _group_hypers(self):
        """Each group's hyper-parameters (what a checkpoint keeps of them)."""
        return [{k: v for k, v in g.items() if k != "params"}
                for g in self.optimizer.param_groups]

    def _restore_schedule(self, state):
        """After a restore: the groups' hyper-parameters and the scheduler
        as they were saved (the config's scheduler follows the restored
        step count)."""
        saved = state.get("param_groups")
        if saved is not None and self._live_groups:
            if len(saved) != len(self.optimizer.param_groups):
                raise RuntimeError(
                    f"the checkpoint has {len(saved)} parameter groups, this "
                    f"optimizer {len(self.optimizer.param_groups)}")
            for g, h in zip(self.optimizer.param_groups, saved):
                g.update(h)
        if self.lr_scheduler is None:
            return
        if isinstance(self.lr_scheduler, ServerSchedule):
            self.lr_scheduler._advance()
        elif state.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])

    # --- the optimizer's state ------------------------------------------------

    def _state_slots(self):
        return list(self._cluster.inspect_all()[0]["state_slots"])

    def _reader(self):
        """Who reads optimizer state (a snapshot: an admin's call) on this
        rank, with no collective: rank 0's own connection; another rank's
        own admin connection, made when first needed (the run's credentials
        hold every role's token)."""
        if self.rank == 0:
            return self._cluster
        if self._admin is None:
            from .interruptible import Interruptible
            addresses, credentials, run_id, timeout, replicas = (
                self._connection)
            try:
                self._admin = Interruptible(_zeroshard.Cluster(
                    addresses, self._layout, credentials_dir=credentials,
                    role="admin", run_id=run_id, call_timeout_s=timeout,
                    replicas=replicas))
            except _zeroshard.ZeroshardError as err:
                raise RuntimeError(
                    f"rank {self.rank}: reading the optimizer state needs the "
                    f"admin token in {credentials or 'the credentials'}: "
                    f"{err}") from None
        return self._admin

    def _read_state(self, arrays, begin, end):
        """`arrays` over [begin, end) from the servers, read by this rank
        alone (no collective): a float32 tensor of shape (len(arrays),
        end - begin)."""
        out = torch.empty(len(arrays) * (end - begin), dtype=torch.float32)
        self._reader().read_state(arrays, out.numpy(), range=(begin, end))
        return out.view(len(arrays), end - begin)

    def _param_index(self, optimizer):
        """(index in torch's numbering, parameter) over the groups in order."""
        out = []
        for g in optimizer.param_groups:
            for p in g["params"]:
                out.append(p)
        return list(enumerate(out))

    def _optimizer_state_dict(self, optimizer):
        """torch's layout from the servers, read by the calling rank alone
        (a local call, as torch's: rank 0 alone may save it): "state" per
        parameter index, with the
        rule's arrays in the parameter's shape and "step", for the trained
        parameters once a step has been applied; "param_groups" with the
        groups' values and parameter indices. Under BF16 / FP16 each state
        also holds "zeroshard_master", the FP32 master, which torch's
        mixed-precision loops keep elsewhere and load_state_dict restores."""
        self._need_open()
        if self._pending_grads():
            raise RuntimeError(
                "optimizer.state_dict() inside an accumulation window: save "
                "after engine.step()")
        slots = self._state_slots()
        steps = min(st["optimizer_step"] for st in self._cluster.inspect_all())
        arrays = ["master"] + slots
        flat = self._read_state(arrays, 0, self._total)
        where = {id(p): (off, n) for p, off, n in self._slots}
        state = {}
        if steps > 0:
            for i, p in self._param_index(optimizer):
                if id(p) not in where:
                    continue   # frozen: torch keeps no state for it
                off, n = where[id(p)]
                shape = self._shapes[id(p)]
                st = {"step": torch.tensor(float(steps))}
                for k, name in enumerate(slots):
                    st[name] = flat[1 + k, off:off + n].clone().view(shape)
                if self._prec != "fp32":
                    st["zeroshard_master"] = flat[0, off:off + n].clone() \
                        .view(shape)
                state[i] = st
        groups, at = [], 0
        for g in optimizer.param_groups:
            h = {k: v for k, v in g.items() if k != "params"}
            h["params"] = list(range(at, at + len(g["params"])))
            at += len(g["params"])
            groups.append(h)
        return {"state": state, "param_groups": groups}

    def _load_optimizer_state_dict(self, optimizer, state_dict):
        """Every rank calls it with the same dict: the groups' values here,
        the rule's arrays and the step count on the servers (rank 0 writes;
        parameters without state start from zeros, as torch's)."""
        self._need_open()
        if self._pending_grads():
            raise RuntimeError(
                "optimizer.load_state_dict() inside an accumulation window")
        try:
            groups = state_dict["param_groups"]
            state = state_dict["state"]
        except (KeyError, TypeError):
            raise ValueError("load_state_dict: want a dict with \"state\" and "
                             "\"param_groups\" (torch's layout)") from None
        mine = optimizer.param_groups
        if len(groups) != len(mine) or any(
                len(a["params"]) != len(b["params"])
                for a, b in zip(groups, mine)):
            raise ValueError(
                "load_state_dict: the saved groups hold "
                f"{[len(g['params']) for g in groups]} parameters, this "
                f"optimizer's {[len(g['params']) for g in mine]}")
        index = self._param_index(optimizer)
        where = {id(p): (off, n) for p, off, n in self._slots}
        slots = self._state_slots()
        steps = {float(st["step"]) for st in state.values() if "step" in st}
        if len(steps) > 1:
            raise ValueError(
                "load_state_dict: the parameters' step counts differ "
                f"({sorted(steps)[:4]}); the servers keep one per step")
        counted = bool(steps)
        step = int(steps.pop()) if steps else 0
        if not counted and any(st and slots[0] in st
                               for st in state.values()):
            # The rule's arrays with no step count (torch's SGD keeps
            # none): the next step goes on from them, as torch's does,
            # not from a first step's fresh state.
            step = 1
        arrays = {name: torch.zeros(self._total, dtype=torch.float32)
                  for name in slots}
        master = None
        for i, p in index:
            st = state.get(i, state.get(str(i)))
            if st is None or id(p) not in where:
                continue
            off, n = where[id(p)]
            for name in slots:
                if name not in st:
                    raise ValueError(
                        f"load_state_dict: state {i} has no {name!r} (the "
                        f"servers' rule keeps {slots})")
                t = torch.as_tensor(st[name]).detach().to("cpu", torch.float32)
                if t.numel() != n:
                    raise ValueError(
                        f"load_state_dict: state {i} {name!r} has {t.numel()} "
                        f"elements, the parameter {n}")
                arrays[name][off:off + n] = t.reshape(-1)
            if "zeroshard_master" in st:
                if master is None:
                    master = []
                master.append((off, n, torch.as_tensor(
                    st["zeroshard_master"]).detach().to(
                        "cpu", torch.float32).reshape(-1)))
        for g, h in zip(mine, groups):
            for k, v in h.items():
                if k != "params":
                    g[k] = v
        if self.rank == 0:
            whole = [(0, self._total)]
            for name in slots:
                self._cluster.set_state_ranges(whole, name,
                                               arrays[name].numpy(),
                                               optimizer_step=step)
            if master:
                master.sort(key=lambda m: m[0])
                self._cluster.set_master_weight_ranges(
                    [(o, o + n) for o, n, _ in master],
                    torch.cat([v for _, _, v in master]).numpy())
        self._barrier()
        if master:
            self._gather()
