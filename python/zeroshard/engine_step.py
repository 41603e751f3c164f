"""The engine's optimizer step (mixed into ZeroshardEngine): the ranks'
agreement on the step, the gradient made ready (torch's clipping
coefficient for one rank, the ranks' reduce-scatter and global norm
otherwise), the push to the servers with the groups' settings, the
two-phase commit, and the timing of each phase."""

import math
import time

import torch

from . import _zeroshard


def _max_abs(t, chunk=1 << 22):
    """The largest magnitude in the 1-D t (NaN or Inf where it holds one),
    a chunk at a time (no copy of t's whole size)."""
    m = 0.0
    for at in range(0, t.numel(), chunk):
        x = float(t[at:at + chunk].abs().max())
        if not math.isfinite(x):
            return x
        m = max(m, x)
    return m


# The servers refuse a gradient that the coefficient scales past 2^60
# (its square would overflow Adam's second moment: optim/grad_scan.h).
_MAX_SCALED_GRAD = 2.0 ** 60


class StepApi:
    """Mixed into ZeroshardEngine; see the module docstring."""

    def _clip_coefficient(self):
        # torch.nn.utils.clip_grad_norm_ (norm_type 2) over
        # model.parameters(), op for op and in that order (the norms'
        # sum depends on it), so the coefficient has its bits; BF16
        # gradients are normed in FP32, as the servers see them.
        grads = [self._flat_grad[off:off + n].view(self._shapes[id(p)]).float()
                 for p, off, n in self._norm_slots]
        if self._clip <= 0:
            return 1.0, None
        norms = [torch.norm(g.detach(), 2.0) for g in grads]
        total = torch.norm(torch.stack(norms), 2.0)
        coef = self._clip / (total + 1e-6)
        coef = torch.clamp(coef, max=1.0)
        return float(coef), float(total)

    def _check_ranks_agree(self, closing=False):
        """Every rank is at the same optimizer step, about to make it (or,
        from close(), finished at it). A rank that called step() more or
        fewer times meets the others here, and every rank raises, naming
        one of each side."""
        if self._group is None:
            return
        g = float(self.global_steps)
        r = float(self.rank)
        hi, neg_lo, closer, stepper = self._group.all_reduce(
            [g, -g, r if closing else -1.0, -1.0 if closing else r], "max")
        lo = -neg_lo
        if closer >= 0 and stepper >= 0:
            raise RuntimeError(
                f"rank {int(stepper)} called step() for an optimizer step "
                f"while rank {int(closer)} had finished (engine.close()) "
                f"after {int(lo)} of them: every rank must call step() the "
                "same number of times")
        if hi != lo:
            raise RuntimeError(
                f"rank {self.rank}: the ranks are at optimizer steps "
                f"{int(lo)} to {int(hi)} (this one at {self.global_steps}): "
                "every rank must call step() the same number of times")

    def _mark(self, phase):
        # Ends `phase` of the optimizer step being timed (step_breakdown).
        now = time.perf_counter()
        self._breakdown[phase] = self._breakdown.get(phase, 0.0) + (
            now - self._mark_at) * 1e3
        self._mark_at = now

    def step_breakdown(self):
        """Where the last optimizer step's time went, in milliseconds, by
        phase: "grad" (its gradient made ready: the last units' hooks, a
        device's copy down, the ranks' reduce-scatter and norm), "push"
        (sent to the servers; one rank's is also applied there), "commit"
        (ranks: every rank's part held on the servers, then rank 0's apply
        of them all), "gather" (the new values back, and the ranks'
        all-gather of the rest) and "total". Empty before the first."""
        return dict(self._last_breakdown)

    def _optimizer_step(self):
        self._breakdown = {}
        self._mark_at = start = time.perf_counter()
        self._check_ranks_agree()
        self._attach()
        if self._servers is not None:
            self._servers.check_alive()
        if self._hooks is not None:
            self._hooks.flush()
        # The groups' hyper-parameters now (checked before anything is sent).
        self._settings = self._step_settings()
        self._last_lrs = self.get_lr()
        if self.rank == 0:
            # With replicas: the copies' comparison started after the last
            # step, heard before anything of this one is applied.
            self._cluster.audit_finish()
        if self._group is None and self._prec != "fp16":
            self._push_exact()
        else:
            self._push_scaled()
        self.global_steps += 1
        self._after_step(not self._last_skipped)
        self._gather()
        self._zero_grads()
        self._has_grads = False
        self._mark("gather")
        self._breakdown["total"] = (time.perf_counter() - start) * 1e3
        self._last_breakdown = self._breakdown

    def _push_exact(self):
        # One rank, FP32 or BF16: the whole gradient, with torch's clipping
        # coefficient bit for bit.
        coefficient, norm = self._clip_coefficient()
        self._last_norm = norm
        if norm is None:
            big = _max_abs(self._flat_grad)
            skip = not math.isfinite(big)
            # Every piece passes the servers' checks: they may apply each
            # as it arrives (clipped, no scaled element exceeds the clip).
            known = skip or big * coefficient <= _MAX_SCALED_GRAD
        else:
            skip = not math.isfinite(norm)
            known = skip or norm * coefficient <= _MAX_SCALED_GRAD
        apply = self._scaler.update(skip)
        self._last_skipped = not apply
        grad = self._flat_grad
        if self._staged and not self._stage3:   # stage 3's is on the host
            self._host_grad.copy_(grad)   # down from the device
            grad = self._host_grad
        self._mark("grad")
        self._cluster.push(self.global_steps, 0, [(0, self._total)],
                           self._wire, self._np(grad),
                           coefficient=coefficient if apply else 0.0,
                           skip=not apply, known=known,
                           settings=self._settings)
        self._mark("push")

    def _push_scaled(self):
        # Ranks, or FP16: the gradient in FP32 (averaged over ranks and
        # reduce-scattered unit by unit into this rank's partitions, the
        # layout's worker ranges); the global norm from the sums of squares
        # in double, the loss scale removed and the clipping applied in one
        # coefficient (common/grad_clip.h), as the C++ worker does; an
        # overflow skips the step and moves the loss scale.
        if self._stage3 and self._group is not None:
            payload, ranges, worker = self._part_grad, self._my_ranges, self.rank
        elif self._dprotocol is not None:
            # CUDA over NCCL: reduce-scattered on the device, then this
            # rank's partitions copied down.
            grad = self._flat_grad.float().contiguous()
            part = torch.empty(self._my_elems, dtype=torch.float32,
                               device=self._device)
            self._dprotocol.reduce_scatter_device(
                self._layout, grad.data_ptr(), grad.numel(),
                part.data_ptr(), part.numel(), 1.0 / self.world)
            payload = torch.empty(self._my_elems, dtype=torch.float32,
                                  pin_memory=True)
            payload.copy_(part)
            ranges, worker = self._my_ranges, self.rank
        elif self._group is not None:
            if self._staged:
                # Down from the device; the ranks' Gloo collectives run on
                # the host copy.
                self._host_grad.copy_(self._flat_grad)
                grad = self._host_grad.float()
            else:
                grad = self._flat_grad.float()
            payload = torch.empty(self._my_elems, dtype=torch.float32)
            self._protocol.reduce_scatter(self._layout, grad.numpy(),
                                          payload.numpy(), 1.0 / self.world)
            ranges, worker = self._my_ranges, self.rank
        elif self._staged and not self._stage3:
            self._host_grad.copy_(self._flat_grad)   # FP32 on the host
            payload = self._host_grad
            ranges, worker = [(0, self._total)], 0
        else:
            payload = self._flat_grad.float()
            ranges, worker = [(0, self._total)], 0
        # The ranks' one decision from their sums of squares (all-reduced),
        # the loss scale and the clipping (step/step_protocol.h).
        sumsq = float(payload.double().square().sum())
        d = self._protocol.decide(sumsq, 1.0, self._clip, self._scaler)
        self._last_norm = None if d.overflow else d.norm
        self._last_skipped = d.skip
        # Ranks commit in two phases, as zeroshard-train's workers do: each
        # rank's part is held on the servers until all are (the barrier),
        # then rank 0 applies them as one commit, so that a rule updating
        # whole tensors (Muon) has all of a matrix's gradient at once.
        self._mark("grad")
        self._cluster.push(self.global_steps, worker, ranges, "fp32",
                           payload.numpy(), coefficient=d.coefficient,
                           skip=d.skip, prepare=self._protocol.two_phase,
                           settings=self._settings)
        self._mark("push")
        if self._protocol.two_phase:
            self._protocol.commit(self.global_steps)
            self._mark("commit")
