"""torch-ranks: where a training step's time goes when N ranks of a torch
model train through zeroshard, and what the ranks' two-phase commit costs.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_ranks.py [--smoke]
        [--ranks=1,2] [--stage=1|2] [--reps=N] [--min_params=N]

For each rank count, starts `zeroshard-launch --workers=N --servers=1` over
this script, which trains examples/torch/train_gpt.py's GPT (the main job's
shape: 4 layers, width 128, context 128, micro-batch 8; FP32) for 2 + reps
steps on every rank; rank 0 reports the fastest step's split from
engine.step_breakdown():

  grad    the gradient made ready (with ranks: their reduce-scatter over
          Gloo and the norm's all-reduce)
  push    sent to the servers (one rank's is applied there as it arrives;
          ranks' parts are held, prepared)
  commit  ranks only: every rank's part held on the servers (a barrier),
          then rank 0's ApplyPrepared of them all: the two-phase commit
  gather  the new values back: one rank gathers everything; ranks each
          gather their 1/N and all-gather the rest among themselves

Ends with "torch-ranks commit=X ms (Y % of the optimizer step, Z % of the
whole step) at N ranks" for the largest rank count. The ranks, the server and this process share the
machine's cores, so every rank's compute slows as ranks are added: compare
the phases, not the totals.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = (4, 4, 128, 128, 8)          # layers, heads, width, context, batch
SMOKE = (2, 2, 64, 32, 2)
PHASES = ("grad", "push", "commit", "gather")


def parse(argv):
    ap = argparse.ArgumentParser(prog="torch_ranks.py")
    ap.add_argument("--ranks", default="1,2",
                    help="comma-separated rank counts (default 1,2)")
    ap.add_argument("--stage", type=int, default=2, choices=[1, 2])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--min_params", type=int, default=0,
                    help="zeroshard.units.min_params (default: one GPT "
                         "block a unit; 1: every module with parameters "
                         "its own unit, the most units a step walks)")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny shape, 2 reps: checks that it runs")
    ap.add_argument("--as-rank", action="store_true",
                    help=argparse.SUPPRESS)   # what each launched rank runs
    a = ap.parse_args(argv)
    try:
        a.ranks = [int(x) for x in a.ranks.split(",")]
    except ValueError:
        ap.error(f"--ranks={a.ranks}: a comma-separated list of counts")
    if not a.ranks or any(not 1 <= n <= 8 for n in a.ranks):
        ap.error(f"--ranks: each count must be in [1, 8]")
    if a.reps < 1:
        ap.error(f"--reps={a.reps}: must be >= 1")
    return a


def rank_main(a):
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples", "torch"))
    import torch
    import zeroshard
    from train_gpt import GPT

    world = int(os.environ["WORLD_SIZE"])
    # Each rank its share of the cores, as torchrun's ranks would be given.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    layers, heads, width, context, batch = SMOKE if a.smoke else SHAPE
    vocab = 256
    torch.manual_seed(0)
    model = GPT(vocab, context, width, layers, heads)
    cfg = {
        "train_batch_size": batch * world,
        "train_micro_batch_size_per_gpu": batch,
        "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {
            "lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8,
            "weight_decay": 0.01}},
        "zero_optimization": {"stage": a.stage},
        "zeroshard": {"units": {"min_params": a.min_params or sum(
            p.numel() for p in model.h[0].parameters())}},
    }
    engine, _, _, _ = zeroshard.initialize(
        model=model, model_parameters=model.parameters(), config=cfg)
    g = torch.Generator().manual_seed(1 + engine.rank)
    x = torch.randint(0, vocab, (batch, context), generator=g)
    y = torch.randint(0, vocab, (batch, context), generator=g)
    best = None
    try:
        for i in range(2 + a.reps):   # two warm-up steps
            t0 = time.perf_counter()
            loss = torch.nn.functional.cross_entropy(
                engine(x).view(-1, vocab), y.view(-1))
            engine.backward(loss)
            t1 = time.perf_counter()
            engine.step()
            b = engine.step_breakdown()
            b["forward+backward"] = (t1 - t0) * 1e3
            if i >= 2 and (best is None or b["total"] < best["total"]):
                best = b
    finally:
        engine.close()
    if engine.rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print("torch-ranks-result " + json.dumps(
            {"ranks": world, "params": params, "best": best,
             "units": len(engine._layout.units())}), flush=True)
    return 0


def main(argv):
    a = parse(argv)
    if a.as_rank:
        return rank_main(a)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    results = []
    for n in a.ranks:
        cmd = [sys.executable, "-m", "zeroshard.launch", f"--workers={n}",
               "--servers=1", os.path.abspath(__file__), "--as-rank",
               f"--stage={a.stage}", f"--reps={2 if a.smoke else a.reps}",
               f"--min_params={a.min_params}"]
        if a.smoke:
            cmd.append("--smoke")
        r = subprocess.run(cmd, env=env, capture_output=True, text=True,
                           timeout=600)
        line = [l for l in r.stdout.splitlines()
                if l.startswith("torch-ranks-result ")]
        if r.returncode != 0 or not line:
            sys.stderr.write(r.stdout + r.stderr)
            print(f"torch-ranks: the run with {n} ranks failed "
                  f"(exit {r.returncode})", file=sys.stderr)
            return 1
        results.append(json.loads(line[-1].split(" ", 1)[1]))
    shape = SMOKE if a.smoke else SHAPE
    print(f"torch-ranks: GPT {shape[0]} layers x width {shape[2]}, context "
          f"{shape[3]}, micro-batch {shape[4]} a rank, "
          f"{results[0]['params'] / 1e6:.2f} M params in "
          f"{results[0]['units']} units, FP32, stage {a.stage}, "
          f"1 server, rank 0's fastest step of {2 if a.smoke else a.reps} (ms)")
    cols = ("forward+backward",) + PHASES + ("total",)
    print("  ranks " + "".join(f"{c:>18}" for c in cols))
    for r in results:
        b = r["best"]
        print(f"  {r['ranks']:>5} " + "".join(
            f"{b.get(c, 0.0):>18.2f}" for c in cols))
    last = results[-1]["best"]
    commit = last.get("commit", 0.0)
    whole = last["total"] + last["forward+backward"]
    print(f"torch-ranks commit={commit:.2f} ms "
          f"({100.0 * commit / last['total']:.1f} % of the optimizer step, "
          f"{100.0 * commit / whole:.1f} % of the whole step) at "
          f"{results[-1]['ranks']} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
