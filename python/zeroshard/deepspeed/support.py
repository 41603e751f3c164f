"""The smaller modules DeepSpeed scripts and its unit tests import:
deepspeed.runtime.config (its names), deepspeed.utils.torch,
deepspeed.ops.op_builder and the ZeRO optimizers' classes. What they stand
for here is said in each."""

import torch

from .unsupported import refused_class

# deepspeed.runtime.config's optimizer names.
ADAM_OPTIMIZER = "adam"
ADAGRAD_OPTIMIZER = "adagrad"
ADAMW_OPTIMIZER = "adamw"
LAMB_OPTIMIZER = "lamb"
ONEBIT_ADAM_OPTIMIZER = "onebitadam"
LION_OPTIMIZER = "lion"
MUON_OPTIMIZER = "muon"
DEEPSPEED_OPTIMIZERS = [ADAGRAD_OPTIMIZER, ADAM_OPTIMIZER, ADAMW_OPTIMIZER,
                        LAMB_OPTIMIZER,
                        ONEBIT_ADAM_OPTIMIZER, LION_OPTIMIZER, MUON_OPTIMIZER]


class DeepSpeedConfigError(Exception):
    """DeepSpeed's configuration error (zeroshard raises ValueError naming
    the key)."""


def required_torch_version(min_version=None, max_version=None):
    """deepspeed.utils.torch.required_torch_version: whether this torch's
    major.minor lies in [min_version, max_version]."""
    have = tuple(int(x) for x in torch.__version__.split("+")[0]
                 .split(".")[:2] if x.isdigit())

    def parse(v):
        return tuple(int(x) for x in str(v).split(".")[:2])
    if min_version is not None and have < parse(min_version):
        return False
    if max_version is not None and have > parse(max_version):
        return False
    return True


class _Builder:
    """DeepSpeed's op builders: its CUDA/C++ ops are not built here. The
    Adam builders are "compatible" (FusedAdam / DeepSpeedCPUAdam map to the
    servers' AdamW), the others not; load() says why it cannot."""
    NAME = ""
    COMPATIBLE = False

    def is_compatible(self, verbose=False):
        del verbose
        return self.COMPATIBLE

    def load(self, verbose=True):
        del verbose
        raise NotImplementedError(
            f"op builder {self.NAME}: DeepSpeed's compiled ops are not built "
            "here (the optimizer runs on the shard servers)")


def _builder(name, cls_name, compatible):
    return type(cls_name, (_Builder,), {"NAME": name,
                                        "COMPATIBLE": compatible})


FusedAdamBuilder = _builder("fused_adam", "FusedAdamBuilder", True)
CPUAdamBuilder = _builder("cpu_adam", "CPUAdamBuilder", True)
FusedLambBuilder = _builder("fused_lamb", "FusedLambBuilder", False)
CPUAdagradBuilder = _builder("cpu_adagrad", "CPUAdagradBuilder", True)
FusedLionBuilder = _builder("fused_lion", "FusedLionBuilder", False)
CPULionBuilder = _builder("cpu_lion", "CPULionBuilder", False)
TransformerBuilder = _builder("transformer", "TransformerBuilder", False)
AsyncIOBuilder = _builder("async_io", "AsyncIOBuilder", False)
BUILDERS = [FusedAdamBuilder, CPUAdamBuilder, FusedLambBuilder,
            CPUAdagradBuilder, FusedLionBuilder, CPULionBuilder,
            TransformerBuilder, AsyncIOBuilder]
COMPATIBLE_OPS = {b.NAME: b.COMPATIBLE for b in BUILDERS}

_ZERO = ("DeepSpeed's own ZeRO optimizers do not run here: the engine's "
         "optimizer (a torch.optim.Optimizer) stands for them")
DeepSpeedZeroOptimizer = refused_class(
    "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer", _ZERO)
DeepSpeedZeroOptimizer_Stage3 = refused_class(
    "deepspeed.runtime.zero.stage3.DeepSpeedZeroOptimizer_Stage3", _ZERO)
FP16_Optimizer = refused_class(
    "deepspeed.runtime.fp16.fused_optimizer.FP16_Optimizer", _ZERO)
FP16_UnfusedOptimizer = refused_class(
    "deepspeed.runtime.fp16.unfused_optimizer.FP16_UnfusedOptimizer", _ZERO)
BF16_Optimizer = refused_class(
    "deepspeed.runtime.bf16_optimizer.BF16_Optimizer", _ZERO)
