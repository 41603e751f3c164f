"""zeroshard-launch: S shard servers and N ranks of a training script, as
torchrun or the deepspeed launcher start ranks.

    python3 -m zeroshard.launch --workers=2 [--servers=1] train.py ARGS...

Starts the servers (127.0.0.1, port 0, per-run tokens), then N copies of
`python3 train.py ARGS...` with RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, ZEROSHARD_SERVERS, ZEROSHARD_CREDENTIALS and
ZEROSHARD_RUN_ID in their environment; zeroshard.initialize reads them. When
a rank or a server fails, every other process is stopped and the launcher
exits non-zero naming the one that failed; Ctrl-C stops them all.
"""

import argparse
import os
import secrets
import signal
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
    if not os.path.isfile(a.script):
        ap.error(f"{a.script}: no such file")
    return a


def _how(rc):
    return f"killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"


def main(argv=None):
    a = _parse(sys.argv[1:] if argv is None else argv)
    servers = LocalCluster(a.servers, placement=a.placement, out_dir=a.out)
    print(f"zeroshard-launch: {a.servers} server(s) at "
          f"{','.join(servers.addresses)} (logs in {servers.out_dir}/logs); "
          f"inspect: zeroshard-ctl inspect --servers="
          f"{','.join(servers.addresses)} --credentials={servers.credentials}",
          file=sys.stderr)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [here] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update({
        "WORLD_SIZE": str(a.workers),
        "LOCAL_WORLD_SIZE": str(a.workers),
        "ZEROSHARD_SERVERS": ",".join(servers.addresses),
        "ZEROSHARD_CREDENTIALS": servers.credentials,
        "ZEROSHARD_RUN_ID": os.environ.get("ZEROSHARD_RUN_ID")
                            or secrets.token_hex(8),
    })
    ranks = []
    interrupted = False

    def on_signal(signum, frame):
        nonlocal interrupted
        del frame
        interrupted = signum

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT,
                                                    signal.SIGTERM)}
    rc = 0
    try:
        for r in range(a.workers):
            e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
            ranks.append(subprocess.Popen(
                [sys.executable, a.script] + a.args, env=e,
                start_new_session=True, preexec_fn=_die_with_parent))
        while True:
            if interrupted:
                print(f"zeroshard-launch: signal {interrupted}: stopping "
                      "every rank and server", file=sys.stderr)
                rc = 128 + int(interrupted)
                break
            codes = [p.poll() for p in ranks]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                r, c = failed[0]
                print(f"zeroshard-launch: rank {r} {_how(c)}; stopping the "
                      "others", file=sys.stderr)
                rc = c if c > 0 else 128 - c
                break
            if all(c == 0 for c in codes):
                break
            try:
                servers.check_alive()
            except RuntimeError as err:
                print(f"zeroshard-launch: {err}; stopping every rank",
                      file=sys.stderr)
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
        for s, h in old.items():
            signal.signal(s, h)
    return rc


if __name__ == "__main__":
    sys.exit(main())
