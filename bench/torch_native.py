"""torch-native: the native trainer (zeroshard-train: its servers and its C++
worker, the BF16 path) against the same GPT trained by plain torch with
BF16 autocast in this process, on the same cores, in the same run: the
project's own rerunnable form of the comparison of docs/BENCHMARKS.md.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_native.py [--smoke]
        [--shape=demo|wide|both] [--cluster=1x1|2x2] [--reps=R]
        [--arch=gpt2|llama]

Shapes: "demo", the main job's model (4 layers, 4 heads, width 128,
context 128, batch 16) and "wide" (8 layers × 512, context 256, batch 4);
byte vocabulary (256). The native side runs `zeroshard-train` on
examples/gpt-small.json with the shape put in (its embedded corpus, BF16,
no activation checkpointing, validation only after the last step) and
reads its tokens/s from metrics.csv, the median of the steps after the
first few. The torch side is examples/torch/train_gpt.py's GPT under
torch.autocast(cpu, bfloat16) with FP32 parameters and
torch.optim.AdamW(foreach=True), the same hyperparameters and clipping at
1.0, on random tokens (the data does not change a step's time), torch's
threads set to the cores, glibc's allocator told to keep its memory and
OpenBLAS single-threaded under torch's threads (set here by re-executing
when absent) — a user's tuned loop. The sides alternate R times; each
side's best is kept.

With --arch=llama both sides train a Llama instead (examples/llama-small.json
on the native side; bench/torch_llama.py, Hugging Face's eager
LlamaForCausalLM in plain torch, on the torch side): key/value heads half
the heads, the MLP 2.5 x width, an untied head; the target is then 1.2.

Prints one line per shape and ends with "torch-native ratio=X target=T":
the native tokens/s over torch's, the lower over the shapes measured.
"""

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from torch_tuning import run_tuned

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SHAPES = {
    # name: (layers, heads, width, context, batch, native steps)
    "demo": (4, 4, 128, 128, 16, 40),
    "wide": (8, 8, 512, 256, 4, 16),
}
SMOKE = (2, 2, 64, 32, 2, 6)
SKIP = 3  # first steps of either side not counted (allocation, warm-up)


def parse(argv):
    ap = argparse.ArgumentParser(prog="torch_native.py")
    ap.add_argument("--shape", default="both", choices=["demo", "wide", "both"])
    ap.add_argument("--cluster", default="1x1", choices=["1x1", "2x2"],
                    help="the native side's servers x workers")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"])
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny shape, one rep: checks that it runs")
    a = ap.parse_args(argv)
    if a.reps < 1:
        ap.error(f"--reps={a.reps}: must be >= 1")
    return a


def bin_dir():
    d = os.environ.get("ZEROSHARD_BIN_DIR") or os.path.join(ROOT, "build", "bin")
    if not os.path.exists(os.path.join(d, "zeroshard-train")):
        sys.exit(f"torch_native.py: no zeroshard-train in {d} (build it, or "
                 "set ZEROSHARD_BIN_DIR)")
    return d


def llama_dims(width, heads):
    """The Llama's key/value heads and MLP width for a shape."""
    return max(1, heads // 2), (5 * width // 2 + 63) // 64 * 64


def native_tokens_per_s(shape, cluster, work, arch):
    """zeroshard-train on the shape; the median tokens/s of its steps after
    the first SKIP, from metrics.csv."""
    layers, heads, width, context, batch, steps = shape
    servers, workers = (int(n) for n in cluster.split("x"))
    example = "llama-small.json" if arch == "llama" else "gpt-small.json"
    with open(os.path.join(ROOT, "examples", example)) as f:
        cfg = json.load(f)
    cfg["train_batch_size"] = batch
    cfg["train_micro_batch_size_per_gpu"] = batch // workers
    cfg["gradient_accumulation_steps"] = 1
    z = cfg["zeroshard"]
    z["model"] = {"layers": layers, "heads": heads, "width": width,
                  "vocab": 256, "context": context}
    if arch == "llama":
        kv_heads, mlp = llama_dims(width, heads)
        z["model"].update({"arch": "llama", "kv_heads": kv_heads, "mlp_width": mlp})
    z["activation_checkpointing"] = {"policy": "none"}
    z["data"]["eval_every_steps"] = steps + 1
    z["plot"] = ""
    path = os.path.join(work, "native.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    out = os.path.join(work, "native")
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run(
        [os.path.join(bin_dir(), "zeroshard-train"), f"--config={path}",
         f"--steps={steps}", f"--servers={servers}", f"--workers={workers}",
         f"--out={out}", "--quiet", "--sample=false"],
        capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"torch_native.py: zeroshard-train failed:\n{r.stderr[-3000:]}")
    with open(os.path.join(out, "metrics.csv")) as f:
        rates = [float(row["tokens_per_s"]) for row in csv.DictReader(f)]
    rates = rates[SKIP:] if len(rates) > SKIP else rates
    return statistics.median(rates)


def torch_tokens_per_s(shape, torch, make_model):
    """The same model in torch: BF16 autocast, AdamW(foreach), clip 1.0;
    the median tokens/s of the steps after the first SKIP."""
    layers, heads, width, context, batch, steps = shape
    torch.manual_seed(0)
    model = make_model(layers, heads, width, context)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95),
                            eps=1e-8, weight_decay=0.01, foreach=True)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (batch, context), generator=g)
    y = torch.randint(0, 256, (batch, context), generator=g)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(x)
        loss = torch.nn.functional.cross_entropy(
            logits.float().view(-1, 256), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    times = times[SKIP:] if len(times) > SKIP else times
    return batch * context / statistics.median(times)


def main(argv):
    run_tuned()
    a = parse(argv)
    sys.path.insert(0, os.path.join(ROOT, "examples", "torch"))
    import torch
    from train_gpt import GPT
    from torch_llama import Llama
    torch.set_num_threads(os.cpu_count() or 1)
    if a.arch == "llama":
        def make_model(layers, heads, width, context):
            kv_heads, mlp = llama_dims(width, heads)
            return Llama(256, width, layers, heads, kv_heads, mlp)
    else:
        def make_model(layers, heads, width, context):
            return GPT(256, context, width, layers, heads)

    if a.smoke:
        shapes = [("smoke", SMOKE)]
        reps = 1
    else:
        names = ["demo", "wide"] if a.shape == "both" else [a.shape]
        shapes = [(n, SHAPES[n]) for n in names]
        reps = a.reps
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f
                       if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"torch-native: {a.arch}, {cpu}, {os.cpu_count()} CPUs, torch "
          f"{torch.__version__}, native {a.cluster} (servers x workers), "
          f"{reps} alternations, best of each")
    ratios = []
    work = tempfile.mkdtemp(prefix="torch_native_")
    try:
        for name, shape in shapes:
            native, theirs = [], []
            for _ in range(reps):
                native.append(native_tokens_per_s(shape, a.cluster, work, a.arch))
                theirs.append(torch_tokens_per_s(shape, torch, make_model))
            ratio = max(native) / max(theirs)
            ratios.append(ratio)
            layers, heads, width, context, batch, _ = shape
            print(f"  {name}: {layers} x {width}, T {context}, batch {batch}: "
                  f"native {max(native):.0f} tokens/s "
                  f"({', '.join(f'{v:.0f}' for v in native)}), torch BF16 "
                  f"autocast {max(theirs):.0f} "
                  f"({', '.join(f'{v:.0f}' for v in theirs)}): {ratio:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    target = 1.2 if a.arch == "llama" else 1.5
    print(f"torch-native ratio={min(ratios):.2f} target={target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
