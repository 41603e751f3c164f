"""deepspeed.comm: the collectives a training script calls, over
torch.distributed (Gloo for CPU tensors, NCCL for CUDA ones where torch
has it), set up from the environment zeroshard-launch and torchrun give
each rank (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).

The engine's own step (the reduce-scatter of gradients, the servers'
commit) runs on a group of its own, met through the shard servers; this
one is the script's, as DeepSpeed's is.
"""

import datetime
import os
import socket

import torch.distributed as _dist

ReduceOp = _dist.ReduceOp


def _env_int(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"{name}={v!r}: not an integer") from None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(dist_backend=None, auto_mpi_discovery=True,
                     distributed_port=29500, verbose=True,
                     timeout=datetime.timedelta(minutes=30), init_method=None,
                     dist_init_required=None, config=None, rank=-1,
                     world_size=-1):
    """Starts torch.distributed once (a second call does nothing), as
    DeepSpeed's: rank and world size from the arguments or RANK /
    WORLD_SIZE (0 and 1 when unset); MASTER_ADDR / MASTER_PORT from the
    environment, or 127.0.0.1 and distributed_port for a lone rank (a free
    port when that one is taken). dist_backend: "gloo", "nccl", or None
    (NCCL where CUDA is, Gloo otherwise). MPI discovery is not done here:
    start the ranks with zeroshard-launch or torchrun."""
    del auto_mpi_discovery, config
    if dist_init_required is False or _dist.is_initialized():
        return
    if rank < 0:
        rank = _env_int("RANK", 0)
    if world_size < 0:
        world_size = _env_int("WORLD_SIZE", 1)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"init_distributed: rank {rank}, world size "
                         f"{world_size}: need 0 <= rank < world size")
    if dist_backend is None:
        dist_backend = _accelerator_backend()
    if dist_backend not in ("gloo", "nccl"):
        raise ValueError(f"init_distributed: dist_backend={dist_backend!r}: "
                         "this build runs \"gloo\" or \"nccl\"")
    if init_method is None:
        if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
            if world_size > 1:
                raise RuntimeError(
                    f"init_distributed: WORLD_SIZE={world_size} but "
                    "MASTER_ADDR / MASTER_PORT are not set: start the ranks "
                    "with zeroshard-launch or torchrun")
            port = distributed_port
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            except OSError:
                port = _free_port()
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(port))
        init_method = "env://"
    if verbose and rank == 0:
        print(f"zeroshard.deepspeed: torch.distributed ({dist_backend}) "
              f"with {world_size} rank(s)", flush=True)
    _dist.init_process_group(backend=dist_backend, init_method=init_method,
                             rank=rank, world_size=world_size,
                             timeout=timeout)


def _accelerator_backend():
    from .accelerator import get_accelerator
    return get_accelerator().communication_backend_name()


def is_initialized():
    return _dist.is_initialized()


def is_available():
    return _dist.is_available()


def _need():
    if not _dist.is_initialized():
        raise RuntimeError(
            "deepspeed.comm: torch.distributed is not initialized: call "
            "deepspeed.init_distributed() (deepspeed.initialize does it)")


def get_rank(group=None):
    if not _dist.is_initialized():
        return _env_int("RANK", 0) if group is None else 0
    return _dist.get_rank(group)


def get_world_size(group=None):
    if not _dist.is_initialized():
        return _env_int("WORLD_SIZE", 1) if group is None else 1
    return _dist.get_world_size(group)


def get_local_rank():
    return _env_int("LOCAL_RANK", _env_int("RANK", 0))


def get_global_rank(group=None, group_rank=0):
    _need()
    return _dist.get_global_rank(group or _dist.group.WORLD, group_rank)


def get_world_group():
    _need()
    return _dist.group.WORLD


def new_group(ranks):
    _need()
    return _dist.new_group(ranks)


def destroy_process_group(group=None):
    if _dist.is_initialized():
        _dist.destroy_process_group(group)


def barrier(group=None, async_op=False, device_ids=None):
    _need()
    del device_ids
    return _dist.barrier(group=group, async_op=async_op)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    _need()
    return _dist.all_reduce(tensor, op=op, group=group, async_op=async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    _need()
    return _dist.all_gather(tensor_list, tensor, group=group,
                            async_op=async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None,
                           async_op=False):
    _need()
    # Gloo (torch 1.13) has no all_gather_into_tensor: through a list.
    n = get_world_size(group)
    parts = list(output_tensor.chunk(n))
    work = _dist.all_gather(parts, input_tensor, group=group)
    return work if async_op else None


def all_gather_object(object_list, obj, group=None):
    _need()
    return _dist.all_gather_object(object_list, obj, group=group)


def broadcast(tensor, src, group=None, async_op=False):
    _need()
    return _dist.broadcast(tensor, src, group=group, async_op=async_op)


def broadcast_object_list(object_list, src, group=None, device=None):
    _need()
    return _dist.broadcast_object_list(object_list, src, group=group,
                                       device=device)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, async_op=False):
    _need()
    return _dist.reduce(tensor, dst, op=op, group=group, async_op=async_op)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None,
                   async_op=False):
    _need()
    if _dist.get_backend(group) == "gloo":
        # Gloo has no reduce_scatter: all-reduce each part, keep ours.
        for i, t in enumerate(input_list):
            t = t.clone()
            _dist.all_reduce(t, op=op, group=group)
            if i == get_rank(group):
                output.copy_(t)
        return None
    return _dist.reduce_scatter(output, input_list, op=op, group=group,
                                async_op=async_op)


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    _need()
    return _dist.gather(tensor, gather_list, dst, group=group,
                        async_op=async_op)


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    _need()
    return _dist.scatter(tensor, scatter_list, src, group=group,
                         async_op=async_op)


def send(tensor, dst, group=None, tag=0):
    _need()
    return _dist.send(tensor, dst, group=group, tag=tag)


def recv(tensor, src=None, group=None, tag=0):
    _need()
    return _dist.recv(tensor, src, group=group, tag=tag)


def isend(tensor, dst, group=None, tag=0):
    _need()
    return _dist.isend(tensor, dst, group=group, tag=tag)


def irecv(tensor, src=None, group=None, tag=0):
    _need()
    return _dist.irecv(tensor, src, group=group, tag=tag)


def all_to_all_single(output, input, output_split_sizes=None,
                      input_split_sizes=None, group=None, async_op=False):
    _need()
    return _dist.all_to_all_single(output, input, output_split_sizes,
                                   input_split_sizes, group=group,
                                   async_op=async_op)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    _need()
    return _dist.monitored_barrier(group=group, timeout=timeout,
                                   wait_all_ranks=wait_all_ranks)


def log_summary(show_straggler=False, return_dict=False):
    """DeepSpeed's communication log: not kept here (the engine's own
    step reports its phases in engine.step_breakdown())."""
    del show_straggler
    return {} if return_dict else None


def configure(deepspeed_config=None, enabled=None, prof_all=None,
              prof_ops=None, verbose=None, debug=None):
    """DeepSpeed's comms_logger settings: no communication log is kept
    here (see log_summary), so there is nothing to configure."""
    del deepspeed_config, enabled, prof_all, prof_ops, verbose, debug


def get_backend(group=None):
    _need()
    return _dist.get_backend(group)


def has_all_gather_into_tensor():
    return True


def has_reduce_scatter_tensor():
    return False
