"""What a zeroshard-train run shows and leaves behind, for a Python loop:
the progress bar on stderr, <out>/metrics.csv and <out>/loss.svg, written
by the launcher's own code (zeroshard._zeroshard.RunRecorder).

    outputs = zeroshard.RunOutputs(engine, "out/torch", total_steps=200,
                                   tokens_per_step=batch * seq)
    for ...:
        ...
        engine.step()
        outputs.after_step(loss)      # records at accumulation boundaries
    print(outputs.finish())           # the plot's path

Only rank 0 records; the other ranks' calls do nothing.
"""

import math
import time

from . import _zeroshard


class RunOutputs:
    def __init__(self, engine, out_dir, total_steps, tokens_per_step=0,
                 title="", every=10, quiet=False, metrics="metrics.csv",
                 plot="loss.svg"):
        self._engine = engine
        self._tokens = tokens_per_step
        self._rec = None
        self._losses = []
        if engine.rank == 0:
            self._rec = _zeroshard.RunRecorder(
                out_dir, total_steps, first_step=engine.global_steps,
                title=title, every=every, quiet=quiet, metrics=metrics,
                plot=plot)
        self._last_step = engine.global_steps
        self._t = time.monotonic()
        self.first_loss = None   # the first and latest step's mean loss
        self.last_loss = None

    @property
    def metrics_path(self):
        return self._rec.metrics_path if self._rec else ""

    def after_step(self, loss, val_loss=None):
        """Call after every engine.step() (or optimizer.step()) with the
        micro-batch's loss; a row is written when an optimizer step was
        made, with the mean loss of its micro-batches. val_loss: a number,
        or a function returning one, called only when a row is written and
        not counted in the step's time."""
        self._losses.append(float(loss))
        e = self._engine
        if e.global_steps == self._last_step:
            return
        seconds = time.monotonic() - self._t
        if callable(val_loss):
            val_loss = val_loss()   # not counted in the step's time
        self._t = time.monotonic()
        mean = sum(self._losses) / len(self._losses)
        self._losses = []
        self._last_step = e.global_steps
        if self.first_loss is None:
            self.first_loss = mean
        self.last_loss = mean
        if self._rec is None:
            return
        norm = e.get_global_grad_norm()
        self._rec.record(
            e.global_steps - 1, mean, seconds,
            tokens_per_s=self._tokens / seconds if seconds > 0 else 0.0,
            loss_scale=e.loss_scale(),
            grad_norm=math.nan if norm is None else norm,
            lr=e._last_lrs[0],
            skipped=e.last_step_skipped(),
            val_loss=math.nan if val_loss is None else float(val_loss))

    def finish(self):
        """Ends the progress line and writes the plot; returns its path."""
        return self._rec.finish() if self._rec else ""
