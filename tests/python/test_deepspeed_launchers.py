"""DeepSpeed-style scripts under the launchers a user starts them with:
zeroshard-launch --deepspeed (the script unedited, `import deepspeed`
through the shim), torchrun against servers given by address (pod mode),
the Kubernetes overlay's example script, trained and resumed, and several
engines in one process sharing the launcher's servers."""

import json
import os
import socket
import subprocess
import sys

import pytest
import torch

import zeroshard.deepspeed as deepspeed

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def launch(tmp_path, *args):
    """zeroshard-launch ARGS in tmp_path (test_launch's, with more time)."""
    from test_launch import launch as run
    return run(tmp_path, *args, timeout=180)


def test_launch_deepspeed_runs_a_deepspeed_script_unedited(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}))
    script = os.path.join(HERE, "ds_script.py")
    r = launch(tmp_path, "--deepspeed", "--workers=2", script, "--deepspeed",
               f"--deepspeed_config={cfg}", str(tmp_path), "3")
    assert r.returncode == 0, r.stderr
    done = json.loads((tmp_path / "done.json").read_text())
    assert done == {"steps": 4, "sum": 8.0, "world": 2, "stage": 0,
                    "clip": 1.0}
    assert float(torch.load(tmp_path / "optimizer.pt")["state"][0]["step"]) == 3
    assert any(n.startswith("step-") for n in os.listdir(tmp_path / "ckpt"))
    # Without --deepspeed nothing named deepspeed is there.
    r = launch(tmp_path, "--workers=1", script, str(tmp_path), "1")
    assert r.returncode != 0
    assert "No module named 'deepspeed'" in r.stderr



def test_torchrun_runs_the_script_against_servers_given_as_addresses(tmp_path):
    # Pod mode: servers started elsewhere (here, by the test), their
    # addresses and credentials in the config; torchrun starts the ranks
    # and sets their environment; `import deepspeed` through SHIM_DIR.
    from zeroshard.local_cluster import LocalCluster
    servers = LocalCluster(2, out_dir=str(tmp_path / "servers"))
    try:
        cfg = tmp_path / "ds.json"
        cfg.write_text(json.dumps({
            "train_micro_batch_size_per_gpu": 4,
            "zero_optimization": {"stage": 2},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "zeroshard": {"servers": servers.addresses,
                          "credentials": servers.credentials}}))
        shim = subprocess.run([sys.executable, "-m", "zeroshard.deepspeed"],
                              capture_output=True, text=True, timeout=60)
        assert shim.returncode == 0, shim.stderr
        assert shim.stdout.strip() == deepspeed.SHIM_DIR
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [shim.stdout.strip(), HERE] +
            [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        script = [os.path.join(HERE, "ds_script.py"), "--deepspeed",
                  f"--deepspeed_config={cfg}", str(tmp_path), "2"]
        if torchrun_works():
            r = subprocess.run(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
                 "--nproc_per_node=2", f"--master_port={port}"] + script,
                env=env, cwd=tmp_path, capture_output=True, text=True,
                timeout=240)
            assert r.returncode == 0, r.stderr[-3000:]
        else:
            # Debian 12's torchrun (torch 1.13 on Python 3.11) stops before
            # starting a rank; the ranks get exactly the environment it gives.
            ranks = [subprocess.Popen(
                [sys.executable] + script, cwd=tmp_path,
                env=dict(env, RANK=str(r), LOCAL_RANK=str(r), GROUP_RANK="0",
                         ROLE_RANK=str(r), WORLD_SIZE="2",
                         LOCAL_WORLD_SIZE="2", ROLE_WORLD_SIZE="2",
                         MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                         TORCHELASTIC_RUN_ID="none"),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for r in range(2)]
            for p in ranks:
                out, err = p.communicate(timeout=240)
                assert p.returncode == 0, err[-3000:]
        done = json.loads((tmp_path / "done.json").read_text())
        assert done["steps"] == 3 and done["world"] == 2 and done["stage"] == 2
        # The servers trained: three optimizer steps on each.
        assert [s["adam_step"] for s in _inspect(servers)] == [3, 3]
    finally:
        servers.stop()


def torchrun_works():
    """Whether this torch's torchrun starts ranks at all (Debian 12's, torch
    1.13 on Python 3.11, fails in Std.from_str before starting any)."""
    from torch.distributed.elastic.multiprocessing.api import Std
    return Std.from_str("0") is not None


def _inspect(servers):
    """zeroshard-ctl inspect --json of the servers: one dict each."""
    r = subprocess.run(
        [os.path.join(os.environ.get("ZEROSHARD_BIN_DIR", ""),
                      "zeroshard-ctl"), "inspect",
         "--servers=" + ",".join(servers.addresses),
         f"--credentials={servers.credentials}", "--json"],
        capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["servers"]


def test_the_kubernetes_overlays_example_script_trains_and_resumes(tmp_path):
    # deploy/k8s/overlays/pytorch's train.py with base's ds_config.json (its
    # server names replaced by the launcher's servers, /ckpt by a folder
    # here): 3 steps, then resumed to 5.
    base = json.load(open(os.path.join(ROOT, "deploy", "k8s", "base",
                                       "ds_config.json")))
    base["zeroshard"]["checkpoint"]["dir"] = str(tmp_path / "ckpt")
    del base["zeroshard"]["servers"]
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps(base))
    script = os.path.join(ROOT, "deploy", "k8s", "overlays", "pytorch",
                          "train.py")
    for steps in (3, 5):
        r = launch(tmp_path, "--deepspeed", "--workers=2", "--servers=2",
                   script, "--deepspeed", f"--deepspeed_config={cfg}",
                   f"--steps={steps}", f"--ckpt={tmp_path / 'ckpt'}")
        assert r.returncode == 0, r.stderr[-3000:]
    steps = sorted(n for n in os.listdir(tmp_path / "ckpt")
                   if n.startswith("step-"))
    assert steps[-2:] == ["step-" + "0" * 19 + "3", "step-" + "0" * 19 + "5"]


@pytest.mark.parametrize("workers", [1, 2])
def test_several_engines_in_one_process_share_the_launchers_servers(
        tmp_path, workers):
    r = launch(tmp_path, f"--workers={workers}",
               os.path.join(HERE, "two_engines_script.py"), str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    for k in range(workers):
        assert (tmp_path / f"ok.{k}").exists()
