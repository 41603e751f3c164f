"""deepspeed.utils.zero_to_fp32: a checkpoint's FP32 weights without
servers, under the module's own names. The checkpoint is a folder that
engine.save_checkpoint wrote (save_dir, or save_dir/tag): its newest
complete step is read, every shard file verified against the manifest
(size and XXH3-64) before a byte is used."""

import os

import torch

from .. import checkpoint_io


def _dir(checkpoint_dir, tag):
    return (os.path.join(checkpoint_dir, str(tag)) if tag is not None
            else checkpoint_dir)


def get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag=None,
                                             exclude_frozen_parameters=False,
                                             lazy_mode=False):
    """{name: FP32 tensor}: every trained parameter from the servers'
    masters, the frozen parameters (unless excluded) and the buffers."""
    del lazy_mode   # the tensors are read whole either way
    _, sd = checkpoint_io.read_fp32(
        _dir(checkpoint_dir, tag),
        exclude_frozen_parameters=exclude_frozen_parameters)
    return sd


def convert_zero_checkpoint_to_fp32_state_dict(checkpoint_dir, output_dir,
                                               max_shard_size="5GB",
                                               safe_serialization=False,
                                               tag=None,
                                               exclude_frozen_parameters=False):
    """Writes the state dict to output_dir/pytorch_model.bin (torch.save;
    one file whatever max_shard_size says)."""
    del max_shard_size
    if safe_serialization:
        raise NotImplementedError(
            "convert_zero_checkpoint_to_fp32_state_dict(safe_serialization="
            "True): safetensors is not installed here; torch.save's .bin is")
    sd = get_fp32_state_dict_from_zero_checkpoint(
        checkpoint_dir, tag=tag,
        exclude_frozen_parameters=exclude_frozen_parameters)
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "pytorch_model.bin")
    torch.save(sd, path)
    return path


def load_state_dict_from_zero_checkpoint(model, checkpoint_dir, tag=None):
    """Loads the checkpoint's FP32 weights into `model` (strictly) and
    returns it."""
    sd = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag=tag)
    model.load_state_dict(sd, strict=True)
    return model
