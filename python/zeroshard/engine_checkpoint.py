"""The engine's checkpoints (mixed into ZeroshardEngine): the servers'
coordinated checkpoint with each rank's own state written into it,
restores (whole, or the weights alone), the checkpoints every
zeroshard.checkpoint.every_steps, and the resume after a launcher restart."""

import os
import sys
import threading

import torch

from . import rank_state
from .interruptible import unwrap


def _has_complete_checkpoint(d):
    """Whether d holds a step folder with its manifest (written last)."""
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return False
    return any(n.startswith("step-") and
               os.path.isfile(os.path.join(d, n, "MANIFEST.json"))
               for n in names)


class CheckpointApi:
    """Mixed into ZeroshardEngine; see the module docstring."""

    def _maybe_checkpoint(self):
        if (self._ckpt_dir and self._ckpt_every > 0
                and self.global_steps % self._ckpt_every == 0):
            self.save_checkpoint(self._ckpt_dir, keep_last=self._ckpt_keep)
            self._ckpt_step = self.global_steps
        self._revive_replacements()
        if self._connection[4] >= 2 and self.rank == 0:
            # The servers hold this version until rank 0 applies the next
            # step: the copies are compared meanwhile, every
            # zeroshard.replica_check_every_steps (client/copy_audit.h);
            # _optimizer_step hears the verdict before it pushes.
            self._cluster.audit_start(
                self.global_steps,
                self._cfg["cluster"].get("replica_check_every_steps", 10))

    def _revive_replacements(self):
        """With replicas, after an optimizer step (docs/DESIGN.md,
        "Replicas"): rank 0 looks (at most every 0.25 s) at the servers its
        client left; one that answers again (a replacement at its address,
        or the server back from a partition) catches up while training goes
        on (client/replica_catch_ups.h: the other copies log their pushes
        from this step, a checkpoint of it under checkpoint.dir/catch-up, a
        thread restores and replays), and at a later step, once caught up,
        every rank reaches it again. After 3 failed catch-ups a server takes
        its copies back here, from a checkpoint of this step taken by all
        ranks. One broadcast a step tells the ranks."""
        if self._connection[4] < 2:
            return
        back, now = [], []
        if self.rank == 0 and self._ckpt_dir:
            # The looking thread's answers (a silent address never slows a
            # step), each looked at again now.
            self._start_looking()
            if getattr(self, "_catch_ups", None) is None:
                self._catch_ups = unwrap(self._cluster).catch_ups(
                    os.path.join(self._ckpt_dir, "catch-up"),
                    timeout_s=4 * self._cfg["cluster"]["step_timeout_s"])
            back, _ = self._catch_ups.finish(self.global_steps)
            for k in sorted(self._fresh):
                if (k not in self._cluster.gone_servers()
                        or self._catch_ups.busy(k)
                        or not self._cluster.answers_again(k)):
                    continue
                if self._catch_ups.failures(k) < 3:
                    self._catch_ups.start(k, self.global_steps)
                else:
                    now.append(k)
        if self._group is not None:
            back, now = [[int(k) for k in part.split(",") if k]
                         for part in self._group.broadcast(
                             (",".join(map(str, back)) + ";" +
                              ",".join(map(str, now))).encode(),
                             0).decode().split(";")]
        if now:
            if getattr(self, "_ckpt_step", None) != self.global_steps:
                self.save_checkpoint(self._ckpt_dir,
                                     keep_last=self._ckpt_keep)
                self._ckpt_step = self.global_steps
            if self.rank == 0:
                for k in now:
                    self._cluster.revive_server(k, self._ckpt_dir,
                                                self.global_steps)
                    self._catch_ups.forget_failures(k)
            self._barrier()
        for k in back + now:
            if self.rank == 0:
                print(f"zeroshard: server {k} took its copies back at step "
                      f"{self.global_steps}", file=sys.stderr)
            else:
                self._cluster.mark_server_back(k)
        # A server left lost its region; the one back is a new process.
        if (back or now) and self.shared_memory_servers:
            self._attach_shared_memory()

    def _start_looking(self):
        """Rank 0 with replicas: a thread that asks every 0.25 s each server
        its client left whether it answers again, into self._fresh; stopped by _stop_looking (close)."""
        if getattr(self, "_looking", None) is not None:
            return
        cluster = unwrap(self._cluster)   # thread-safe; frees the GIL
        stop = threading.Event()
        self._fresh = set()

        def look():
            while not stop.wait(0.25):
                self._fresh = {k for k in cluster.gone_servers()
                               if cluster.answers_again(k)}

        t = threading.Thread(target=look, name="zeroshard-replicas",
                             daemon=True)
        self._looking = (t, stop)
        t.start()

    def _stop_looking(self):
        self._catch_ups = None   # stops its threads, drops open logs
        looking = getattr(self, "_looking", None)
        if looking is not None:
            looking[1].set()
            looking[0].join(timeout=5)
            self._looking = None

    def _resume_after_restart(self):
        """After zeroshard-launch restarted the run: the newest complete
        checkpoint in zeroshard.checkpoint.dir, or step 0 when there is
        none, said on rank 0's stderr either way."""
        d = self._ckpt_dir
        found = bool(d) and _has_complete_checkpoint(d)
        if self._group is not None:   # rank 0 decides for every rank
            found = self._group.broadcast(b"1" if found else b"0", 0) == b"1"
        what = f"zeroshard: restart {self.restart}"
        if found:
            path, _ = self.load_checkpoint(d)
            self.resumed_from = path
            msg = f"{what}: resumed from {path} at step {self.global_steps}"
        elif not d:
            msg = (f"{what}: the config has no zeroshard.checkpoint.dir: "
                   "starting again from step 0")
        else:
            msg = (f"{what}: no complete checkpoint in {d} yet: starting "
                   "again from step 0")
        if self.rank == 0:
            print(msg, file=sys.stderr)

    # --- checkpoints --------------------------------------------------------

    def save_checkpoint(self, save_dir, tag=None, client_state=None,
                        save_latest=True, exclude_frozen_parameters=False,
                        keep_last=0):
        """The servers' coordinated checkpoint of the current step in
        save_dir (in save_dir/tag when a tag is given), with the engine's
        own state, each rank's (buffers, frozen parameters unless
        exclude_frozen_parameters, RNG, data position) and client_state
        written into it before the manifest that makes it complete.
        keep_last > 0 prunes all but the newest keep_last complete
        checkpoints there. save_latest: load_checkpoint finds the newest
        complete checkpoint by itself, so no "latest" file is needed."""
        del save_latest
        self._exclude_frozen = bool(exclude_frozen_parameters)
        self._need_open()
        if self.micro_steps % self._gas != 0 or self._pending_grads():
            raise RuntimeError(
                "save_checkpoint inside an accumulation window: its "
                "gradients would be lost; save after engine.step()")
        d = os.path.join(save_dir, str(tag)) if tag is not None else save_dir
        engine_state = {"global_steps": self.global_steps,
                        "micro_steps": self.micro_steps,
                        "skipped_steps": self.skipped_steps,
                        "global_samples": self.global_samples,
                        "loss_scaler": self._scaler.state(),
                        "param_groups": self._group_hypers(),
                        "lr_scheduler": (self.lr_scheduler.state_dict()
                                         if self.lr_scheduler is not None
                                         else None),
                        "client_state": dict(client_state or {}),
                        # The module's names in the flat space, for reading
                        # the masters without servers (checkpoint_io.py).
                        "layout": [(self._names[id(p)], off, n,
                                    list(self._shapes[id(p)]))
                                   for p, off, n in self._slots]}

        def write_states(path):
            # Rank 0, between the shard files and the manifest: every rank
            # writes its file, then rank 0 the engine's.
            if self._group is not None:
                self._group.broadcast(path.encode(), 0)
            self._write_rank_state(path)
            torch.save(engine_state, os.path.join(path, "zeroshard_engine.pt"))
            self._barrier()

        if self.rank == 0:
            os.makedirs(d, exist_ok=True)
            path = self._cluster.checkpoint(
                self.global_steps, d, self._config, keep_last=keep_last,
                before_commit=write_states)
        else:
            path = self._group.broadcast(b"", 0).decode()
            self._write_rank_state(path)
            self._barrier()
        self._barrier()   # committed before any rank goes on
        return path

    def _write_rank_state(self, path):
        os.makedirs(path, exist_ok=True)
        torch.save({"rng": rank_state.rng_state(),
                    "sampler": (self._sampler.state_dict()
                                if self._sampler else None),
                    "buffers": rank_state.buffers_bytes(self.module),
                    "frozen": (None if getattr(self, "_exclude_frozen", False)
                               else rank_state.frozen_bytes(self.module))},
                   os.path.join(path, f"zeroshard_rank{self.rank}.pt"))

    def load_checkpoint(self, load_dir, tag=None, load_module_strict=True,
                        load_optimizer_states=True,
                        load_lr_scheduler_states=True,
                        load_module_only=False, custom_load_fn=None):
        """Restores the servers from load_dir's newest checkpoint (or tag's)
        and the model's weights from them; returns (path, client_state),
        or (None, None) with a warning when there is none, as DeepSpeed.
        load_lr_scheduler_states=False keeps the scheduler and the groups'
        hyper-parameters as they are now. load_module_only=True (or
        load_optimizer_states=False) writes the checkpoint's weights, its
        frozen parameters and buffers into this run and keeps the
        optimizer state and the step count as they are
        (load_optimizer_states=False also takes the scheduler's and the
        groups' saved state, unless load_lr_scheduler_states=False)."""
        self._need_open()
        if custom_load_fn is not None:
            raise NotImplementedError(
                "load_checkpoint(custom_load_fn=...): the servers restore "
                "their own shards")
        d = os.path.join(load_dir, str(tag)) if tag is not None else load_dir
        found = _has_complete_checkpoint(d)
        if self._group is not None:   # rank 0 decides for every rank
            found = self._group.broadcast(b"1" if found else b"0", 0) == b"1"
        if not found:
            if self.rank == 0:
                print(f"zeroshard: load_checkpoint: no complete checkpoint "
                      f"in {d}: nothing loaded", file=sys.stderr)
            return None, None
        if load_module_only or not load_optimizer_states:
            return self._load_weights_only(
                d, strict=load_module_strict,
                scheduler=load_lr_scheduler_states and not load_module_only)
        path = ""
        if self.rank == 0:
            _, path = self._cluster.restore(d)
        if self._group is not None:
            path = self._group.broadcast(path.encode(), 0).decode()
        state = torch.load(os.path.join(path, "zeroshard_engine.pt"))
        own = os.path.join(path, f"zeroshard_rank{self.rank}.pt")
        first = os.path.join(path, "zeroshard_rank0.pt")
        if os.path.exists(first):
            ranks = torch.load(own if os.path.exists(own) else first)
            rank_state.set_rng_state(ranks["rng"])
            if self._sampler is not None and ranks["sampler"] is not None:
                self._sampler.load_state_dict(ranks["sampler"])
            # Buffers: rank 0's on every rank.
            zero = (ranks if self.rank == 0 or not os.path.exists(own)
                    else torch.load(first))
            rank_state.load_buffers(self.module, zero["buffers"])
            if zero.get("frozen") is not None:
                rank_state.load_frozen(self.module, zero["frozen"])
        self.global_steps = state["global_steps"]
        self.micro_steps = state["micro_steps"]
        self.skipped_steps = state.get("skipped_steps", 0)
        self.global_samples = state.get("global_samples", 0)
        self._scaler.restore(state["loss_scaler"])
        if load_lr_scheduler_states:
            self._restore_schedule(state)
        self._gather()
        self._zero_grads()
        self._has_grads = False
        return path, state["client_state"]

    def consolidated_state_dict(self):
        """The servers' FP32 master weights under the module's own names."""
        self._need_open()
        master = torch.empty(self._total, dtype=torch.float32)
        self._cluster.gather([(0, self._total)], "fp32", master.numpy(),
                             min_version=self.global_steps)
        out = {}
        for p, off, n in self._slots:
            out[self._names[id(p)]] = master[off:off + n].view(self._shapes[id(p)]).clone()
        return out
