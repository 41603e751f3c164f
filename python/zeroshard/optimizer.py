"""The optimizer and the learning-rate scheduler zeroshard.initialize
returns. The servers run the update; these are torch's objects over it.

ZeroshardOptimizer is a torch.optim.Optimizer whose param_groups are live:
what a group's "lr", "weight_decay", "betas" and "eps" hold when an
optimizer step is made is what the servers apply to that group's
parameters at that step (torch's semantics: a scheduler, or a loop that
writes param_group["lr"], drives them). When the script passed a torch
optimizer, its param_groups are these very dicts, so a torch scheduler
built on it drives the servers too.

The config's "scheduler" section is DeepSpeed's own class over these
groups (zeroshard.deepspeed.lr_schedules), stepped by the engine; where
the config's classes fix the groups (zeroshard.param_groups, Adafactor,
Muon) the servers run the schedule and ServerSchedule reports it.
"""

import torch


# The hyper-parameters each group carries to the servers.
_HYPER = ("lr", "weight_decay", "betas", "eps")


class ZeroshardOptimizer(torch.optim.Optimizer):
    """See the module docstring. step() makes one optimizer step (the plain
    torch loop: loss.backward(); optimizer.step()); zero_grad() zeroes the
    engine's gradients."""

    def __init__(self, engine, groups, defaults, shared=None):
        # torch's constructor checks the groups; `shared` (a torch
        # optimizer's own list) then replaces them, so that writes to either
        # reach the servers.
        super().__init__(groups, defaults)
        if shared is not None:
            self.param_groups = shared
        self._engine = engine
        # A registered rule's params other than lr, weight_decay and eps
        # (SGD's momentum...): one value for the run.
        self._rule_params = {}

    def __getstate__(self):
        raise TypeError("a ZeroshardOptimizer cannot be pickled: save "
                        "optimizer.state_dict() instead")

    def step(self, closure=None):
        if closure is not None:
            raise ValueError("optimizer.step(closure): closures are not "
                             "supported (the servers make one step per call)")
        e = self._engine
        e._need_open()
        e._optimizer_step()
        e.micro_steps += e.gradient_accumulation_steps()
        e._maybe_checkpoint()

    def zero_grad(self, set_to_none=False):
        self._engine.zero_grad(set_to_none)

    # DeepSpeed's optimizer wrappers' attributes.
    @property
    def overflow(self):
        return self._engine._last_skipped

    @property
    def loss_scale(self):
        return self._engine.loss_scale()

    @property
    def cur_scale(self):
        return self._engine.loss_scale()

    def state_dict(self):
        """torch's layout, gathered from the servers: "state" maps each
        parameter's index (in param_groups order) to the rule's tensors
        (AdamW / Adam: "step", "exp_avg", "exp_avg_sq"), "param_groups"
        holds each group's hyper-parameters and parameter indices."""
        return self._engine._optimizer_state_dict(self)

    def load_state_dict(self, state_dict):
        """Writes state_dict (from state_dict(), here or in torch's layout
        from torch.optim.AdamW / Adam over the same parameters) back: the
        groups' hyper-parameters here, the rule's tensors and step count on
        the servers."""
        self._engine._load_optimizer_state_dict(self, state_dict)

    def settings(self):
        """(lr, weight_decay, beta1, beta2, eps) of every group now, each
        checked: what the next optimizer step sends to the servers."""
        out = []
        for i, g in enumerate(self.param_groups):
            try:
                lr = float(g["lr"])
                wd = float(g.get("weight_decay", self.defaults["weight_decay"]))
                b1, b2 = (float(b) for b in g.get("betas",
                                                   self.defaults["betas"]))
                eps = float(g.get("eps", self.defaults["eps"]))
            except (TypeError, ValueError, KeyError) as err:
                raise ValueError(f"optimizer.param_groups[{i}]: {err}") \
                    from None
            bad = None
            if not 0.0 <= lr < float("inf"):
                bad = f"lr={lr}: must be finite and >= 0"
            elif not 0.0 <= wd < float("inf"):
                bad = f"weight_decay={wd}: must be finite and >= 0"
            elif not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
                bad = f"betas=({b1}, {b2}): each must be in [0, 1)"
            elif not 0.0 < eps < float("inf"):
                bad = f"eps={eps}: must be finite and > 0"
            for key, value in self._rule_params.items():
                if key in g and float(g[key]) != value:
                    bad = (f"{key}={g[key]}: the servers apply {key}="
                           f"{value} for the whole run (lr, weight_decay, "
                           "betas and eps change step by step)")
            if bad:
                raise ValueError(f"optimizer.param_groups[{i}]: {bad}")
            out.append((lr, wd, b1, b2, eps))
        return out


class ServerSchedule:
    """The schedule the servers run themselves (the config's
    zeroshard.param_groups or tensor rules fix the groups): reports it in
    the one group the optimizer shows, after each step."""

    def __init__(self, engine, optimizer):
        self._engine = engine
        self.optimizer = optimizer
        self._advance()

    def _advance(self):
        self.optimizer.param_groups[0]["lr"] = self._engine._server_lr()

    def step(self, *args, **kwargs):
        del args, kwargs

    def get_lr(self):
        return [self.optimizer.param_groups[0]["lr"]]

    def get_last_lr(self):
        return self.get_lr()

    def state_dict(self):
        return {"applied_steps": self._engine._applied_steps()}

    def load_state_dict(self, state_dict):
        del state_dict
        self._advance()
