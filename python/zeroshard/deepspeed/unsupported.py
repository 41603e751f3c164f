"""The parts of DeepSpeed zeroshard does not run: each name exists, and
using it raises NotImplementedError saying why."""


def _refuse(what, why):
    raise NotImplementedError(f"{what} is not supported by zeroshard: {why}")


class _Refused:
    _what = ""
    _why = ""

    def __init__(self, *args, **kwargs):
        _refuse(self._what, self._why)


def refused_class(what, why):
    return type(what.rsplit(".", 1)[-1], (_Refused,),
                {"_what": what, "_why": why})


def refused_function(what, why):
    def f(*args, **kwargs):
        _refuse(what, why)
    f.__name__ = what.rsplit(".", 1)[-1]
    return f


_PIPE = "pipeline parallelism is not built (every rank holds the whole model)"
_MOE = "mixture-of-experts layers and expert parallelism are not built"
_INF = "inference engines are not built (train here, export the weights)"

PipelineModule = refused_class("deepspeed.pipe.PipelineModule", _PIPE)
LayerSpec = refused_class("deepspeed.pipe.LayerSpec", _PIPE)
TiedLayerSpec = refused_class("deepspeed.pipe.TiedLayerSpec", _PIPE)
PipelineEngine = refused_class("deepspeed.runtime.pipe.engine.PipelineEngine",
                               _PIPE)
MoE = refused_class("deepspeed.moe.layer.MoE", _MOE)
def is_moe_param(param):
    """DeepSpeed's test for an expert's parameter: none exists here."""
    return bool(getattr(param, "allreduce", True) is False)


def split_params_into_different_moe_groups_for_optimizer(
        param_groups, max_group_size=178956971):
    """DeepSpeed's split of the experts' parameters into groups of their
    own. With no MoE layer (none is built here) there is nothing to split:
    the groups come back as given, as DeepSpeed returns them; an expert's
    parameter is refused."""
    del max_group_size
    groups = param_groups
    if isinstance(groups, dict):
        groups = [groups]
    elif isinstance(groups, tuple):
        groups = list(groups)
    for g in groups:
        params = g["params"] if isinstance(g, dict) else [g]
        if any(is_moe_param(p) for p in params):
            _refuse("deepspeed.moe.utils."
                    "split_params_into_different_moe_groups_for_optimizer "
                    "with expert parameters", _MOE)
    return groups
InferenceEngine = refused_class("deepspeed.InferenceEngine", _INF)
init_inference = refused_function("deepspeed.init_inference", _INF)
DeepSpeedTransformerLayer = refused_class(
    "deepspeed.ops.transformer.DeepSpeedTransformerLayer",
    "DeepSpeed's fused CUDA transformer kernels are not built")
DeepSpeedTransformerConfig = refused_class(
    "deepspeed.ops.transformer.DeepSpeedTransformerConfig",
    "DeepSpeed's fused CUDA transformer kernels are not built")
DeepSpeedHybridEngine = refused_class("deepspeed.DeepSpeedHybridEngine",
                                      "the RLHF hybrid engine is not built")
