"""deepspeed.zero (and deepspeed.runtime.zero): ZeRO-3's context managers
and registrations as scripts use them.

zeroshard partitions a model when zeroshard.initialize (or
deepspeed.initialize) takes it: the parameters go to the shard servers
then, so Init's context builds the model as it is (whole, on the CPU or
the device torch puts it) and partitioning happens at initialize. A model
too large to build whole in one process's memory is not served by this."""

import contextlib

import torch

from .. import GatheredParameters  # noqa: F401  (DeepSpeed's name)


class Init(contextlib.ContextDecorator):
    """DeepSpeed's zero.Init: here a context in which the model is built as
    usual; initialize partitions it (see the module docstring). dtype, when
    given, is the default floating-point dtype inside the block, as
    DeepSpeed's remote_device / dtype make the parameters."""

    def __init__(self, module=None, data_parallel_group=None,
                 mem_efficient_linear=True, remote_device=None,
                 pin_memory=False, config_dict_or_path=None, config=None,
                 enabled=True, dtype=None, mpu=None, zero_param_parallel_group=None,
                 zero_quantized_weights=False, zero_quantized_nontrainable_weights=False,
                 sequence_data_parallel_group=None, param_swapper=None):
        del (data_parallel_group, mem_efficient_linear, remote_device,
             pin_memory, config_dict_or_path, config, zero_param_parallel_group,
             zero_quantized_weights, zero_quantized_nontrainable_weights,
             sequence_data_parallel_group, param_swapper)
        if mpu is not None:
            raise NotImplementedError("zero.Init(mpu=...): model parallelism "
                                      "is not supported")
        self._enabled = enabled
        self._dtype = dtype
        self._saved = None
        if module is not None and enabled and dtype is not None:
            module.to(dtype)

    def __enter__(self):
        if self._enabled and self._dtype is not None and \
                self._dtype.is_floating_point:
            self._saved = torch.get_default_dtype()
            if self._dtype in (torch.float32, torch.float64):
                torch.set_default_dtype(self._dtype)
            else:
                # torch's default dtype must be float32 or float64: the
                # module is cast by initialize under bf16 / fp16 instead.
                self._saved = None
        return self

    def __exit__(self, *exc):
        if self._saved is not None:
            torch.set_default_dtype(self._saved)
            self._saved = None
        return False


def register_external_parameter(module, parameter):
    """DeepSpeed registers `parameter` as used by `module`'s forward though
    another module owns it. The registration is recorded only: a ZeRO-3
    unit's forward gathers the parameters its own modules hold, so one read
    elsewhere must be in a unit holding both (the config's
    zeroshard.units), which initialize checks for tied weights."""
    if not isinstance(module, torch.nn.Module) or not isinstance(
            parameter, torch.nn.Parameter):
        raise TypeError("register_external_parameter(module, parameter)")
    regs = module.__dict__.setdefault("_zeroshard_external", [])
    if not any(p is parameter for p in regs):
        regs.append(parameter)


def unregister_external_parameter(module, parameter):
    regs = module.__dict__.get("_zeroshard_external", [])
    module.__dict__["_zeroshard_external"] = [p for p in regs
                                              if p is not parameter]


class ZeroParamStatus:
    """DeepSpeed's ZeRO-3 parameter states, for scripts that compare
    against them."""
    AVAILABLE = 1
    NOT_AVAILABLE = 2
    INFLIGHT = 3


def is_zero_param(parameter):
    return False


class MiCS_Init(Init):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("zero.MiCS_Init: MiCS's hierarchical "
                                  "partitioning is not supported")
