"""zeroshard-launch: N ranks of a script over S servers train as one
data-parallel run (each rank's gradient averaged over ranks, as torch's
DistributedDataParallel does), and a failing rank ends the run naming it."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from test_engine import MUON_PARAMS, batches, fixture_module, make_model

HERE = os.path.dirname(os.path.abspath(__file__))


def child_env():
    env = dict(os.environ)
    paths = [HERE] + [os.path.abspath(p) for p in
                      env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def launch(tmp_path, *args, timeout=120, env=None):
    env = dict(child_env(), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "zeroshard.launch", *args],
        env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=timeout)


@pytest.mark.parametrize("stage", [2, 3])
def test_two_ranks_train_as_one_data_parallel_run(tmp_path, stage):
    steps, world, gas, clip = 3, 2, 2, 0.5
    out = str(tmp_path / "params")
    r = launch(tmp_path, "--workers=2", "--servers=2",
               os.path.join(HERE, "ranks_script.py"), out, str(steps),
               str(gas), str(clip), str(stage))
    assert r.returncode == 0, r.stderr
    got = [torch.load(f"{out}.rank{k}.pt") for k in range(world)]
    for a, b in zip(got[0], got[1]):
        assert torch.equal(a, b)   # every rank holds the same weights
    extra = [torch.load(f"{out}.rank{k}.extra.pt") for k in range(world)]
    if stage == 2:
        # Each rank gathered its half of the new values and the ranks
        # all-gathered the rest: every rank's model holds the servers'
        # weights, and the servers sent each value of the flat layout
        # (padding included) once a step, framing aside, not once a rank.
        for k in range(world):
            for a, b in zip(extra[k]["local"], got[0]):
                assert torch.equal(a.reshape(-1), b.reshape(-1)), k
        values = 4 * extra[0]["total"]
        assert extra[0]["sent"] <= 1.2 * steps * values, (
            extra[0]["sent"], steps * values)

    assert_data_parallel(got[0], steps, world, gas, clip)
    # The host-staged path (CUDA parameters'), forced on CPU ones: the
    # same bits with the ranks' collectives on the host copies.
    r = launch(tmp_path, "--workers=2", "--servers=2",
               os.path.join(HERE, "ranks_script.py"), out + "-staged",
               str(steps), str(gas), str(clip), str(stage),
               env={"ZS_TEST_STAGED": "1"})
    assert r.returncode == 0, r.stderr
    staged = torch.load(f"{out}-staged.rank1.pt")
    for a, b in zip(got[1], staged):
        assert torch.equal(a, b)


@pytest.mark.parametrize("prec", ["bf16", "fp16"])
def test_two_ranks_in_half_precision_hold_the_servers_weights(tmp_path, prec):
    # Each rank gathers its partitions (BF16 from the servers' mirror, FP16
    # as FP32 rounded here) and the ranks all-gather the rest: every rank's
    # model holds the servers' FP32 masters rounded to its dtype.
    out = str(tmp_path / "params")
    r = launch(tmp_path, "--workers=2", "--servers=2",
               os.path.join(HERE, "ranks_script.py"), out, "3", "1", "0.5",
               "2", env={"ZS_TEST_PREC": prec})
    assert r.returncode == 0, r.stderr
    masters = torch.load(f"{out}.rank0.pt")
    dtype = torch.bfloat16 if prec == "bf16" else torch.float16
    for k in range(2):
        local = torch.load(f"{out}.rank{k}.extra.pt")["local"]
        assert len(local) == len(masters) > 0
        for a, m in zip(local, masters):
            assert a.dtype == dtype
            assert torch.equal(a.reshape(-1), m.reshape(-1).to(dtype)), k


def assert_data_parallel(got, steps, world, gas, clip, model=None,
                         data=None, loss_fn=None):
    """`got` equals one process trained over all ranks' micro-batches (by
    default test_engine's model, batches and cross-entropy)."""
    data = data if data is not None else batches(steps * world * gas, 4)
    model = model if model is not None else make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95),
                            eps=1e-8, weight_decay=0.01)
    loss_fn = loss_fn or torch.nn.CrossEntropyLoss()
    for s in range(steps):
        for k in range(world * gas):
            x, y = data[s * world * gas + k]
            (loss_fn(model(x), y) / (world * gas)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
    for a, ref in zip(got, model.parameters()):
        # Summed in another order than torch's accumulation: not bitwise.
        assert torch.allclose(a, ref.detach(), rtol=0, atol=2e-6), (
            (a - ref).abs().max().item())


def test_two_ranks_under_muon_train_as_one_process(tmp_path):
    # Muon for the matrices: the ranks' partitions of each matrix reach
    # the servers as one two-phase commit, so each matrix is updated whole
    # (a one-phase push of a part is refused). Against one process over
    # all ranks' micro-batches with the published step: the ranks sum in
    # another order, so within 5e-6, while Muon's own momentum perturbed
    # is further away than that.
    steps, world, gas, clip = 3, 2, 1, 0.5
    out = str(tmp_path / "params")
    r = launch(tmp_path, "--workers=2", "--servers=2",
               os.path.join(HERE, "ranks_script.py"), out, str(steps),
               str(gas), str(clip), "2", env={"ZS_TEST_MUON": "1"})
    assert r.returncode == 0, r.stderr
    got = torch.load(f"{out}.rank0.pt")
    muon_step = fixture_module("make_muon_golden").muon_step

    def reference(momentum):
        data = batches(steps * world * gas, 4)
        model = make_model()
        matrices = [model[0].weight, model[3].weight]
        rest = [p for p in model.parameters()
                if all(p is not m for m in matrices)]
        adam = torch.optim.AdamW(rest, lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                                 weight_decay=0.0)
        bufs = [torch.zeros_like(m) for m in matrices]
        loss_fn = torch.nn.CrossEntropyLoss()
        for s in range(steps):
            for k in range(world * gas):
                x, y = data[s * world * gas + k]
                (loss_fn(model(x), y) / (world * gas)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with torch.no_grad():
                for p, b in zip(matrices, bufs):
                    muon_step(p, p.grad.clone(), b, MUON_PARAMS["lr"],
                              momentum, MUON_PARAMS["weight_decay"], True)
                    p.grad = None
            adam.step()
            adam.zero_grad()
        return [p.detach() for p in model.parameters()]

    for a, ref in zip(got, reference(MUON_PARAMS["momentum"])):
        assert torch.allclose(a, ref, rtol=0, atol=5e-6), (
            (a - ref).abs().max().item())
    other = reference(0.9)
    assert not torch.allclose(got[0], other[0], rtol=0, atol=5e-6)


def test_resume_on_other_server_counts_equals_the_uninterrupted_run(tmp_path):
    script = os.path.join(HERE, "ranks_script.py")
    ckpt = str(tmp_path / "ckpt")
    r = launch(tmp_path, "--workers=2", "--servers=2", script,
               str(tmp_path / "whole"), "4", "1", "0.5", "2",
               env={"ZS_TEST_SAVE": f"{ckpt}:2"})
    assert r.returncode == 0, r.stderr
    for servers in ("3", "1"):
        r = launch(tmp_path, "--workers=2", f"--servers={servers}", script,
                   str(tmp_path / f"resumed{servers}"), "4", "1", "0.5", "2",
                   env={"ZS_TEST_RESUME": ckpt})
        assert r.returncode == 0, r.stderr
        whole = torch.load(str(tmp_path / "whole.rank1.pt"))
        resumed = torch.load(str(tmp_path / f"resumed{servers}.rank1.pt"))
        for a, b in zip(whole, resumed):
            assert torch.equal(a, b), servers

    # zeroshard-launch --max_restarts: rank 1 dies after step 1 (before
    # any checkpoint: the run starts again from step 0), then after step 3
    # (resumed from the checkpoint of step 2); the end is the same bits.
    every = str(tmp_path / "every")
    r = launch(tmp_path, "--workers=2", "--servers=2", "--max_restarts=2",
               script, str(tmp_path / "restarted"), "4", "1", "0.5", "2",
               env={"ZS_TEST_CKPT": f"{every}:2", "ZS_TEST_DIE": "1:1:0,1:3:1"})
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert "rank 1 exited with code 5; restart 1 of 2" in err, err
    assert (f"zeroshard: restart 1: no complete checkpoint in {every} yet: "
            "starting again from step 0") in err, err
    assert "rank 1 exited with code 5; restart 2 of 2" in err, err
    assert (f"zeroshard: restart 2: resumed from {every}/step-"
            f"{2:020d} at step 2") in err, err
    restarted = torch.load(str(tmp_path / "restarted.rank1.pt"))
    for a, b in zip(whole, restarted):
        assert torch.equal(a, b)
    # every_steps checkpointed steps 2 and 4 (keep_last 2).
    assert sorted(os.listdir(every)) == [f"step-{2:020d}", f"step-{4:020d}"]


def server_pid(run_dir, k):
    """The pid of the zeroshard-server writing run_dir's port file k."""
    port_file = f"--port_file={run_dir}/ports/server{k}.port"
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if port_file.encode() in argv:
            return int(pid)
    return None


def wait_for_step(path, step, p, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and p.poll() is None:
        try:
            with open(path) as f:
                if int(f.read() or 0) >= step:
                    return True
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    return False


def test_a_server_killed_under_launch_with_replicas_costs_no_step(tmp_path):
    # zeroshard-launch --replicas=2 (docs/DESIGN.md, "Replicas"): server 1
    # killed after step 2 is replaced at its address and restored by rank 0
    # from a checkpoint; then server 2, which shares slot 1 with it, is
    # killed after step 5. No restart, and the ranks end with the bits of
    # the same launch with no kill.
    steps = 8
    args = ["--workers=2", "--servers=3", "--replicas=2",
            os.path.join(HERE, "ranks_script.py")]
    tail = [str(steps), "1", "0.5", "2"]
    ref_out = str(tmp_path / "ref")
    r = launch(tmp_path, *args, ref_out, *tail,
               env={"ZS_TEST_REPLICAS": "1",
                    "ZS_TEST_CKPT": f"{tmp_path / 'ref-ck'}:0"})
    assert r.returncode == 0, r.stderr
    out, run_dir = str(tmp_path / "run"), str(tmp_path / "servers")
    env = dict(child_env(), ZS_TEST_REPLICAS="1", ZS_TEST_PACE="0.3",
               ZS_TEST_CKPT=f"{tmp_path / 'ck'}:0")
    p = subprocess.Popen(
        [sys.executable, "-m", "zeroshard.launch", f"--out={run_dir}",
         *args[:3], args[3], out, *tail],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        for k, after in ((1, 2), (2, 5)):
            assert wait_for_step(out + ".step", after, p), p.communicate()
            pid = server_pid(run_dir, k)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "server 1 took its copies back" in err, err
    assert "a replacement listens at its address" in err, err
    for k in range(2):
        got, want = (torch.load(f"{o}.rank{k}.pt") for o in (out, ref_out))
        for a, b in zip(got, want):
            assert torch.equal(a, b), k


def test_ranks_making_different_step_counts_are_named(tmp_path):
    t0 = time.monotonic()
    r = launch(tmp_path, "--workers=2", "--servers=1",
               os.path.join(HERE, "ranks_script.py"), str(tmp_path / "p"),
               "2", "1", "0", "2", env={"ZS_TEST_EXTRA_STEP_RANK": "1"})
    assert r.returncode != 0
    assert ("rank 1 called step() for an optimizer step while rank 0 had "
            "finished (engine.close()) after 2 of them") in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60


def test_pod_mode_ranks_join_servers_started_elsewhere(tmp_path):
    from zeroshard.local_cluster import LocalCluster
    servers = LocalCluster(2, out_dir=str(tmp_path / "servers"))
    try:
        env = child_env()
        env.update({"WORLD_SIZE": "2", "ZS_TEST_POD":
                    ",".join(servers.addresses) + ":" + servers.credentials})
        env.pop("ZEROSHARD_SERVERS", None)
        procs = []
        for rank in range(2):
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(HERE, "ranks_script.py"),
                 str(tmp_path / "pod"), "3", "2", "0.5", "2"],
                env=dict(env, RANK=str(rank)), cwd=tmp_path,
                stderr=subprocess.PIPE, text=True))
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
    finally:
        servers.stop()
    got = [torch.load(str(tmp_path / f"pod.rank{k}.pt")) for k in range(2)]
    for a, b in zip(*got):
        assert torch.equal(a, b)
    assert_data_parallel(got[0], 3, 2, 2, 0.5)


def test_a_failing_rank_stops_the_run_and_is_named(tmp_path):
    t0 = time.monotonic()
    r = launch(tmp_path, "--workers=2", "--servers=1",
               os.path.join(HERE, "ranks_script.py"),
               str(tmp_path / "p"), "50", "1", "0", "2", "1", timeout=90)
    assert r.returncode == 3, r.stderr
    assert "rank 1 exited with code 3; stopped the others" in r.stderr
    assert time.monotonic() - t0 < 60
    # With restarts it fails each time: the launcher stops after them.
    r = launch(tmp_path, "--workers=1", "--servers=1", "--max_restarts=1",
               os.path.join(HERE, "ranks_script.py"),
               str(tmp_path / "p"), "50", "1", "0", "2", "0", timeout=90)
    assert r.returncode == 3, r.stderr
    assert "restart 1 of 1" in r.stderr
    assert ("rank 0 exited with code 3; stopped the others after 1 "
            "restart(s)") in r.stderr, r.stderr


def test_bad_counts_are_refused(tmp_path):
    r = launch(tmp_path, "--workers=0", "x.py")
    assert r.returncode == 2 and "--workers=0" in r.stderr
    # The build's bin/zeroshard-launch is the same program.
    from zeroshard.local_cluster import bin_dir
    r = subprocess.run([os.path.join(bin_dir(), "zeroshard-launch"),
                        "--servers=-1", "x.py"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--servers=-1" in r.stderr
