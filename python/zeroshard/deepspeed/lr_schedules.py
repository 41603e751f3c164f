"""deepspeed.runtime.lr_schedules: DeepSpeed 0.19's WarmupLR, WarmupDecayLR
and WarmupCosineLR as schedulers of any torch optimizer's param_groups (the
returned optimizer's, whose groups the servers apply). The config's
"scheduler" section is one of these, stepped by the engine after each
applied optimizer step, as DeepSpeed's engine steps it.

Their behaviour, as DeepSpeed's: made at last_batch_iteration -1, they set
the groups' lr for iteration -1 at once (WarmupLR / WarmupDecayLR: the
warmup's start; WarmupCosineLR: 0), and each step() moves to the next
iteration; so optimizer step k runs at iteration k - 2 under the engine.
The warmup (warmup_num_steps, at least 2) rises by log(i + 1) /
log(warmup_num_steps) ("log", the default) or i / warmup_num_steps
("linear"); then WarmupLR stays at the peak, WarmupDecayLR falls linearly to
0 at total_num_steps, and WarmupCosineLR follows half a cosine from 1 to
cos_min_ratio of each group's initial lr.
"""

import math

import torch

WARMUP_LR = "WarmupLR"
WARMUP_DECAY_LR = "WarmupDecayLR"
WARMUP_COSINE_LR = "WarmupCosineLR"
ONE_CYCLE = "OneCycle"
LR_RANGE_TEST = "LRRangeTest"
VALID_LR_SCHEDULES = [LR_RANGE_TEST, ONE_CYCLE, WARMUP_LR, WARMUP_DECAY_LR,
                      WARMUP_COSINE_LR]
WARMUP_LOG_RATE = "log"
WARMUP_LINEAR_RATE = "linear"
# The schedules' parameter names (their keys in the config's
# scheduler.params), as constants named after them (CYCLE_MIN_LR, ...).
for _key in ("lr_schedule", "lr_range_test_min_lr", "lr_range_test_step_rate",
             "lr_range_test_step_size", "lr_range_test_staircase",
             "edge_value", "mid_value", "cycle_first_step_size",
             "cycle_first_stair_count", "cycle_second_step_size",
             "cycle_second_stair_count", "decay_step_size", "cycle_min_lr",
             "cycle_max_lr", "decay_lr_rate", "cycle_min_mom", "cycle_max_mom",
             "decay_mom_rate", "warmup_min_lr", "warmup_max_lr",
             "warmup_num_steps", "warmup_type", "warmup_min_ratio",
             "cos_min_ratio", "total_num_steps"):
    globals()[_key.upper()] = _key
del _key


def _groups(optimizer):
    opt = optimizer if isinstance(optimizer, torch.optim.Optimizer) else \
        getattr(optimizer, "optimizer", None)
    if not isinstance(opt, torch.optim.Optimizer):
        raise TypeError(f"{type(optimizer).__name__} is not a "
                        "torch.optim.Optimizer")
    return opt


def _per_group(opt, value, name):
    if isinstance(value, (list, tuple)):
        if len(value) != len(opt.param_groups):
            raise ValueError(f"{name}: {len(value)} values for "
                             f"{len(opt.param_groups)} parameter groups")
        return [float(v) for v in value]
    return [float(value)] * len(opt.param_groups)


def _warmup_steps(n):
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise ValueError(f"warmup_num_steps must be a positive integer, "
                         f"got {n!r}")
    return max(2, n)


def _warmup_type(kind):
    if kind not in (WARMUP_LOG_RATE, WARMUP_LINEAR_RATE):
        raise ValueError(f"warmup_type {kind!r}: \"log\" or \"linear\"")
    return kind


class _Scheduler:
    """step() / get_lr() / get_last_lr() / state_dict() as DeepSpeed's."""

    def _start(self, last_batch_iteration):
        self.last_batch_iteration = last_batch_iteration
        if last_batch_iteration == -1:
            self._apply()

    def _apply(self):
        lrs = self.get_lr()
        for g, lr in zip(self.optimizer.param_groups, lrs):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def step(self, last_batch_iteration=None):
        self.last_batch_iteration = (self.last_batch_iteration + 1
                                     if last_batch_iteration is None
                                     else last_batch_iteration)
        self._apply()

    def get_last_lr(self):
        if getattr(self, "_last_lr", None) is None:
            raise RuntimeError("get_last_lr: the scheduler has not set a "
                               "learning rate yet (call step())")
        return self._last_lr

    def state_dict(self):
        return {"last_batch_iteration": self.last_batch_iteration}

    def load_state_dict(self, state_dict):
        self.last_batch_iteration = state_dict["last_batch_iteration"]

    def _rise(self, i):
        # DeepSpeed's operation order (1 / log(W), then times log(i + 1)),
        # so the rates are its doubles.
        if self.warmup_type == WARMUP_LOG_RATE:
            return (1.0 / math.log(self.warmup_num_steps)) * math.log(i + 1)
        return i / self.warmup_num_steps


class WarmupLR(_Scheduler):
    def __init__(self, optimizer, warmup_min_lr=0.0, warmup_max_lr=None,
                 warmup_num_steps=1000, warmup_type=WARMUP_LOG_RATE,
                 last_batch_iteration=-1):
        self.optimizer = _groups(optimizer)
        if warmup_max_lr is None:   # each group's own lr
            warmup_max_lr = [g["lr"] for g in self.optimizer.param_groups]
        self.min_lrs = _per_group(self.optimizer, warmup_min_lr, "min_lr")
        self.max_lrs = _per_group(self.optimizer, warmup_max_lr, "max_lr")
        self.delta_lrs = [hi - lo for hi, lo in zip(self.max_lrs, self.min_lrs)]
        self.warmup_num_steps = _warmup_steps(warmup_num_steps)
        self.warmup_type = _warmup_type(warmup_type)
        self._start(last_batch_iteration)

    def _gamma(self):
        if self.last_batch_iteration < self.warmup_num_steps:
            return self._rise(self.last_batch_iteration)
        return 1.0

    def get_lr(self):
        if self.last_batch_iteration < 0:
            return list(self.min_lrs)
        gamma = self._gamma()
        return [lo + d * gamma for lo, d in zip(self.min_lrs, self.delta_lrs)]


class WarmupDecayLR(WarmupLR):
    def __init__(self, optimizer, total_num_steps, warmup_min_lr=0.0,
                 warmup_max_lr=0.001, warmup_num_steps=1000,
                 warmup_type=WARMUP_LOG_RATE, last_batch_iteration=-1):
        self.total_num_steps = total_num_steps
        super().__init__(optimizer, warmup_min_lr, warmup_max_lr,
                         warmup_num_steps, warmup_type, last_batch_iteration)

    def _gamma(self):
        if self.last_batch_iteration < self.warmup_num_steps:
            return self._rise(self.last_batch_iteration)
        left = float(self.total_num_steps - self.last_batch_iteration)
        return max(0.0, left / float(max(1.0, self.total_num_steps -
                                         self.warmup_num_steps)))


class WarmupCosineLR(_Scheduler):
    def __init__(self, optimizer, total_num_steps, warmup_min_ratio=0.0,
                 warmup_num_steps=1000, cos_min_ratio=0.0001,
                 warmup_type=WARMUP_LOG_RATE, last_batch_iteration=-1):
        self.optimizer = _groups(optimizer)
        self.total_num_steps = total_num_steps
        self.warmup_min_ratio = float(warmup_min_ratio)
        self.cos_min_ratio = float(cos_min_ratio)
        self.warmup_num_steps = _warmup_steps(warmup_num_steps)
        self.warmup_type = _warmup_type(warmup_type)
        self.org_lrs = [g["lr"] for g in self.optimizer.param_groups]
        self._start(last_batch_iteration)

    def get_lr_ratio(self):
        i = self.last_batch_iteration
        if i < 0:
            return 0.0
        if i < self.warmup_num_steps:
            return self.warmup_min_ratio + self._rise(i) * (
                1.0 - self.warmup_min_ratio)
        done = i - self.warmup_num_steps + 1
        span = max(1, self.total_num_steps - self.warmup_num_steps)
        progress = min(1.0, done / span)
        half = (1 + math.cos(math.pi * progress)) / 2
        return max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * half)

    def get_lr(self):
        if self.last_batch_iteration < 0:
            return [0.0 for _ in self.org_lrs]
        ratio = self.get_lr_ratio()
        return [lr * ratio for lr in self.org_lrs]


def _refused(name):
    def make(*args, **kwargs):
        raise NotImplementedError(
            f"deepspeed.runtime.lr_schedules.{name} is not supported here: "
            "use WarmupLR, WarmupDecayLR, WarmupCosineLR or a torch "
            "scheduler")
    return make


OneCycle = _refused("OneCycle")
LRRangeTest = _refused("LRRangeTest")

CLASSES = {WARMUP_LR: WarmupLR, WARMUP_DECAY_LR: WarmupDecayLR,
           WARMUP_COSINE_LR: WarmupCosineLR}


def from_config(kind, params, optimizer, resolved_optimizer):
    """The config's "scheduler" section on `optimizer`, as DeepSpeed builds
    it (the class with params as keyword arguments); "auto" values take
    what the configuration resolved (Hugging Face's Trainer fills them in
    before DeepSpeed sees them)."""
    if kind not in CLASSES:
        raise ValueError(f"scheduler.type {kind!r}: WarmupLR, WarmupDecayLR "
                         "or WarmupCosineLR")
    o = resolved_optimizer
    auto = {"warmup_num_steps": max(1, int(o["warmup_steps"])),
            "total_num_steps": int(o["total_steps"]),
            "warmup_min_lr": o["warmup_start_lr"],
            "warmup_max_lr": None}
    kw = {}
    for k, v in (params or {}).items():
        if k == "last_batch_iteration":
            continue
        kw[k] = auto.get(k) if v == "auto" else v
    return CLASSES[kind](optimizer, **kw)
