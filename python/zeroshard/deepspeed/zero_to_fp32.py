"""deepspeed.utils.zero_to_fp32: FP32 weights out of a checkpoint.

A zeroshard checkpoint's weights are the servers' shard files; reading
them offline is not built yet. engine.consolidated_state_dict() (a live
run) and `zeroshard-ctl export` (a running cluster) give the same FP32
values now."""


def _not_yet(name):
    raise NotImplementedError(
        f"zero_to_fp32.{name}: reading a zeroshard checkpoint offline is not "
        "built yet; use engine.consolidated_state_dict() in the run, or "
        "zeroshard-ctl restore + export against servers")


def get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag=None,
                                             exclude_frozen_parameters=False,
                                             lazy_mode=False):
    _not_yet("get_fp32_state_dict_from_zero_checkpoint")


def convert_zero_checkpoint_to_fp32_state_dict(checkpoint_dir, output_dir,
                                               *args, **kwargs):
    _not_yet("convert_zero_checkpoint_to_fp32_state_dict")


def load_state_dict_from_zero_checkpoint(model, checkpoint_dir, tag=None):
    _not_yet("load_state_dict_from_zero_checkpoint")
