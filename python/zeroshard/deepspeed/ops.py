"""deepspeed.ops: the optimizer classes DeepSpeed scripts construct. Each
is a torch optimizer (it steps in-process as torch's would, if stepped on
its own) that zeroshard.initialize maps to the servers' rule:
FusedAdam and DeepSpeedCPUAdam to AdamW (adam_w_mode / adamw_mode, the
default) or Adam, DeepSpeedCPUAdagrad to Adagrad. LAMB, Lion-on-the-GPU and the 1-bit optimizers have no
rule on the servers and are refused when constructed."""

import torch


class _AdamRule:
    @staticmethod
    def _zeroshard_rule(opt):
        return "adamw" if opt._adamw else "adam"


class FusedAdam(_AdamRule, torch.optim.AdamW):
    """DeepSpeed's FusedAdam: AdamW (adam_w_mode=True) or Adam with L2
    weight decay (False)."""

    def __init__(self, params, lr=1e-3, bias_correction=True,
                 betas=(0.9, 0.999), eps=1e-8, adam_w_mode=True,
                 weight_decay=0.0, amsgrad=False, set_grad_none=True):
        del set_grad_none
        if not bias_correction:
            raise ValueError("FusedAdam(bias_correction=False): the servers' "
                             "AdamW / Adam always correct the bias")
        if amsgrad:
            raise ValueError("FusedAdam(amsgrad=True) is not supported")
        self._adamw = bool(adam_w_mode)
        torch.optim.AdamW.__init__(self, params, lr=lr, betas=betas, eps=eps,
                                   weight_decay=weight_decay)
        # torch.optim.Adam's step (Adam mode) reads settings AdamW may not
        # keep in every torch version (1.13's differentiable): its defaults.
        probe = torch.optim.Adam([torch.zeros(1, requires_grad=True)])
        for key, value in probe.defaults.items():
            self.defaults.setdefault(key, value)
            for group in self.param_groups:
                group.setdefault(key, value)

    def step(self, closure=None):
        if self._adamw:
            return torch.optim.AdamW.step(self, closure)
        return torch.optim.Adam.step(self, closure)


class DeepSpeedCPUAdam(FusedAdam):
    """DeepSpeed's CPU Adam: AdamW (adamw_mode=True) or Adam. On zeroshard
    the servers run it; fp32_optimizer_states is what they keep anyway."""

    def __init__(self, model_params, lr=1e-3, bias_correction=True,
                 betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, adamw_mode=True, fp32_optimizer_states=True):
        del fp32_optimizer_states
        super().__init__(model_params, lr=lr, bias_correction=bias_correction,
                         betas=betas, eps=eps, adam_w_mode=adamw_mode,
                         weight_decay=weight_decay, amsgrad=amsgrad)


def _unsupported(name, why):
    class Unsupported:
        def __init__(self, *args, **kwargs):
            raise NotImplementedError(f"deepspeed.ops: {name} is not "
                                      f"supported here: {why}")
    Unsupported.__name__ = Unsupported.__qualname__ = name
    return Unsupported


FusedLamb = _unsupported("FusedLamb", "the shard servers have no LAMB rule "
                         "(AdamW, Adam, Lion, AdamW8bit, Adafactor, Muon)")
DeepSpeedCPULion = _unsupported(
    "DeepSpeedCPULion", "name \"Lion\" in the config's optimizer.type: the "
    "servers run it")
FusedLion = DeepSpeedCPULion


class DeepSpeedCPUAdagrad(torch.optim.Adagrad):
    """DeepSpeed's CPU Adagrad: torch's Adagrad without lr_decay (its sum
    of squared gradients starting at 0); the servers run the Adagrad rule.
    fp32_optimizer_states is what they keep anyway."""

    _zeroshard_rule = "adagrad"

    def __init__(self, model_params, lr=1e-2, eps=1e-10, weight_decay=0,
                 amsgrad=False, fp32_optimizer_states=True):
        del fp32_optimizer_states
        if amsgrad:
            raise ValueError("DeepSpeedCPUAdagrad(amsgrad=True) is not "
                             "supported (nor by DeepSpeed)")
        super().__init__(model_params, lr=lr, eps=eps,
                         weight_decay=weight_decay)
OnebitAdam = _unsupported("OnebitAdam", "1-bit communication is not built")
