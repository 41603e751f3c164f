"""replicas: the main job's step with zeroshard.replicas 2 (each server also
keeps a copy of the slot before its own; every worker pushes its gradient to
both copies and every update runs twice) beside the same job with one copy,
in the same run on the same cores: docs/DESIGN.md, "Replicas".

    ZEROSHARD_BIN_DIR=build/bin /usr/bin/python3 bench/replicas.py [--smoke]
        [--steps=N] [--reps=R] [--servers=S] [--workers=N]

Runs `zeroshard-train` on examples/gpt-small.json (its model, corpus and
cluster: 2 servers x 2 workers, BF16, shared memory with the local servers)
for N steps, one copy and two copies alternating R times, and reads each
run's tokens/s from metrics.csv: the median of its steps after the first
few. Each side keeps its best. Ends with "replicas ratio=X target=1.25":
one copy's tokens/s over two copies' (the step's time with replicas over
the step's time without).
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SKIP = 3  # first steps not counted (allocation, warm-up)


def parse(argv):
    ap = argparse.ArgumentParser(prog="replicas.py")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--servers", type=int, default=0,
                    help="servers (0: the example's)")
    ap.add_argument("--workers", type=int, default=0,
                    help="workers (0: the example's)")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny model, few steps, one rep: checks that it runs")
    a = ap.parse_args(argv)
    if a.reps < 1 or a.steps < SKIP + 2:
        ap.error(f"--reps must be >= 1 and --steps >= {SKIP + 2}")
    return a


def bin_dir():
    d = os.environ.get("ZEROSHARD_BIN_DIR") or os.path.join(ROOT, "build", "bin")
    if not os.path.exists(os.path.join(d, "zeroshard-train")):
        sys.exit(f"replicas.py: no zeroshard-train in {d} (build it, or set "
                 "ZEROSHARD_BIN_DIR)")
    return d


def tokens_per_s(cfg, replicas, steps, work):
    """zeroshard-train with `replicas` copies; the median tokens/s of its
    steps after the first SKIP."""
    cfg = json.loads(json.dumps(cfg))
    cfg["zeroshard"]["replicas"] = replicas
    path = os.path.join(work, f"r{replicas}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    out = os.path.join(work, f"r{replicas}")
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run(
        [os.path.join(bin_dir(), "zeroshard-train"), f"--config={path}",
         f"--steps={steps}", f"--out={out}", "--quiet", "--sample=false"],
        capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"replicas.py: zeroshard-train failed:\n{r.stderr[-3000:]}")
    with open(os.path.join(out, "metrics.csv")) as f:
        rates = [float(row["tokens_per_s"]) for row in csv.DictReader(f)]
    return statistics.median(rates[SKIP:])


def main(argv):
    a = parse(argv)
    with open(os.path.join(ROOT, "examples", "gpt-small.json")) as f:
        cfg = json.load(f)
    z = cfg["zeroshard"]
    if a.servers:
        z["servers"] = a.servers
    if a.workers:
        z["workers"] = a.workers
    z["data"]["eval_every_steps"] = a.steps + 1
    z["plot"] = ""
    steps, reps = a.steps, a.reps
    if a.smoke:
        z["model"] = {"layers": 2, "heads": 2, "width": 64, "vocab": 256,
                      "context": 32}
        steps, reps = SKIP + 3, 1
    if z.get("servers", 1) < 2:
        sys.exit("replicas.py: replicas need at least 2 servers")
    m = z["model"]
    print(f"replicas: {m['layers']} x {m['width']}, T {m['context']}, "
          f"{z.get('servers')} servers x {z.get('workers')} workers, "
          f"{steps} steps, {reps} alternations, best of each")
    one, two = [], []
    work = tempfile.mkdtemp(prefix="replicas_")
    try:
        for _ in range(reps):
            one.append(tokens_per_s(cfg, 1, steps, work))
            two.append(tokens_per_s(cfg, 2, steps, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = max(one) / max(two)
    print(f"  one copy {max(one):.0f} tokens/s "
          f"({', '.join(f'{v:.0f}' for v in one)}), two copies "
          f"{max(two):.0f} ({', '.join(f'{v:.0f}' for v in two)})")
    print(f"replicas ratio={ratio:.2f} target=1.25")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
