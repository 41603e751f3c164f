"""torch-memory: the peak RSS of one rank of a torch model under ZeRO-3
(1 rank, 1 local server) against what `zeroshard-ctl estimate` says for
the same shape, stage, precision and micro-batch.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_memory.py [--smoke]
        [--precision=fp32|bf16] [--layers=8 --width=512 --heads=8
         --context=128 --batch=1]

The rank runs in a child process of its own. Its fixed part, the RSS of a
process that has imported torch and zeroshard and run one small product,
is measured there first and handed to the estimate as --worker_base_mib,
so that the comparison is about what the model adds: its partition and
gradient (the estimate's model-state terms), gathered units and
activations. The model is examples/torch/train_gpt.py's GPT with its
embedding tied to the head; at the default shape (25 M parameters, batch 1)
model state is most of what it adds, where the estimate's activation terms,
written for zeroshard's own worker, would not fit torch's autograd.

Ends with "torch-memory ratio=X target=0.85..1.15" (measured peak over the
estimate's total), after the added bytes' own ratio. --malloc=default runs
the rank under glibc's default allocator instead, whose dynamic mmap
threshold keeps freed unit buffers in its arenas (a higher peak).
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse(argv):
    ap = argparse.ArgumentParser(prog="torch_memory.py")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--malloc", default="returning",
                    choices=["returning", "default"],
                    help="the rank's glibc allocator: returning (freed "
                         "buffers of 1 MiB and more go back to the system, "
                         "MALLOC_MMAP_THRESHOLD_=1048576, as a user short of "
                         "memory runs it) or glibc's default (its dynamic "
                         "threshold keeps freed unit buffers in its arenas)")
    ap.add_argument("--smoke", action="store_true", help="a tiny shape")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.smoke:
        a.layers, a.heads, a.width, a.context, a.batch, a.steps = 2, 2, 64, 32, 2, 2
    for name in ("layers", "heads", "width", "context", "batch", "steps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name}={getattr(a, name)}: must be >= 1")
    return a


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def child(a):
    """The rank: prints {"base_kib", "peak_kib", "params"} as JSON."""
    sys.path.insert(0, os.path.join(ROOT, "examples", "torch"))
    import torch
    import zeroshard
    from train_gpt import GPT
    torch.manual_seed(0)
    # The fixed part: torch, the extension, oneDNN's first product.
    (torch.randn(64, 64) @ torch.randn(64, 64)).sum().item()
    base = status_kib("VmRSS")
    model = GPT(256, a.context, a.width, a.layers, a.heads)
    bf16 = a.precision == "bf16"
    if bf16:
        model = model.to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    cfg = {"train_batch_size": a.batch,
           "train_micro_batch_size_per_gpu": a.batch,
           "gradient_accumulation_steps": 1, "bf16": {"enabled": bf16},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
           # A unit kept only while it computes, one prefetched: what the
           # estimate's worker counts (DeepSpeed's defaults would keep a
           # model this small gathered for the whole step).
           "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0,
                                 "stage3_param_persistence_threshold": 0,
                                 "stage3_prefetch_bucket_size": 1},
           # Each block a unit (FSDP's auto-wrap at a block's size); the
           # root holds the rest, the tied embedding and head together.
           "zeroshard": {"servers": 1, "units": {"min_params": sum(
               p.numel() for p in model.h[0].parameters())}}}
    engine, _, _, _ = zeroshard.initialize(
        model=model, model_parameters=model.parameters(), config=cfg)
    g = torch.Generator().manual_seed(1)
    try:
        for _ in range(a.steps):
            x = torch.randint(0, 256, (a.batch, a.context), generator=g)
            logits = engine(x).float()
            loss = torch.nn.functional.cross_entropy(
                logits.view(-1, 256), x.view(-1))
            engine.backward(loss)
            engine.step()
    finally:
        engine.close()
    print(json.dumps({"base_kib": base, "peak_kib": status_kib("VmHWM"),
                      "params": params}))


def main(argv):
    a = parse(argv)
    if a.child:
        child(a)
        return 0
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child",
         f"--precision={a.precision}", f"--layers={a.layers}",
         f"--heads={a.heads}", f"--width={a.width}",
         f"--context={a.context}", f"--batch={a.batch}",
         f"--steps={a.steps}"],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, **({"MALLOC_MMAP_THRESHOLD_": "1048576"}
                                if a.malloc == "returning" else {})))
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"torch-memory: the rank exited {out.returncode}")
    m = json.loads(out.stdout.strip().splitlines()[-1])
    from zeroshard.local_cluster import bin_dir
    base_mib = m["base_kib"] / 1024
    est = subprocess.run(
        [os.path.join(bin_dir(), "zeroshard-ctl"), "estimate",
         f"--layers={a.layers}", f"--heads={a.heads}", f"--width={a.width}",
         "--vocab=256", f"--context={a.context}", f"--micro_batch={a.batch}",
         "--stage=3", f"--precision={a.precision}", "--workers=1",
         "--servers=1", f"--worker_base_mib={base_mib:.3f}", "--json"],
        capture_output=True, text=True, timeout=60)
    if est.returncode != 0:
        sys.stderr.write(est.stderr)
        raise SystemExit(f"torch-memory: zeroshard-ctl estimate exited "
                         f"{est.returncode}")
    w = json.loads(est.stdout)["zeroshard"]["worker"]["stage3"]
    predicted = w["total_bytes"]
    peak = m["peak_kib"] * 1024
    base = m["base_kib"] * 1024
    mib = 1 << 20
    print(f"torch-memory: GPT {a.layers} layers x width {a.width}, context "
          f"{a.context}, batch {a.batch}, {m['params'] / 1e6:.2f} M params, "
          f"{a.precision}, ZeRO-3, 1 rank, 1 server, {a.steps} steps, "
          f"glibc malloc {a.malloc}")
    print(f"  the rank's fixed part (torch + zeroshard imported): "
          f"{base / mib:.1f} MiB")
    print(f"  peak RSS {peak / mib:.1f} MiB; estimate {predicted / mib:.1f} MiB"
          f" (model state {w['model_state_bytes'] / mib:.1f})")
    for t in w["terms"]:
        print(f"    {t['name']:<32} {t['bytes'] / mib:9.1f} MiB  {t['formula']}")
    added = peak - base
    added_est = predicted - base
    print(f"  added over the fixed part: measured {added / mib:.1f} MiB, "
          f"estimate {added_est / mib:.1f} MiB, ratio "
          f"{added / added_est:.3f}")
    print(f"torch-memory ratio={peak / predicted:.3f} target=0.85..1.15")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
