"""The training engine of the PyTorch front-end: DeepSpeed's engine API over
zeroshard's shard servers.

The model's parameters are views into one flat buffer laid out as the
servers' flat space (common/layout.h: units padded to 64 elements), and so
are their gradients: a step pushes the flat gradient to the servers, which
apply the optimizer to their FP32 master weights and state, and gathers the
new weights back into the same memory. No parameter or gradient byte is
copied between torch and the client library.

Ranks (RANK / WORLD_SIZE, started by zeroshard-launch) each hold the whole
model, as in ZeRO stages 1 and 2: their gradients are averaged and
reduce-scattered among them over the worker's collectives (Gloo), met
through server 0's key-value store, and each rank pushes its partition. One
rank alone pushes its whole gradient. FP32 or BF16 parameters (BF16: the
servers keep FP32 masters and send their BF16 mirror).
"""

import atexit
import json
import os
import secrets
import signal
import sys
import threading
import weakref

import torch

from . import _zeroshard
from . import engine_setup
from .local_cluster import LocalCluster
from .stage3 import UnitHooks
from . import rank_state
from .engine_api import DeepSpeedEngineApi
from .engine_checkpoint import CheckpointApi
from .engine_step import StepApi
from .interruptible import Interruptible, unwrap
from .units import apply_checkpointing, plan_units

_live_engines = weakref.WeakSet()
# Engines made so far on each set of given servers (by their addresses).
_engines_on = {}

# Parameters off the CPU (a CUDA build of torch) train through host staging
# buffers: the flat parameter and gradient buffers live on the device and
# every push and gather goes through a host copy (pinned where torch can pin);
# the ranks' collectives run on the device over NCCL in a CUDA build of
# zeroshard (stages 1 and 2), on the host copies over Gloo otherwise.
# Tests set this to run the staged path with CPU parameters.
_FORCE_HOST_STAGING = False


def _exit_on_sigterm():
    """SIGTERM ends the process as an exception does (SystemExit: the exit
    handlers below stop the servers initialize started and remove their
    directory, tokens included), where no handler of the script's own is
    set; the main thread only (signal's rule)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_term(signum, frame):
        del frame
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)


@atexit.register
def _close_all():
    for e in list(_live_engines):
        e.close(agree=False)


class ZeroshardEngine(StepApi, CheckpointApi, DeepSpeedEngineApi,
                      torch.nn.Module):
    """What zeroshard.initialize returns first; see the module docstring."""

    def __init__(self, model, model_parameters=None, optimizer=None,
                 config=None, args=None, training_data=None, collate_fn=None,
                 lr_scheduler=None):
        super().__init__()
        # The module given again (a notebook's second cell): the engine that
        # holds it is closed first, which leaves it whole (stage 3 too).
        prev = model.__dict__.get("_zeroshard_engine")
        prev = prev() if prev is not None else None
        if prev is not None and not prev._closed:
            if prev.rank == 0:
                print("zeroshard: this module was given to initialize "
                      "before: that engine is closed first (its servers "
                      "stop; the module keeps its newest weights)",
                      file=sys.stderr)
            prev.close()
        model.__dict__["_zeroshard_engine"] = weakref.ref(self)
        _exit_on_sigterm()
        self.module = model
        self._closed = False
        self._servers = None
        text, source = engine_setup.config_text(config, args)
        doc = json.loads(text)
        self.rank, self.world = engine_setup.rank_and_world()
        # DeepSpeed 0.19's defaults where the config is silent (stage 0,
        # clipping at 1.0); what they chose is said once, on rank 0.
        self._ds_stage, notes = engine_setup.deepspeed_defaults(
            doc, client_scheduler=lr_scheduler is not None,
            client_optimizer=optimizer is not None)
        # DeepSpeed's torch_autocast: FP32 parameters and masters, the
        # forward under torch.autocast in its dtype.
        self._autocast = engine_setup.autocast_dtype(doc)
        # The config's scheduler, run on this side as DeepSpeed runs it
        # (zeroshard.deepspeed.lr_schedules).
        sched = doc.get("scheduler")
        self._ds_scheduler = ((sched.get("type"), dict(sched.get("params")
                                                         or {}))
                              if isinstance(sched, dict) else None)
        if model_parameters is not None:
            model_parameters = list(model_parameters)
        if optimizer is not None and not isinstance(
                optimizer, torch.optim.Optimizer):
            if not callable(optimizer):
                raise TypeError(
                    "optimizer: a torch.optim.Optimizer or a callable "
                    "taking the parameters and returning one, not "
                    f"{type(optimizer).__name__}")
            # DeepSpeed's callable form: called with the parameters.
            made = optimizer(model_parameters if model_parameters is not None
                             else [p for p in model.parameters()
                                   if p.requires_grad])
            if not isinstance(made, torch.optim.Optimizer):
                raise TypeError(
                    "optimizer: the callable returned "
                    f"{type(made).__name__}, not a torch.optim.Optimizer")
            optimizer = made
        self._client_optimizer = optimizer
        if optimizer is not None:
            section = engine_setup.torch_optimizer_section(optimizer)
            if "optimizer" in doc:
                engine_setup.same_optimizer(doc["optimizer"], section)
            else:
                doc["optimizer"] = section
            if model_parameters is None:
                model_parameters = optimizer.param_groups
        elif "optimizer" not in doc:
            raise ValueError(
                "no optimizer: pass one to initialize (optimizer=torch.optim."
                "AdamW(...), or a callable taking the parameters) or name one "
                "in the config's \"optimizer\" section")
        self._client_scheduler = lr_scheduler
        env_servers = os.environ.get("ZEROSHARD_SERVERS", "")
        z = doc.setdefault("zeroshard", {})
        self._zero_keys = dict(doc.get("zero_optimization") or {})
        # DeepSpeed prints progress only when the config asks.
        self._steps_per_print = doc.get("steps_per_print")
        # Read by the front-end only (units.py), not by the parser.
        self._units_spec = z.pop("units", None)
        self._zs_section = dict(z)
        if env_servers:
            # Started for this run by zeroshard-launch (or a pod's spec).
            z["servers"] = env_servers.split(",")
        z["workers"] = self.world
        resolved, warnings = _zeroshard.resolve_config(json.dumps(doc))
        if self.rank == 0:
            for w in notes + list(warnings):
                print(f"zeroshard: {source}: {w}", file=sys.stderr)
        self._resolved = resolved
        # Parsed once, handed to the extension's calls as an object.
        self._config = _zeroshard.ResolvedConfig(resolved)
        cfg = json.loads(resolved)["config"]
        self._cfg = cfg
        prec = cfg["precision"]
        self._prec = prec
        self._dtype = {"fp32": torch.float32, "bf16": torch.bfloat16,
                       "fp16": torch.float16}[prec]
        # FP16 travels as FP32 (the servers' mirror is BF16): rounded here.
        self._wire = "bf16" if prec == "bf16" else "fp32"
        self._scaler = _zeroshard.LossScaler(self._config)
        self._gas = cfg["gradient_accumulation_steps"]
        self._micro = cfg["micro_batch_size"]
        self._train_batch = cfg["train_batch_size"]
        self._clip = cfg["gradient_clipping"]
        self._stage3 = cfg["zero"]["stage"] == 3
        self._hooks = None
        self.global_steps = 0
        self.micro_steps = 0
        self._has_grads = False
        self._last_norm = None
        self._last_skipped = False
        self._last_breakdown = {}   # step_breakdown()
        self._group = None
        self._dgroup = None   # NCCL, for CUDA parameters (stages 1 and 2)
        self._protocol = self._dprotocol = None

        self._build_flat(model, model_parameters)
        self._check_fp16_on_cpu(model)
        self._cast_the_rest(model)
        self._forced_boundary = None
        self._make_optimizer()
        ac = cfg["activation_checkpointing"]
        self.checkpointed_units = apply_checkpointing(self._plan, ac["policy"],
                                                      ac["k"])
        cl = cfg["cluster"]
        addresses = cl["server_addresses"]
        credentials = os.environ.get("ZEROSHARD_CREDENTIALS") or cl["credentials"]
        run_id = os.environ.get("ZEROSHARD_RUN_ID", "")
        if self.world > 1 and not addresses:
            raise RuntimeError(
                f"WORLD_SIZE={self.world}: the ranks need servers started for "
                "them: run the script under zeroshard-launch (python3 -m "
                "zeroshard.launch --workers=N script.py), or set "
                "zeroshard.servers to the servers' addresses (pod mode)")
        if self.world > 1 and not run_id:
            # Pod mode: the ranks meet under zeroshard-worker's default run
            # id in the servers' key-value store (ZEROSHARD_RUN_ID names
            # another, for two runs on the same servers).
            run_id = "run"
        # Servers given to this process (the launcher's, or a pod's): its
        # second and later engines replace the model they hold (Init with
        # replace, same run) and meet under a group of their own.
        generation = 0
        if addresses:
            key = tuple(addresses)
            generation = _engines_on.get(key, 0)
            _engines_on[key] = generation + 1
        self._generation = generation
        if not addresses:
            self._servers = LocalCluster(
                cl["servers"], placement=cl["placement"],
                startup_timeout_s=cl["startup_timeout_s"],
                replicas=cl.get("replicas", 1))
            addresses = self._servers.addresses
            credentials = self._servers.credentials
        _live_engines.add(self)
        # The resolved config keeps the matrices of a Muon group whole.
        self._layout = _zeroshard.Layout(self._units, len(addresses),
                                         self.world, resolved=self._config)
        if self._layout.total_elems != self._total:
            raise RuntimeError("the flat layout depends on the server count")
        # This rank's partition of every unit (the ranges it pushes).
        self._my_ranges = self._layout.worker_ranges(self.rank)
        self._my_elems = sum(e - b for b, e in self._my_ranges)
        self._part_offsets = []
        at = 0
        for b, e in self._my_ranges:
            self._part_offsets.append(at)
            at += e - b
        if self._stage3:
            if self.world > 1:
                # A partition's gradient only; the whole one is never held.
                self._part_grad = torch.zeros(self._my_elems,
                                              dtype=torch.float32)
            self._hooks = UnitHooks(self, [
                (mod, [(p, off, n) for p, off, n in self._slots
                       if id(p) in ids], uoff, padded)
                for (mod, ids), (_, uoff, _, padded) in zip(
                    self._unit_modules, self._layout.units())], cfg["zero"])
        # Ctrl-C interrupts a call blocked on a server or a rank
        # (interruptible.py).
        run_id = run_id or secrets.token_hex(8)
        self._connection = (addresses, credentials, run_id,
                            cl["step_timeout_s"], cl.get("replicas", 1))
        self._admin = None   # a rank's reader of optimizer state (engine_api)
        self._cluster = Interruptible(_zeroshard.Cluster(
            addresses, self._layout, credentials_dir=credentials,
            role="admin" if self.rank == 0 else "worker",
            run_id=run_id, call_timeout_s=cl["step_timeout_s"],
            replicas=self._connection[4]))
        if self.world > 1:
            self._group = Interruptible(self._cluster.open_group(
                self.rank, self.world, "python/workers" + (
                    f"/{generation}" if generation else ""),
                timeout_s=cl["startup_timeout_s"]))
            self._dgroup = self._open_device_group(cl["startup_timeout_s"])
            # Every rank trains what rank 0 resolved.
            theirs = self._group.broadcast(resolved.encode(), 0).decode()
            if theirs != resolved:
                raise RuntimeError(
                    f"rank {self.rank}: the resolved configuration differs "
                    "from rank 0's (each rank must pass the same config)")
            units = json.dumps(self._units)
            if self._group.broadcast(units.encode(), 0).decode() != units:
                raise RuntimeError(
                    f"rank {self.rank}: the model's units differ from rank "
                    "0's (each rank must build the same model and units)")
            rank_state.broadcast_buffers(self._group, model)
        # The step's protocol among the ranks and with the servers, in C++
        # as zeroshard-train's workers run it (step/step_protocol.h): the
        # reduce-scatter, the decision, the two-phase commit.
        self._protocol = Interruptible(self._cluster.step_protocol(
            unwrap(self._group), self.rank, self.world,
            step_timeout_s=cl["step_timeout_s"],
            two_phase=self._group is not None))
        self._dprotocol = None if self._dgroup is None else Interruptible(
            self._cluster.step_protocol(
                unwrap(self._dgroup), self.rank, self.world,
                step_timeout_s=cl["step_timeout_s"], two_phase=True))
        if self.rank == 0:
            self._cluster.init(self._config, groups=self._groups,
                               num_workers=self.world,
                               chunk_elems=cl["chunk_elems"],
                               replace=generation > 0)
            # The model's own initial values become the master weights; the
            # model then holds what the servers hold (BF16: their mirror).
            self._send_initial_weights()
        self._barrier()
        # Servers on this host: gathers and pushes through shared memory
        # (zeroshard.shared_memory); the others over gRPC. Stages 1 and 2
        # only: a region holds this rank's share of the parameters and the
        # gradient once more, which a ZeRO-3 rank, gathering unit by unit,
        # exists not to hold.
        self.shared_memory_servers = 0
        if cl["shared_memory"] and not self._stage3:
            why = self._attach_shared_memory()
            if why and self.rank == 0:
                print(f"zeroshard: {len(addresses) - self.shared_memory_servers}"
                      f" of {len(addresses)} servers over gRPC only: {why}",
                      file=sys.stderr)
        self._gather()
        if self._stage3 and self.world == 1:
            self._flat_grad = torch.zeros(self._total, dtype=self._dtype)

        self.training_dataloader = None
        self._sampler = None
        if training_data is not None:
            self._sampler = rank_state.ResumableSampler(
                len(training_data), cl["seed"], self.rank, self.world)
            # Its own generator: starting an epoch's iterator draws a seed
            # from it, not from the global RNG, so a run resumed mid-epoch
            # (the global RNG restored, then a new iterator) draws dropout's
            # masks as the uninterrupted run did.
            self.training_dataloader = torch.utils.data.DataLoader(
                training_data, batch_size=self._micro, sampler=self._sampler,
                collate_fn=collate_fn, drop_last=True,
                generator=torch.Generator().manual_seed(cl["seed"]))

        ck = cl["checkpoint"]
        self._ckpt_dir = ck["dir"]
        self._ckpt_every = int(ck["every_steps"])
        self._ckpt_keep = int(ck["keep_last"])
        # zeroshard-launch --max_restarts starts the ranks again with
        # ZEROSHARD_RESTART=n: they go on from the newest checkpoint.
        try:
            self.restart = int(os.environ.get("ZEROSHARD_RESTART") or 0)
        except ValueError:
            raise ValueError("ZEROSHARD_RESTART: not a count") from None
        self.resumed_from = None
        pending = getattr(self, "_pending_client_state", None)
        if pending is not None:
            self._pending_client_state = None
            self._load_optimizer_state_dict(self.optimizer, pending)
        if self.restart > 0:
            self._resume_after_restart()

    def _send_initial_weights(self, chunk_elems=1 << 22):
        """The parameters' values to the servers' masters, a few tensors at
        a time (at most chunk_elems FP32 values staged at once, beside the
        model's own tensors; the padding keeps Init's zeros)."""
        slots = sorted(self._slots, key=lambda s: s[1])
        batch = []

        def flush():
            if not batch:
                return
            values = torch.cat([p.detach().reshape(-1).float()
                                for p, _, _ in batch]).cpu()
            self._cluster.set_master_weight_ranges(
                [(off, off + n) for _, off, n in batch], values.numpy())
            batch.clear()

        staged = 0
        for slot in slots:
            if staged + slot[2] > chunk_elems:
                flush()
                staged = 0
            batch.append(slot)
            staged += slot[2]
        flush()

    # --- layout -----------------------------------------------------------

    def _build_flat(self, model, model_parameters):
        trainable = [p for p in model.parameters() if p.requires_grad]
        groups = None
        if model_parameters is not None:
            mp = list(model_parameters)
            if mp and isinstance(mp[0], dict):
                groups = mp
                listed = [p for g in mp for p in g["params"]]
            else:
                listed = mp
            ids = {id(p) for p in listed}
            # Frozen ones (requires_grad=False) are dropped, as DeepSpeed
            # drops them; they stay the module's, checkpointed with it.
            frozen = {id(p) for p in model.parameters() if not p.requires_grad}
            ids -= frozen
            trainable = [p for p in trainable if id(p) in ids]
            if len(ids) != len(trainable) or len(listed) != len(
                    {id(p) for p in listed}):
                raise ValueError(
                    "model_parameters: some are not parameters of the model "
                    "(or are listed twice)")
        names = {id(p): n for n, p in model.named_parameters()}
        engine_setup.check_parameters(model, trainable, names)
        plan = plan_units(model, {id(p) for p in trainable}, self._units_spec)
        self._plan = plan
        units = []
        unit_modules = []
        order = []
        for uname, mod, params, _ in plan:
            units.append((uname, [(names[id(p)], list(p.shape) or [1],
                                   engine_setup.tensor_class(names[id(p)], p))
                                  for p in params]))
            unit_modules.append((mod, {id(p) for p in params}))
            order.extend(params)
        if not order:
            raise ValueError("the model has no trainable parameters")
        self._units = units
        self._unit_modules = unit_modules
        self._shapes = {id(p): p.shape for p in order}
        self._order = order
        self._names = names
        # The flat layout is computed by the library; the buffers follow it.
        layout = _zeroshard.Layout(units, 1, self.world)
        self._total = layout.total_elems
        # Stage 3 gathers unit by unit instead of into one buffer.
        self._device = order[0].device
        self._staged = self._device.type != "cpu" or _FORCE_HOST_STAGING
        self._flat_param = (None if self._stage3 else
                            torch.zeros(self._total, dtype=self._dtype,
                                        device=self._device))
        # Stage 3 with ranks keeps a partition's gradient only (__init__);
        # one rank's whole gradient is made once the model's own tensors
        # are released (__init__), so that both never exist at once.
        self._flat_grad = (None if self._stage3 else
                           torch.zeros(self._total, dtype=self._dtype,
                                       device=self._device))
        if self._staged and not self._stage3:
            # The host side of every transfer, in the wire's dtype (FP16
            # travels as FP32); stage 3 stages unit by unit (stage3.py).
            wire = torch.float32 if self._dtype == torch.float16 else self._dtype
            pin = self._device.type == "cuda"
            self._host_param = torch.empty(self._total, dtype=wire,
                                           pin_memory=pin)
            self._host_grad = torch.empty(self._total, dtype=wire,
                                          pin_memory=pin)
        self._slots = []
        offsets = {name: (off, n) for name, off, n, _ in layout.tensors()}
        for p in order:
            off, n = offsets[names[id(p)]]
            self._slots.append((p, off, n))
        # The slots in the module's own order (model.parameters()), which
        # the global norm follows: the units' order may differ from it.
        where = {id(p): (p, off, n) for p, off, n in self._slots}
        self._norm_slots = [where[id(p)] for p in trainable]
        self._groups = None
        # Classes whose tensors a rule updates whole (Muon, Adafactor; the
        # latter also from optimizer.type "Adafactor"): the classes decide.
        ruled = [k for k, v in self._cfg["param_groups"].items()
                 if isinstance(v, dict)
                 and v.get("rule", {}).get("name", "")]
        if groups is not None and ruled:
            raise ValueError(
                "model_parameters: parameter groups of your own cannot be "
                "combined with the tensor rules the config gives the classes "
                f"{', '.join(ruled)} (zeroshard.param_groups or optimizer.type "
                "\"Adafactor\"); pass the parameters without groups")
        if groups is None and "param_groups" not in self._zs_section \
                and not ruled:
            # torch's one group: the optimizer's weight decay on every
            # tensor (zeroshard.param_groups, when the config names it,
            # chooses by tensor class instead).
            groups = [{"params": order}]
        # The groups the returned optimizer shows (torch's dicts; a client
        # optimizer's own), and for each group the servers hold, which of
        # them it is (a group of frozen parameters only has none there).
        self._torch_groups = groups
        self._server_group_of = []
        if groups is not None:
            base_lr = self._cfg["optimizer"]["lr"]
            self._groups = []
            where = {id(p): (off, n) for p, off, n in self._slots}
            wd_default = self._cfg["optimizer"]["weight_decay"]
            for i, g in enumerate(groups):
                ranges = sorted(
                    (where[id(p)][0], where[id(p)][0] + where[id(p)][1])
                    for p in g["params"] if id(p) in where)
                if not ranges:
                    continue
                self._server_group_of.append(i)
                self._groups.append((float(g.get("weight_decay", wd_default)),
                                     float(g.get("lr", base_lr)) / base_lr,
                                     ranges))

    def _attach(self):
        """Points every parameter and its gradient at the flat buffers
        (stages 1 and 2; stage 3's hooks place them unit by unit)."""
        if self._stage3:
            return
        with torch.no_grad():
            for p, off, n in self._slots:
                view = self._flat_param[off:off + n].view(self._shapes[id(p)])
                if p.data.data_ptr() != view.data_ptr():
                    p.data = view
                gview = self._flat_grad[off:off + n].view(self._shapes[id(p)])
                if p.grad is None:
                    p.grad = gview
                elif p.grad.is_sparse:
                    raise ValueError(
                        f"parameter {self._names[id(p)]} has a sparse "
                        "gradient: the servers take dense gradients")
                elif p.grad.data_ptr() != gview.data_ptr():
                    # Replaced (set_to_none, or a user's assignment): take
                    # its values, then point it back.
                    gview.copy_(p.grad)
                    p.grad = gview

    def _np(self, t):
        return t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()

    def _attach_shared_memory(self):
        """Opens a shared-memory region on each server on this host that
        has none (at start, and for a replacement that took its copies
        back), sized for what this rank moves: its partitions (one rank:
        everything, as it pushes and gathers the whole). Returns the first
        reason a server is reached over gRPC only ("" when none)."""
        self.shared_memory_servers, why = self._cluster.attach_shared_memory(
            self._my_ranges if self.world > 1 else [(0, self._total)])
        return why

    def _gather(self):
        if self._stage3:
            self._hooks.release_all()  # gathered again by each module
            return
        if self._group is not None:
            self._gather_partitions()
        elif self._staged:
            self._cluster.gather([(0, self._total)],
                                 "fp32" if self._prec == "fp16" else self._wire,
                                 self._np(self._host_param),
                                 min_version=self.global_steps)
            self._flat_param.copy_(self._host_param)
        elif self._prec == "fp16":
            tmp = torch.empty(self._total, dtype=torch.float32)
            self._cluster.gather([(0, self._total)], "fp32", tmp.numpy(),
                                 min_version=self.global_steps)
            self._flat_param.copy_(tmp)
        else:
            self._cluster.gather([(0, self._total)], self._wire,
                                 self._np(self._flat_param),
                                 min_version=self.global_steps)
        self._attach()

    def _open_device_group(self, timeout_s):
        # CUDA parameters under stages 1 and 2 reduce and gather on the
        # device over NCCL, on torch's current stream, where this build has
        # NCCL; otherwise (and under stage 3, whose units are staged on the
        # host one by one) on host copies over the Gloo group.
        if self._device.type != "cuda" or self._stage3:
            return None
        if not _zeroshard.has_nccl():
            if self.rank == 0:
                print("zeroshard: this build has no NCCL (a build without "
                      "CUDA): the ranks reduce the CUDA parameters' "
                      "gradients on host copies over Gloo", file=sys.stderr)
            return None
        stream = torch.cuda.current_stream(self._device)
        return self._cluster.open_group(
            self.rank, self.world, "python/workers/nccl" + (
                f"/{self._generation}" if self._generation else ""),
            timeout_s=timeout_s, backend="nccl",
            cuda_device=(self._device.index if self._device.index is not None
                         else torch.cuda.current_device()),
            cuda_stream=stream.cuda_stream)

    def _gather_partitions(self):
        # Ranks, stages 1 and 2: each rank gathers from the servers the
        # partitions it pushed (its 1/N of every unit), and the ranks
        # all-gather the rest unit by unit, so the servers send each value
        # once whatever the number of ranks. A partition is converted to the
        # model's dtype (FP16 travels as FP32) by its owner, the same
        # conversion every rank made of the whole before.
        # `into`: where the values land and are all-gathered: the host
        # staging buffer, or the parameters themselves (on the CPU, or on
        # the device with NCCL).
        into = self._host_param if self._staged else self._flat_param
        wire = "fp32" if self._prec == "fp16" else self._wire
        part = torch.empty(self._my_elems, dtype=(
            torch.float32 if wire == "fp32" else torch.bfloat16),
            pin_memory=self._dgroup is not None)
        self._cluster.gather(self._my_ranges, wire, self._np(part),
                             min_version=self.global_steps)
        if self._dgroup is not None:
            # Up to the device, then NCCL's all-gather there, on torch's
            # stream (the copies are ordered before it).
            into, part = self._flat_param, part.to(self._device)
        for (b, e), at in zip(self._my_ranges, self._part_offsets):
            into[b:e].copy_(part[at:at + e - b])
        if self._dprotocol is not None:
            self._dprotocol.all_gather_device(
                self._layout, into.data_ptr(), into.numel(),
                into.element_size())
        else:
            self._protocol.all_gather(self._layout, self._np(into))
            if self._staged:
                self._flat_param.copy_(into)
        self._attach()

    # --- DeepSpeed's engine API -------------------------------------------

    def forward(self, *args, **kwargs):
        self._need_open()
        self._attach()
        if self._autocast is not None:
            with torch.autocast(device_type=self._device.type,
                                dtype=self._autocast):
                return self._forward(*args, **kwargs)
        return self._forward(*args, **kwargs)

    def _forward(self, *args, **kwargs):
        if self._hooks is not None:
            with self._hooks.saving():
                self._hooks.active = True
                try:
                    return self.module(*args, **kwargs)
                finally:
                    self._hooks.active = False
                    self._hooks.forward_done()
        return self.module(*args, **kwargs)

    def _pending_grads(self):
        return self._has_grads

    def backward(self, loss, allreduce_gradients=True, release_loss=False,
                 retain_graph=False, scale_wrt_gas=True):
        """(loss / gradient_accumulation_steps, unless scale_wrt_gas=False)
        * the loss scale (FP16; 1 otherwise), then its backward(). The
        ranks reduce at the optimizer step, whatever allreduce_gradients
        says."""
        del allreduce_gradients, release_loss
        self._need_open()
        self._attach()
        scaled = loss / self._gas if scale_wrt_gas else loss
        if self._prec == "fp16":
            scaled = scaled * self._scaler.scale
        scaled.backward(retain_graph=retain_graph)
        self._has_grads = True
        return loss

    def is_gradient_accumulation_boundary(self):
        if self._forced_boundary is not None:
            return self._forced_boundary
        return (self.micro_steps + 1) % self._gas == 0

    def step(self):
        """Counts a micro-step; at the accumulation boundary, the servers
        apply the optimizer to the accumulated gradients (and, every
        zeroshard.checkpoint.every_steps, checkpoint them)."""
        self._need_open()
        boundary = self.is_gradient_accumulation_boundary()
        if boundary:
            self._optimizer_step()
        self.micro_steps += 1
        if boundary:
            self._maybe_checkpoint()

    def _barrier(self):
        if self._group is not None:
            self._group.barrier()

    def _zero_grads(self):
        if self._flat_grad is not None:
            self._flat_grad.zero_()
        if self._stage3 and self._group is not None:
            self._part_grad.zero_()

    def loss_scale(self):
        """The current loss scale (1 unless FP16)."""
        return self._scaler.scale

    def zero_grad(self, set_to_none=False):
        del set_to_none  # the views stay: zeroing them is the same
        self._zero_grads()
        self._has_grads = False

    def train_batch_size(self):
        return self._train_batch

    def gradient_accumulation_steps(self):
        return self._gas

    def get_global_grad_norm(self):
        return self._last_norm

    def last_step_skipped(self):
        """Whether the last optimizer step was skipped (a non-finite
        gradient; FP16's loss scale then backs off)."""
        return self._last_skipped

    def inspect(self):
        """Each server's state (zeroshard-ctl inspect's fields)."""
        return self._cluster.inspect_all()

    # --- lifetime -----------------------------------------------------------

    def _need_open(self):
        if self._closed:
            raise RuntimeError("the engine is closed")

    def close(self, agree=True):
        """Checks that every rank made the same number of optimizer steps
        (ranks only; not at interpreter exit, where another rank may be
        gone), then stops the servers initialize started; idempotent.
        Under stage 3 the module is left whole (each parameter the servers'
        newest value, in the compute dtype) and a plain module again; at
        interpreter exit it is not, and its use says why."""
        if self._closed:
            return
        self._closed = True
        try:
            if agree and self._group is not None:
                self._check_ranks_agree(closing=True)
            if agree and self.rank == 0 and self._cluster is not None:
                self._cluster.audit_finish()   # a comparison's last verdict
        finally:
            self._close(whole=agree)

    def _close(self, whole=False):
        self._stop_looking()
        # NCCL's communicator, before the servers go (a protocol over it
        # holds it too).
        self._dprotocol = None
        self._protocol = None
        self._dgroup = None
        if self._hooks is not None:
            values = None
            if whole and self._cluster is not None:
                try:
                    values = [self._hooks._gather(u, self.global_steps)
                              for u in range(len(self._hooks.units))]
                except Exception:
                    values = None   # servers gone: said when used
            if values is not None:
                self._hooks.remove(values)
            else:
                self._hooks.shutdown()
                self._hooks.closed_why = (
                    "this module's stage-3 engine is closed, and its "
                    "parameters were on the servers it stopped: read them "
                    "before close() (engine.consolidated_state_dict()), or "
                    "from a checkpoint (zeroshard.deepspeed.utils."
                    "zero_to_fp32)")
        if (self._servers is None and self._cluster is not None
                and self.rank == 0):
            # Servers this process did not start outlive it: the run is no
            # longer live for zeroshard-ctl init and restore, nor for a
            # second training on them (client/live_run.h).
            try:
                self._cluster.mark_run_ended(self.global_steps)
            except Exception:
                pass   # servers gone: nothing is live there either
        self._cluster = None
        if self._servers is not None:
            self._servers.stop()
            self._servers = None
        _live_engines.discard(self)

    def __del__(self):
        try:
            self.close(agree=False)
        except Exception:
            pass
