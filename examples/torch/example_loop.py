"""The loop both torch examples share: flags, the engine's training loop
over the loader, a validation loss now and then, zeroshard-train's progress
bar, metrics file and loss plot (zeroshard.RunOutputs), and a summary."""

import argparse
import json
import os
import time

import torch

import zeroshard

EVAL_EVERY = 50


def parse_flags(description, default_config, default_out, default_steps):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--config", default=default_config,
                    help="DeepSpeed-style JSON (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=default_steps,
                    help="optimizer steps (default: %(default)s)")
    ap.add_argument("--out", default=default_out,
                    help="metrics.csv, loss.svg and checkpoints (default: %(default)s)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--resume", action="store_true",
                    help="go on from the newest checkpoint in OUT/checkpoints")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error(f"--steps={args.steps}: need at least 1")
    with open(args.config) as f:
        cfg = json.load(f)
    cfg.setdefault("zeroshard", {})["steps"] = args.steps
    return args, cfg


def train(args, cfg, model, dataset, loss_fn, tokens_per_sample, evaluate,
          title):
    """Trains `model` for args.steps optimizer steps; evaluate(engine) gives
    the validation loss. Returns the engine (closed)."""
    engine, _, loader, _ = zeroshard.initialize(
        model=model, model_parameters=model.parameters(),
        training_data=dataset, config=cfg)
    try:
        tokens = (engine.train_micro_batch_size_per_gpu() *
                  engine.gradient_accumulation_steps() * engine.world *
                  tokens_per_sample)
        ckpt = os.path.join(args.out, "checkpoints")
        if args.resume:
            path, _ = engine.load_checkpoint(ckpt)
            if engine.rank == 0:
                print(f"{title}: resumed at step {engine.global_steps} from {path}")
        if engine.global_steps >= args.steps:
            raise SystemExit(f"{title}: the checkpoint is at step "
                             f"{engine.global_steps}: nothing left to do for "
                             f"--steps={args.steps}")
        outputs = zeroshard.RunOutputs(engine, args.out, args.steps,
                                       tokens_per_step=tokens, title=title,
                                       quiet=args.quiet)
        t0 = time.monotonic()
        start = engine.global_steps
        while engine.global_steps < args.steps:
            for x, y in loader:
                loss = loss_fn(engine(x), y)
                engine.backward(loss)
                engine.step()
                n = engine.global_steps
                val = None
                if engine.rank == 0 and (n % EVAL_EVERY == 0 or n == args.steps):
                    val = lambda: evaluate(engine)   # noqa: E731
                outputs.after_step(loss.item(), val_loss=val)
                if engine.global_steps >= args.steps:
                    break
        plot = outputs.finish()
        saved = engine.save_checkpoint(ckpt)
        if engine.rank == 0:
            secs = time.monotonic() - t0
            print(f"{title}: steps {start + 1}-{args.steps} in {secs:.1f} s, loss "
                  f"{outputs.first_loss:.4f} -> {outputs.last_loss:.4f}, "
                  f"validation {evaluate(engine):.4f}")
            print(f"  metrics:    {outputs.metrics_path}\n  plot:       {plot}\n"
                  f"  checkpoint: {saved} (--resume --steps=M goes on from it)")
    finally:
        engine.close()
    return engine


def licenses_corpus():
    """zeroshard-train's built-in corpus: the license texts Debian installs
    in /usr/share/common-licenses, every regular file (no symbolic link) in
    byte-wise name order, each followed by a newline."""
    d = "/usr/share/common-licenses"
    parts = []
    for name in sorted(os.listdir(d), key=os.fsencode):
        p = os.path.join(d, name)
        if os.path.isfile(p) and not os.path.islink(p):
            with open(p, "rb") as f:
                parts.append(f.read() + b"\n")
    return torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8)
