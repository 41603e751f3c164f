"""zeroshard-launch: S shard servers and N ranks of a training script, as
torchrun or the deepspeed launcher start ranks.

    python3 -m zeroshard.launch --workers=2 [--servers=1] train.py ARGS...

Starts the servers (127.0.0.1, port 0, per-run tokens), then N copies of
`python3 train.py ARGS...` with RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, ZEROSHARD_SERVERS, ZEROSHARD_CREDENTIALS and
ZEROSHARD_RUN_ID in their environment; zeroshard.initialize reads them. When
a rank or a server fails, every other process is stopped and the launcher
exits non-zero naming the one that failed; Ctrl-C stops them all.

With --max_restarts=K, a failure instead starts every server and rank
again, up to K times, with ZEROSHARD_RESTART=<n> in the ranks' environment:
zeroshard.initialize then resumes from the newest complete checkpoint in
the config's zeroshard.checkpoint.dir (which zeroshard.checkpoint.every_steps
fills as the run trains) and says which, or says that there is none and
starts again from step 0. The training loop should count with
engine.global_steps (`while engine.global_steps < steps`), so that a
resumed rank does only what is left.
"""

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

from .local_cluster import LocalCluster, _die_with_parent


def _parse(argv):
    ap = argparse.ArgumentParser(
        prog="zeroshard-launch",
        description="Starts zeroshard's shard servers and N ranks of a "
                    "training script that calls zeroshard.initialize.")
    ap.add_argument("--workers", type=int, default=1,
                    help="ranks to start (WORLD_SIZE), >= 1")
    ap.add_argument("--servers", type=int, default=1,
                    help="shard servers to start, >= 1")
    ap.add_argument("--placement", default="host",
                    choices=["host", "pinned", "device"])
    ap.add_argument("--replicas", type=int, default=1, choices=[1, 2],
                    help="the script's zeroshard.replicas: with 2, a server "
                         "that dies while both servers next to it live "
                         "stops nothing")
    ap.add_argument("--max_restarts", type=int, default=0,
                    help="times to start every server and rank again after "
                         "a failure (they resume from the newest complete "
                         "checkpoint in zeroshard.checkpoint.dir)")
    ap.add_argument("--deepspeed", action="store_true",
                    help="run a script written for DeepSpeed unedited: in "
                         "the ranks, `import deepspeed` is zeroshard.deepspeed "
                         "and each gets --local_rank=R first among its "
                         "arguments, as DeepSpeed's launcher passes it")
    ap.add_argument("--master_port", type=int, default=0,
                    help="MASTER_PORT for the ranks' torch.distributed "
                         "(default: a free port)")
    ap.add_argument("--out", default=None,
                    help="directory for the servers' logs, ports and "
                         "credentials (default: a new temporary one)")
    ap.add_argument("script", help="the training script")
    ap.add_argument("args", nargs=argparse.REMAINDER,
                    help="the script's arguments")
    a = ap.parse_args(argv)
    for name, v in (("--workers", a.workers), ("--servers", a.servers)):
        if not 1 <= v <= 4096:
            ap.error(f"{name}={v}: must be in [1, 4096]")
    if not 0 <= a.master_port <= 65535:
        ap.error(f"--master_port={a.master_port}: must be in [0, 65535]")
    if not 0 <= a.max_restarts <= 1000:
        ap.error(f"--max_restarts={a.max_restarts}: must be in [0, 1000]")
    if not os.path.isfile(a.script):
        ap.error(f"{a.script}: no such file")
    return a


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _how(rc):
    return f"killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"


def _run_once(a, attempt, run_id, stop):
    """Starts the servers and the ranks once; returns (exit code, what
    failed or None). `stop()` says whether a signal asked to stop."""
    out = a.out
    if out is not None and attempt > 0:
        out = os.path.join(out, f"restart-{attempt}")
    servers = LocalCluster(a.servers, placement=a.placement, out_dir=out,
                           replicas=a.replicas)
    print(f"zeroshard-launch: {a.servers} server(s) at "
          f"{','.join(servers.addresses)} (logs in {servers.out_dir}/logs); "
          f"inspect: zeroshard-ctl inspect --servers="
          f"{','.join(servers.addresses)} --credentials={servers.credentials}",
          file=sys.stderr)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    # --deepspeed: the shim that makes `import deepspeed` zeroshard's, in
    # the ranks only.
    front = [os.path.join(here, "zeroshard", "_shim")] if a.deepspeed else []
    # (zeroshard.deepspeed.SHIM_DIR, without importing torch here)
    env["PYTHONPATH"] = os.pathsep.join(
        front + [here] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                          else []))
    env.update({
        "WORLD_SIZE": str(a.workers),
        "LOCAL_WORLD_SIZE": str(a.workers),
        "LOCAL_SIZE": str(a.workers),   # DeepSpeed's launcher's name
        # torchrun's rendezvous for the script's own torch.distributed.
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(a.master_port or _free_port()),
        "ZEROSHARD_SERVERS": ",".join(servers.addresses),
        "ZEROSHARD_CREDENTIALS": servers.credentials,
        "ZEROSHARD_RUN_ID": run_id,
        "ZEROSHARD_RESTART": str(attempt),
    })
    ranks = []
    rc, failed = 0, None
    try:
        for r in range(a.workers):
            e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
            first = [f"--local_rank={r}"] if a.deepspeed else []
            ranks.append(subprocess.Popen(
                [sys.executable, a.script] + first + a.args, env=e,
                start_new_session=True, preexec_fn=_die_with_parent))
        while True:
            if stop():
                rc = 128 + int(stop())
                break
            codes = [p.poll() for p in ranks]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                r, c = bad[0]
                failed = f"rank {r} {_how(c)}"
                rc = c if c > 0 else 128 - c
                break
            if all(c == 0 for c in codes):
                break
            try:
                servers.check_alive()
            except RuntimeError as err:
                failed = str(err)
                rc = 1
                break
            time.sleep(0.05)
    finally:
        for p in ranks:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 10
        for p in ranks:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        servers.stop()
    return rc, failed


def main(argv=None):
    a = _parse(sys.argv[1:] if argv is None else argv)
    run_id = os.environ.get("ZEROSHARD_RUN_ID") or secrets.token_hex(8)
    interrupted = False

    def on_signal(signum, frame):
        nonlocal interrupted
        del frame
        interrupted = signum

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT,
                                                    signal.SIGTERM)}
    try:
        attempt = 0
        while True:
            rc, failed = _run_once(a, attempt, run_id, lambda: interrupted)
            if interrupted:
                print(f"zeroshard-launch: signal {interrupted}: stopped "
                      "every rank and server", file=sys.stderr)
                return 128 + int(interrupted)
            if failed is None:
                return rc
            if attempt >= a.max_restarts:
                tail = (f" after {attempt} restart(s)" if attempt else "")
                print(f"zeroshard-launch: {failed}; stopped the others"
                      f"{tail}", file=sys.stderr)
                return rc
            attempt += 1
            print(f"zeroshard-launch: {failed}; restart {attempt} of "
                  f"{a.max_restarts}: every server and rank starts again, "
                  "and the ranks resume from the newest complete checkpoint "
                  "in zeroshard.checkpoint.dir", file=sys.stderr)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


if __name__ == "__main__":
    sys.exit(main())
