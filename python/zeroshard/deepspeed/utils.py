"""deepspeed.utils: logging and the safe_get / safe_set accessors of a
parameter's full FP32 value and gradient (the servers' masters here)."""

import logging

# (as _torch: deepspeed.utils.torch is a module of this name)
import torch as _torch

logger = logging.getLogger("DeepSpeed")
if not logger.handlers:
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter(
        "[%(asctime)s] [%(levelname)s] %(message)s"))
    logger.addHandler(_h)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def log_dist(message, ranks=None, level=logging.INFO):
    """Logs on the listed ranks (all with -1; rank 0 when None... as
    DeepSpeed: every rank when ranks is None)."""
    from . import comm
    rank = comm.get_rank()
    if ranks is None or -1 in ranks or rank in ranks:
        logger.log(level, f"[Rank {rank}] {message}")


def print_dist(message, ranks=None):
    from . import comm
    rank = comm.get_rank()
    if ranks is None or -1 in ranks or rank in ranks:
        print(f"[Rank {rank}] {message}", flush=True)


def _engine_of(param):
    from ..engine import _live_engines
    for e in list(_live_engines):
        if not e._closed and id(param) in e._shapes:
            return e
    raise ValueError("the parameter is not trained by a live engine (or "
                     "is frozen): nothing holds its full value")


def _slot(e, param):
    for p, off, n in e._slots:
        if p is param:
            return off, n
    raise ValueError("the parameter is not in the engine's layout")


def safe_get_full_fp32_param(param):
    """The parameter's whole FP32 master value from the servers (every
    rank may call it; no collective)."""
    e = _engine_of(param)
    e._need_open()
    off, n = _slot(e, param)
    out = _torch.empty(n, dtype=_torch.float32)
    e._cluster.gather([(off, off + n)], "fp32", out.numpy(),
                      min_version=e.global_steps)
    return out.view(e._shapes[id(param)])


def safe_set_full_fp32_param(param, value):
    """Writes `value` (the parameter's shape) into the servers' FP32 master
    and into the parameter this rank holds (stages 1 and 2; under stage 3
    the next gather brings it). The optimizer state stays. Call it on every
    rank with the same value."""
    e = _engine_of(param)
    e._need_open()
    off, n = _slot(e, param)
    value = _torch.as_tensor(value).detach().to("cpu", _torch.float32)
    if tuple(value.shape) != tuple(e._shapes[id(param)]):
        raise ValueError(f"safe_set_full_fp32_param: shape {tuple(value.shape)}"
                         f", the parameter's is {tuple(e._shapes[id(param)])}")
    if e.rank == 0:
        e._cluster.set_master_weight_ranges(
            [(off, off + n)], value.contiguous().reshape(-1).numpy())
    e._barrier()
    e._gather()


def safe_get_full_grad(param):
    """The parameter's whole gradient this rank accumulated since the last
    optimizer step (before the ranks' reduction, which runs at step()), in
    FP32; None when there is none yet. Stages 1 and 2, and stage 3 on one
    rank."""
    e = _engine_of(param)
    e._need_open()
    if not e._has_grads:
        return None
    off, n = _slot(e, param)
    if e._flat_grad is None:
        raise NotImplementedError(
            "safe_get_full_grad under stage 3 with several ranks: each rank "
            "holds only its partition of the gradient")
    g = e._flat_grad[off:off + n].float().clone()
    if e._prec == "fp16":
        g /= e.loss_scale()
    return g.view(e._shapes[id(param)])


def safe_set_full_grad(param, value):
    e = _engine_of(param)
    e._need_open()
    off, n = _slot(e, param)
    if e._flat_grad is None:
        raise NotImplementedError("safe_set_full_grad under stage 3 with "
                                  "several ranks")
    value = _torch.as_tensor(value).to(e._flat_grad.dtype)
    if e._prec == "fp16":
        value = value * e.loss_scale()
    e._flat_grad[off:off + n].copy_(value.reshape(-1))
    e._has_grads = True


def safe_get_full_optimizer_state(param, optim_state_key):
    """The parameter's whole optimizer state `optim_state_key` (AdamW:
    "exp_avg", "exp_avg_sq"; "step" the step count) from the servers, at
    the newest step (a consistent snapshot; training may go on). Rank 0
    reads and the others get its values: call it on every rank, as
    DeepSpeed's."""
    e = _engine_of(param)
    e._need_open()
    off, n = _slot(e, param)
    if optim_state_key == "step":
        return _torch.tensor(float(min(
            s["optimizer_step"] for s in e._cluster.inspect_all())))
    slots = e._state_slots()
    if optim_state_key not in slots:
        raise ValueError(f"safe_get_full_optimizer_state: {optim_state_key!r}"
                         f" is not a state the servers keep ({slots})")
    return e._read_state([optim_state_key], off, off + n)[0].clone().view(
        e._shapes[id(param)])


def safe_set_full_optimizer_state(param, value, optim_state_key):
    """Writes the parameter's whole optimizer state `optim_state_key` on the
    servers (rank 0 writes; every rank calls it with the same value)."""
    e = _engine_of(param)
    e._need_open()
    off, n = _slot(e, param)
    slots = e._state_slots()
    if optim_state_key not in slots:
        raise ValueError(f"safe_set_full_optimizer_state: {optim_state_key!r}"
                         f" is not a state the servers keep ({slots})")
    value = _torch.as_tensor(value).detach().to("cpu", _torch.float32)
    if value.numel() != n:
        raise ValueError(f"safe_set_full_optimizer_state: {value.numel()} "
                         f"values for a parameter of {n}")
    if e.rank == 0:
        e._cluster.set_state_ranges([(off, off + n)], optim_state_key,
                                    value.contiguous().reshape(-1).numpy())
    e._barrier()


# DeepSpeed's local (this rank's partition) forms: a rank here holds the
# whole gradient (stages 1, 2) and the servers the whole master, so the
# local value is the full one.
safe_get_local_fp32_param = safe_get_full_fp32_param
safe_get_local_grad = safe_get_full_grad
safe_get_local_optimizer_state = safe_get_full_optimizer_state
safe_set_local_fp32_param = safe_set_full_fp32_param
safe_set_local_grad = safe_set_full_grad
safe_set_local_optimizer_state = safe_set_full_optimizer_state


class RepeatingLoader:
    """DeepSpeed's RepeatingLoader: iterates `loader` for ever, starting it
    again when it ends."""

    def __init__(self, loader):
        self.loader = loader
        self.data_iter = iter(self.loader)

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self.data_iter)
        except StopIteration:
            self.data_iter = iter(self.loader)
            return next(self.data_iter)


class OnDevice:
    """DeepSpeed's OnDevice: builds a module with `dtype` parameters on
    `device` ("meta" is not supported: initialize needs the values)."""

    def __init__(self, dtype=None, device="cpu", enabled=True):
        if enabled and str(device) == "meta":
            raise NotImplementedError("OnDevice(device='meta'): initialize "
                                      "sends the model's values to the "
                                      "servers, so they must exist")
        self._dtype, self._device, self._enabled = dtype, device, enabled
        self._saved = None

    def __enter__(self):
        if self._enabled and self._dtype in (_torch.float32, _torch.float64):
            self._saved = _torch.get_default_dtype()
            _torch.set_default_dtype(self._dtype)
        return self

    def __exit__(self, *exc):
        if self._saved is not None:
            _torch.set_default_dtype(self._saved)
        return False
