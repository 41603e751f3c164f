"""deepspeed.accelerator: get_accelerator() answers for the device this
process trains on: CUDA where torch sees a GPU, the CPU otherwise
(DS_ACCELERATOR=cpu or cuda chooses, as in DeepSpeed)."""

import os

import torch


class _Accelerator:
    """The calls scripts make of DeepSpeed's accelerator, on torch."""

    def __init__(self, name):
        self._name = name

    # --- which device ---------------------------------------------------
    def device_name(self, device_index=None):
        if self._name == "cpu" or device_index is None:
            return self._name
        return f"{self._name}:{device_index}"

    def device(self, device_index=None):
        return torch.device(self.device_name(device_index))

    def set_device(self, device_index):
        if self._name == "cuda":
            torch.cuda.set_device(device_index)

    def current_device(self):
        return torch.cuda.current_device() if self._name == "cuda" else 0

    def current_device_name(self):
        if self._name == "cuda":
            return f"cuda:{torch.cuda.current_device()}"
        return "cpu"

    def device_count(self):
        if self._name == "cuda":
            return torch.cuda.device_count()
        # DeepSpeed's CPU accelerator: the ranks on this node, as its
        # launcher (and zeroshard-launch) give them.
        for name in ("LOCAL_SIZE", "LOCAL_WORLD_SIZE"):
            v = os.environ.get(name)
            if v and v.isdigit():
                return int(v)
        return 1

    def is_available(self):
        return torch.cuda.is_available() if self._name == "cuda" else True

    def is_synchronized_device(self):
        return self._name == "cpu"

    def synchronize(self, device_index=None):
        if self._name == "cuda":
            torch.cuda.synchronize(device_index)

    def communication_backend_name(self):
        return "nccl" if self._name == "cuda" else "gloo"

    def use_host_timers(self):
        return self._name == "cpu"

    # --- random numbers ---------------------------------------------------
    def manual_seed(self, seed):
        if self._name == "cuda":
            torch.cuda.manual_seed(seed)
        else:
            torch.manual_seed(seed)

    def manual_seed_all(self, seed):
        if self._name == "cuda":
            torch.cuda.manual_seed_all(seed)
        else:
            torch.manual_seed(seed)

    def initial_seed(self):
        return (torch.cuda.initial_seed() if self._name == "cuda"
                else torch.initial_seed())

    def random(self):
        return torch.random

    def get_rng_state(self, device_index=None):
        if self._name == "cuda":
            return torch.cuda.get_rng_state(device_index or "cuda")
        return torch.get_rng_state()

    def set_rng_state(self, new_state, device_index=None):
        if self._name == "cuda":
            torch.cuda.set_rng_state(new_state, device_index or "cuda")
        else:
            torch.set_rng_state(new_state)

    # --- dtypes -------------------------------------------------------------
    def is_bf16_supported(self):
        if self._name == "cuda":
            return torch.cuda.is_bf16_supported()
        return True

    def is_fp16_supported(self):
        return self._name == "cuda"

    def supported_dtypes(self):
        out = [torch.float32, torch.bfloat16]
        if self.is_fp16_supported():
            out.append(torch.float16)
        return out

    # --- memory -------------------------------------------------------------
    def empty_cache(self):
        if self._name == "cuda":
            torch.cuda.empty_cache()

    def memory_allocated(self, device_index=None):
        return (torch.cuda.memory_allocated(device_index)
                if self._name == "cuda" else 0)

    def max_memory_allocated(self, device_index=None):
        return (torch.cuda.max_memory_allocated(device_index)
                if self._name == "cuda" else 0)

    def reset_peak_memory_stats(self, device_index=None):
        if self._name == "cuda":
            torch.cuda.reset_peak_memory_stats(device_index)

    def memory_reserved(self, device_index=None):
        return (torch.cuda.memory_reserved(device_index)
                if self._name == "cuda" else 0)

    def total_memory(self, device_index=None):
        if self._name == "cuda":
            return torch.cuda.get_device_properties(
                device_index or 0).total_memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def pin_memory(self, tensor, align_bytes=1):
        del align_bytes
        return tensor.pin_memory() if self._name == "cuda" else tensor

    def is_pinned(self, tensor):
        return tensor.is_pinned() if self._name == "cuda" else False

    def on_accelerator(self, tensor):
        return tensor.device.type == self._name

    # --- streams and events ---------------------------------------------------
    @property
    def Stream(self):
        if self._name != "cuda":
            raise NotImplementedError("get_accelerator().Stream: the CPU "
                                      "has no streams")
        return torch.cuda.Stream

    def stream(self, stream):
        if self._name != "cuda":
            raise NotImplementedError("get_accelerator().stream: the CPU "
                                      "has no streams")
        return torch.cuda.stream(stream)

    def current_stream(self, device_index=None):
        if self._name != "cuda":
            raise NotImplementedError("get_accelerator().current_stream: "
                                      "the CPU has no streams")
        return torch.cuda.current_stream(device_index)

    @property
    def Event(self):
        if self._name != "cuda":
            raise NotImplementedError("get_accelerator().Event: the CPU has "
                                      "no events")
        return torch.cuda.Event

    # --- tensor types -----------------------------------------------------------
    def FloatTensor(self, *args):
        return torch.FloatTensor(*args).to(self.device_name())

    def BFloat16Tensor(self, *args):
        return torch.BFloat16Tensor(*args).to(self.device_name())

    def HalfTensor(self, *args):
        return torch.HalfTensor(*args).to(self.device_name())

    def LongTensor(self, *args):
        return torch.LongTensor(*args).to(self.device_name())

    def IntTensor(self, *args):
        return torch.IntTensor(*args).to(self.device_name())

    def amp(self):
        return torch.cuda.amp if self._name == "cuda" else torch.cpu.amp

    def __repr__(self):
        return f"<zeroshard accelerator {self._name}>"


_current = None


def get_accelerator():
    global _current
    if _current is None:
        want = os.environ.get("DS_ACCELERATOR", "")
        if want not in ("", "cpu", "cuda"):
            raise ValueError(f"DS_ACCELERATOR={want!r}: this build runs "
                             "\"cpu\" or \"cuda\"")
        if want == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("DS_ACCELERATOR=cuda but torch sees no GPU")
        if not want:
            want = "cuda" if torch.cuda.is_available() else "cpu"
        _current = _Accelerator(want)
    return _current


def set_accelerator(accel_obj):
    global _current
    if not isinstance(accel_obj, _Accelerator):
        raise TypeError("set_accelerator: take one from get_accelerator()")
    _current = accel_obj


def is_current_accelerator_supported():
    return True
