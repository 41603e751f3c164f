"""DeepSpeed's public API over zeroshard: `import zeroshard.deepspeed as
deepspeed`, or, in the ranks `zeroshard-launch --deepspeed` starts,
`import deepspeed` itself. A script written for DeepSpeed 0.19 runs with no
edit and does what it would there, except that the optimizer runs on the
shard servers. Each name works with DeepSpeed's semantics or raises
NotImplementedError saying why (pipeline, MoE, inference); the differences
are listed in docs/PYTORCH.md."""

import os
import sys
import types

import torch

from .. import GatheredParameters
from .. import initialize as _zs_initialize
from ..engine import ZeroshardEngine
from . import (accelerator, comm, lr_schedules, ops, support, unsupported,
               utils, zero, zero_to_fp32)
from .comm import init_distributed
from .utils import OnDevice, log_dist, logger

# The folder whose `deepspeed` package is this one: on a process's
# PYTHONPATH, its `import deepspeed` resolves here (zeroshard-launch
# --deepspeed puts it there; for torchrun: `PYTHONPATH=$(python3 -m
# zeroshard.deepspeed) torchrun ...`).
SHIM_DIR = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "_shim")

# The DeepSpeed release whose API and defaults this follows.
__version__ = "0.19.6"
__version_major__, __version_minor__, __version_patch__ = 0, 19, 6
__git_hash__ = "zeroshard"
__git_branch__ = "zeroshard"
version = __version__

DeepSpeedEngine = ZeroshardEngine
DeepSpeedOptimizer = torch.optim.Optimizer
PipelineModule = unsupported.PipelineModule
PipelineEngine = unsupported.PipelineEngine
InferenceEngine = unsupported.InferenceEngine
DeepSpeedHybridEngine = unsupported.DeepSpeedHybridEngine
DeepSpeedTransformerLayer = unsupported.DeepSpeedTransformerLayer
DeepSpeedTransformerConfig = unsupported.DeepSpeedTransformerConfig
init_inference = unsupported.init_inference
ADAM_OPTIMIZER, ADAMW_OPTIMIZER, LAMB_OPTIMIZER = "adam", "adamw", "lamb"
MUON_OPTIMIZER = "muon"


def initialize(args=None, model=None, optimizer=None, model_parameters=None,
               training_data=None, lr_scheduler=None, distributed_port=29500,
               mpu=None, dist_init_required=None, collate_fn=None,
               config=None, mesh_param=None, config_params=None):
    """deepspeed.initialize: starts torch.distributed as DeepSpeed does
    (deepspeed.comm), then zeroshard.initialize. Returns (engine,
    optimizer, training dataloader or None, lr scheduler or None)."""
    if model is None:
        raise ValueError("deepspeed.initialize requires a model")
    if config is None and config_params is not None:
        config = config_params
    if config is not None and args is not None and getattr(
            args, "deepspeed_config", None) is not None:
        raise ValueError(
            "deepspeed.initialize: a config both in args.deepspeed_config "
            "and in config=: give one")
    comm.init_distributed(distributed_port=distributed_port,
                          dist_init_required=dist_init_required,
                          verbose=False)
    return _zs_initialize(
        args=args, model=model, optimizer=optimizer,
        model_parameters=model_parameters, training_data=training_data,
        lr_scheduler=lr_scheduler, mpu=mpu, collate_fn=collate_fn,
        config=config, mesh_param=mesh_param)


def add_config_arguments(parser):
    """Adds DeepSpeed's --deepspeed, --deepspeed_config (and the deprecated
    --deepscale, --deepscale_config) to an argparse parser."""
    group = parser.add_argument_group("DeepSpeed", "DeepSpeed configurations")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="enable DeepSpeed (a flag for the script itself)")
    group.add_argument("--deepspeed_config", default=None, type=str,
                       help="DeepSpeed JSON configuration file")
    group.add_argument("--deepscale", default=False, action="store_true",
                       help="deprecated: --deepspeed")
    group.add_argument("--deepscale_config", default=None, type=str,
                       help="deprecated: --deepspeed_config")
    return parser


def add_tuning_arguments(parser):
    """DeepSpeed's learning-rate-tuning arguments (LR range test, 1Cycle):
    those schedules are not run here, so the arguments are accepted and
    unused."""
    group = parser.add_argument_group("Convergence Tuning",
                                      "Convergence tuning configurations")
    group.add_argument("--lr_schedule", type=str, default=None)
    return parser


def _activation_checkpoint(function, *args):
    return torch.utils.checkpoint.checkpoint(function, *args)


def _configure_checkpointing(mpu_=None, deepspeed_config=None,
                             partition_activations=None,
                             contiguous_checkpointing=None,
                             num_checkpoints=None, checkpoint_in_cpu=None,
                             synchronize=None, profile=None):
    """DeepSpeed's activation-checkpointing settings: partitioning, CPU
    offload and contiguous buffers are not done here; checkpoint() is
    torch's recomputation."""
    if mpu_ is not None:
        raise NotImplementedError("checkpointing.configure(mpu_): model "
                                  "parallelism is not supported")


# --- the dotted modules scripts import ---------------------------------------

def _module(name, doc, **attrs):
    """A module zeroshard.deepspeed.<name> holding attrs, registered so
    that `import deepspeed.<name>` finds it under the launcher's shim."""
    full = f"{__name__}.{name}"
    m = sys.modules.get(full)
    if m is None:
        m = types.ModuleType(full, doc)
        sys.modules[full] = m
    for k, v in attrs.items():
        setattr(m, k, v)
    parent, _, leaf = full.rpartition(".")
    if parent not in sys.modules:   # a parent named later: made now
        _module(parent[len(__name__) + 1:], f"deepspeed.{parent[len(__name__) + 1:]}")
    setattr(sys.modules[parent], leaf, m)
    return m


def _alias(name, module):
    sys.modules[f"{__name__}.{name}"] = module
    parent, _, leaf = f"{__name__}.{name}".rpartition(".")
    setattr(sys.modules[parent], leaf, module)


checkpointing = _module(
    "checkpointing", "deepspeed.checkpointing: torch's recomputation.",
    checkpoint=_activation_checkpoint, configure=_configure_checkpointing,
    is_configured=lambda: True, reset=lambda: None)
_alias("ops.adam", ops)
ops.__compatible_ops__ = support.COMPATIBLE_OPS
_module("ops.op_builder", "deepspeed.ops.op_builder: DeepSpeed's compiled ops "
        "are not built here", **{b.__name__: b for b in support.BUILDERS})
_module("utils.torch", "deepspeed.utils.torch",
        required_torch_version=support.required_torch_version)
_module("runtime.config", "deepspeed.runtime.config",
        DeepSpeedConfigError=support.DeepSpeedConfigError,
        **{k: getattr(support, k) for k in (
            "ADAGRAD_OPTIMIZER", "ADAM_OPTIMIZER", "ADAMW_OPTIMIZER",
            "LAMB_OPTIMIZER",
            "ONEBIT_ADAM_OPTIMIZER", "LION_OPTIMIZER", "MUON_OPTIMIZER",
            "DEEPSPEED_OPTIMIZERS")})
_module("runtime.fp16", "deepspeed.runtime.fp16")
_module("runtime.fp16.fused_optimizer", "deepspeed.runtime.fp16.fused_optimizer",
        FP16_Optimizer=support.FP16_Optimizer)
_module("runtime.fp16.unfused_optimizer",
        "deepspeed.runtime.fp16.unfused_optimizer",
        FP16_UnfusedOptimizer=support.FP16_UnfusedOptimizer)
_module("runtime.bf16_optimizer", "deepspeed.runtime.bf16_optimizer",
        BF16_Optimizer=support.BF16_Optimizer)
_module("ops.lamb", "deepspeed.ops.lamb", FusedLamb=ops.FusedLamb)
_module("ops.adagrad", "deepspeed.ops.adagrad",
        DeepSpeedCPUAdagrad=ops.DeepSpeedCPUAdagrad)
_module("ops.lion", "deepspeed.ops.lion",
        DeepSpeedCPULion=ops.DeepSpeedCPULion, FusedLion=ops.FusedLion)
_module("ops.transformer", "deepspeed.ops.transformer",
        DeepSpeedTransformerLayer=unsupported.DeepSpeedTransformerLayer,
        DeepSpeedTransformerConfig=unsupported.DeepSpeedTransformerConfig)
_alias("utils.zero_to_fp32", zero_to_fp32)
_alias("utils.logging", utils)
_module("utils.groups", "deepspeed.utils.groups: one data-parallel group.",
        _get_data_parallel_world_size=comm.get_world_size,
        _get_data_parallel_rank=comm.get_rank)
runtime = _module("runtime", "deepspeed.runtime")
_module("runtime.engine", "deepspeed.runtime.engine",
        DeepSpeedEngine=ZeroshardEngine,
        DeepSpeedOptimizerCallable=object, DeepSpeedSchedulerCallable=object)
_alias("runtime.lr_schedules", lr_schedules)
_alias("runtime.zero", zero)
_alias("runtime.zero.partition_parameters", zero)
_module("runtime.zero.stage3", "deepspeed.runtime.zero.stage3",
        DeepSpeedZeroOptimizer_Stage3=support.DeepSpeedZeroOptimizer_Stage3)
_module("runtime.zero.stage_1_and_2", "deepspeed.runtime.zero.stage_1_and_2",
        DeepSpeedZeroOptimizer=support.DeepSpeedZeroOptimizer)
_module("runtime.dataloader", "deepspeed.runtime.dataloader",
        RepeatingLoader=utils.RepeatingLoader,
        DeepSpeedDataLoader=torch.utils.data.DataLoader)
_module("runtime.utils", "deepspeed.runtime.utils",
        see_memory_usage=lambda message, force=False: None,
        clip_grad_norm_=torch.nn.utils.clip_grad_norm_)
_module("runtime.activation_checkpointing",
        "deepspeed.runtime.activation_checkpointing")
_alias("runtime.activation_checkpointing.checkpointing", checkpointing)
_module("runtime.pipe", "deepspeed.runtime.pipe")
_module("runtime.pipe.engine", "deepspeed.runtime.pipe.engine",
        PipelineEngine=unsupported.PipelineEngine)
pipe = _module("pipe", "deepspeed.pipe: not supported.",
               PipelineModule=unsupported.PipelineModule,
               LayerSpec=unsupported.LayerSpec,
               TiedLayerSpec=unsupported.TiedLayerSpec)
moe = _module("moe", "deepspeed.moe: not supported.")
_module("moe.layer", "deepspeed.moe.layer", MoE=unsupported.MoE)
_module("moe.utils", "deepspeed.moe.utils",
        split_params_into_different_moe_groups_for_optimizer=unsupported.
        split_params_into_different_moe_groups_for_optimizer,
        is_moe_param=unsupported.is_moe_param)
