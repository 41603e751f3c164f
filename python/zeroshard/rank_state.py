"""What each rank of the PyTorch front-end keeps besides the parameters:
its data position, its random-number state and the module's buffers
(BatchNorm's running statistics).

- ResumableSampler: the training loader's order. Epoch e is a permutation
  of the dataset drawn from (seed, e); rank r of N reads every N-th index
  of it from r (each rank len // N samples), as torch's
  DistributedSampler. Its state is the epoch and the samples read in it
  summed over ranks, so a run resumed on another rank count goes on from
  the same place in the epoch.
- Buffers: broadcast from rank 0 when the engine starts and saved with
  every checkpoint; a restore takes rank 0's on every rank.
- RNG: torch's and Python's generators, saved per rank and restored on the
  rank of the same number (a rank that did not exist takes rank 0's).
"""

import io
import random

import torch


class ResumableSampler(torch.utils.data.Sampler):
    def __init__(self, n, seed, rank=0, world=1, shuffle=True):
        if n < world:
            raise ValueError(
                f"training_data has {n} samples, fewer than the {world} ranks")
        self._n = n
        self._seed = seed
        self._rank = rank
        self._world = world
        self._shuffle = shuffle
        self.epoch = 0
        self.read = 0   # samples this rank read in the epoch

    def __len__(self):
        return self._n // self._world

    def _order(self):
        if not self._shuffle:
            return list(range(self._n))
        g = torch.Generator().manual_seed(self._seed * 1000003 + self.epoch)
        return torch.randperm(self._n, generator=g).tolist()

    def __iter__(self):
        mine = self._order()[self._rank::self._world][:len(self)]
        while self.read < len(mine):
            i = mine[self.read]
            self.read += 1
            yield i
        self.epoch += 1
        self.read = 0

    def state_dict(self):
        return {"epoch": self.epoch, "samples_read": self.read * self._world}

    def load_state_dict(self, state):
        self.epoch = int(state["epoch"])
        self.read = min(int(state["samples_read"]) // self._world, len(self))


def _tensors_bytes(named):
    buf = io.BytesIO()
    torch.save(dict(named), buf)
    return buf.getvalue()


def _load_tensors(own, data, what):
    """Copies the saved tensors into `own` (name -> tensor), whose names
    must be the saved ones."""
    saved = torch.load(io.BytesIO(data))
    if set(saved) != set(own):
        differ = sorted(set(saved) ^ set(own))
        raise RuntimeError(
            f"the module's {what} differ from the saved ones: {differ[:4]}")
    with torch.no_grad():
        for n, t in own.items():
            t.copy_(saved[n])


def buffers_bytes(module):
    return _tensors_bytes(module.named_buffers())


def load_buffers(module, data):
    _load_tensors(dict(module.named_buffers()), data, "buffers")


def broadcast_buffers(group, module):
    """Every rank's buffers become rank 0's."""
    if not any(True for _ in module.buffers()):
        return
    data = buffers_bytes(module) if group.rank == 0 else b""
    data = group.broadcast(data, 0)
    if group.rank != 0:
        load_buffers(module, data)


def rng_state():
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def set_rng_state(state):
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def _frozen(module):
    return {n: p for n, p in module.named_parameters() if not p.requires_grad}


def frozen_bytes(module):
    """The module's parameters that do not train (requires_grad=False):
    the servers do not hold them, so the rank's state does."""
    return _tensors_bytes((n, p.detach().cpu())
                          for n, p in _frozen(module).items())


def load_frozen(module, data):
    _load_tensors(_frozen(module), data, "frozen parameters")
