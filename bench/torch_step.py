"""torch-step: one training step of a torch model through zeroshard (1 rank,
1 local server) against the same step with torch's own AdamW in this
process, measured in the same run, alternating, fastest of --reps each.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_step.py [--smoke]
        [--shape=main|optim|both|resnet18] [--precision=fp32|bf16]
        [--stage=1|2|3]

The model is examples/torch/train_gpt.py's GPT. Shapes: "main", the main
job's (4 layers, 4 heads, width 128, context 128, micro-batch 8), and
"optim", one where the optimizer is a large part of the step (8 layers, 8
heads, width 512, context 128, batch 1); or "resnet18", torchvision's
resnet18 (11.2 M parameters, 10 classes) on 64 x 64 images, batch 16, each
module owning parameters a unit (the front-end's default). Both sides clip
at 1.0 and run
AdamW with the same hyperparameters; torch's is tuned as a user who tuned
it would: foreach=True, glibc's allocator told to keep its memory
(MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_) and OpenBLAS single-threaded
under torch's intra-op threads (OPENBLAS_NUM_THREADS=1), set here by
re-executing when absent, so both sides run under them. BF16: zeroshard runs the model in
BF16 (FP32 masters on the server), torch under torch.autocast with FP32
parameters.

Prints each side's step split (forward+backward, optimizer) and ends with
"torch-step ratio=X target=Y" (zeroshard's step time over torch's, for the
last shape measured; each shape's own line first).
"""

import argparse
import os
import statistics
import sys
import time

from torch_tuning import run_tuned

HERE = os.path.dirname(os.path.abspath(__file__))

SHAPES = {
    # name: (layers, heads, width, context, batch, target ratio)
    "main": (4, 4, 128, 128, 8, 1.10),
    "optim": (8, 8, 512, 128, 1, 1.00),
}
SMOKE = (2, 2, 64, 32, 2, 1.10)
# resnet18: (image side, batch, target ratio)
RESNET = (64, 16, 1.10)
RESNET_SMOKE = (32, 2, 1.10)


def parse(argv):
    ap = argparse.ArgumentParser(prog="torch_step.py")
    ap.add_argument("--shape", default="both",
                    choices=["main", "optim", "both", "resnet18"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--stage", type=int, default=2, choices=[1, 2, 3])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--order", default="blocks", choices=["blocks", "alternate"],
                    help="steps of each side in blocks (default) or "
                         "alternating")
    ap.add_argument("--transport", default="shm", choices=["shm", "grpc"],
                    help="the server's bytes through shared memory (the "
                         "default for local servers) or over loopback gRPC")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny shape, 2 reps: checks that it runs")
    a = ap.parse_args(argv)
    if a.reps < 1:
        ap.error(f"--reps={a.reps}: must be >= 1")
    return a


def main(argv):
    run_tuned()
    a = parse(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples", "torch"))
    import torch
    import zeroshard
    from train_gpt import GPT

    torch.set_num_threads(os.cpu_count() or 1)

    def gpt(layers, heads, width, context, batch):
        vocab = 256
        torch.manual_seed(0)
        ref = GPT(vocab, context, width, layers, heads)
        zs_model = GPT(vocab, context, width, layers, heads)
        zs_model.load_state_dict(ref.state_dict())
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, vocab, (batch, context), generator=g)
        y = torch.randint(0, vocab, (batch, context), generator=g)
        # Each block a unit (FSDP's auto-wrap at a block's size); the root
        # holds the rest, the tied embedding and head together.
        units = {"min_params": sum(p.numel() for p in ref.h[0].parameters())}
        what = (f"GPT {layers} layers x width {width}, context {context}, "
                f"batch {batch}")
        return ref, zs_model, x, y.view(-1), units, what

    def resnet(side, batch):
        import torchvision   # Debian's python3-torchvision
        torch.manual_seed(0)
        ref = torchvision.models.resnet18(num_classes=10)
        zs_model = torchvision.models.resnet18(num_classes=10)
        zs_model.load_state_dict(ref.state_dict())
        g = torch.Generator().manual_seed(1)
        x = torch.randn(batch, 3, side, side, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
        return (ref, zs_model, x, y, None,
                f"resnet18 on {side} x {side} images, batch {batch}")

    def measure(name, build, target, reps):
        ref, zs_model, x, y, units, what = build()
        batch = x.shape[0]
        params = sum(p.numel() for p in ref.parameters())
        hyper = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8,
                 "weight_decay": 0.01}
        bf16 = a.precision == "bf16"
        cfg = {
            "train_batch_size": batch, "train_micro_batch_size_per_gpu": batch,
            "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
            "bf16": {"enabled": bf16},
            "optimizer": {"type": "AdamW", "params": dict(
                hyper, betas=list(hyper["betas"]))},
            "zero_optimization": {"stage": a.stage},
            "zeroshard": {"servers": 1, "shared_memory": a.transport == "shm"},
        }
        if units is not None:
            cfg["zeroshard"]["units"] = units
        if bf16:
            zs_model = zs_model.to(torch.bfloat16)
        engine, _, _, _ = zeroshard.initialize(
            model=zs_model, model_parameters=zs_model.parameters(), config=cfg)
        opt = torch.optim.AdamW(ref.parameters(), foreach=True, **hyper)
        zx = x.bfloat16() if bf16 and x.is_floating_point() else x

        def lossf(out):
            return torch.nn.functional.cross_entropy(
                out.float().view(-1, out.shape[-1]), y)

        def zs_step():
            t0 = time.perf_counter()
            loss = lossf(engine(zx))
            engine.backward(loss)
            t1 = time.perf_counter()
            engine.step()
            t2 = time.perf_counter()
            return t2 - t0, t1 - t0, t2 - t1, engine.step_breakdown()

        def torch_step():
            t0 = time.perf_counter()
            if bf16:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    logits = ref(x)
            else:
                logits = ref(x)
            loss = lossf(logits)
            loss.backward()
            t1 = time.perf_counter()
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=False)
            t2 = time.perf_counter()
            return t2 - t0, t1 - t0, t2 - t1

        try:
            for _ in range(2):   # warm-up: allocator, oneDNN, connections
                zs_step()
                torch_step()
            zs, tr = [], []
            if a.order == "alternate":
                for _ in range(reps):
                    zs.append(zs_step())
                    tr.append(torch_step())
            else:
                # Blocks of steps, each side after the other twice: what the
                # server process leaves running after a step (gRPC's
                # threads) does not land in torch's time.
                for half in (reps - reps // 2, reps // 2):
                    zs.extend(zs_step() for _ in range(half))
                    tr.extend(torch_step() for _ in range(half))
        finally:
            shm = engine.shared_memory_servers > 0
            engine.close()
        zbest = min(zs, key=lambda s: s[0])
        tbest = min(tr)
        ratio = zbest[0] / tbest[0]
        print(f"torch-step {name}: {what}, {params / 1e6:.2f} M params, "
              f"{a.precision}, stage {a.stage}, fastest of {reps}, the "
              f"server reached through "
              f"{'shared memory' if shm else 'loopback gRPC'}")
        print(f"  zeroshard: {zbest[0] * 1e3:.1f} ms a step (forward+backward "
              f"{zbest[1] * 1e3:.1f}, step: push, server AdamW, gather "
              f"{zbest[2] * 1e3:.1f}: " + ", ".join(
                  f"{k} {v:.1f}" for k, v in zbest[3].items()
                  if k != "total") + "); median "
              f"{statistics.median(s[0] for s in zs) * 1e3:.1f}")
        print(f"  torch:     {tbest[0] * 1e3:.1f} ms a step (forward+backward "
              f"{tbest[1] * 1e3:.1f}, clip + AdamW(foreach) "
              f"{tbest[2] * 1e3:.1f}); median "
              f"{statistics.median(s[0] for s in tr) * 1e3:.1f}")
        print(f"  optimizer rate: zeroshard {params / zbest[2] / 1e9:.2f} G "
              f"params/s over its whole step phase, torch "
              f"{params / tbest[2] / 1e9:.2f}")
        print(f"torch-step {name} ratio={ratio:.3f} target<={target:.2f}")
        return ratio, target

    import importlib.util
    have_vision = importlib.util.find_spec("torchvision") is not None
    if a.smoke:
        if have_vision:
            measure("smoke resnet18", lambda: resnet(*RESNET_SMOKE[:2]),
                    RESNET_SMOKE[2], reps=2)
        else:
            print("torch-step smoke resnet18: skipped: no torchvision "
                  "(Debian's python3-torchvision)")
        last = measure("smoke", lambda: gpt(*SMOKE[:5]), SMOKE[5], reps=2)
    elif a.shape == "resnet18":
        if not have_vision:
            raise SystemExit("torch-step: --shape=resnet18 needs torchvision "
                             "(Debian's python3-torchvision)")
        last = measure("resnet18", lambda: resnet(*RESNET[:2]), RESNET[2],
                       reps=a.reps)
    else:
        names = ["main", "optim"] if a.shape == "both" else [a.shape]
        for n in names:
            last = measure(n, lambda: gpt(*SHAPES[n][:5]), SHAPES[n][5],
                           reps=a.reps)
    print(f"torch-step ratio={last[0]:.3f} target={last[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
