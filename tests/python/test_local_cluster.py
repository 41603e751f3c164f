"""The embedded servers' directory (zeroshard/local_cluster.py): tokens,
ports and logs in a temporary directory that goes with the servers, kept
with the log of a server that died, and a directory the caller named is
never removed.

    PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python
"""

import os
import shutil
import signal

import pytest

import zeroshard
from zeroshard.local_cluster import LocalCluster
from test_engine import config, make_model


def test_an_engines_own_servers_leave_no_directory_behind():
    model = make_model()
    engine, _, _, _ = zeroshard.initialize(
        model=model, model_parameters=model.parameters(),
        config=config(servers=1))
    out = engine._servers.out_dir
    assert os.path.isfile(os.path.join(out, "logs", "server0.log"))
    assert os.path.isfile(os.path.join(out, "credentials", "admin.token"))
    engine.close()
    assert not os.path.exists(out)


def test_a_dead_servers_log_is_kept_and_named():
    c = LocalCluster(1)
    try:
        os.kill(c.procs[0].pid, signal.SIGKILL)
        c.procs[0].wait(timeout=30)
        with pytest.raises(RuntimeError, match=(
                r"server 0 \(127\.0\.0\.1:\d+\) killed by signal 9: .* "
                r"\(its log: .*/logs/server0\.log\)")):
            c.check_alive()
        c.stop()
        c.stop()   # idempotent: still kept
        assert os.path.isfile(os.path.join(c.out_dir, "logs", "server0.log"))
    finally:
        c.stop()
        shutil.rmtree(c.out_dir, ignore_errors=True)


def test_a_directory_the_caller_names_is_kept(tmp_path):
    c = LocalCluster(1, out_dir=str(tmp_path / "servers"))
    c.stop()
    assert os.path.isfile(tmp_path / "servers" / "logs" / "server0.log")
