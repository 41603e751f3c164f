"""The front-end never hangs and never leaves a secret behind: a stopped
server fails the step within zeroshard.timeouts.step_seconds, naming it;
Ctrl-C interrupts a step blocked on it within about a second; SIGTERM and
an exception in the user's loop clean up as Ctrl-C does (no run directory,
so no token, left on disk). Real processes: the test drives
fault_script.py and does to its server what an operator's mistake would."""

import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def start(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [HERE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "fault_script.py"),
                          *args], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    line = p.stdout.readline()
    assert line.startswith("READY"), line + p.stderr.read()
    _, run_dir, pid = line.split()
    assert os.path.isdir(run_dir)
    return p, run_dir, int(pid)


def finish(p, timeout=30):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def go(p):
    p.stdin.write("go\n")
    p.stdin.flush()


def resume(pid):
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def test_a_stopped_server_fails_the_step_within_the_bound_naming_it():
    p, run_dir, pid = start("train", "2")
    os.kill(pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        go(p)
        rc, out, err = finish(p)
        took = time.monotonic() - t0
    finally:
        resume(pid)
    assert rc != 0
    assert "FAILED after" in out, out + err
    assert took < 2 + 10, took   # the 2 s bound, and the exit's cleanup
    assert "127.0.0.1:" in out, out   # the server is named
    assert not os.path.exists(run_dir), "the run directory was left"


def test_ctrl_c_interrupts_a_step_blocked_on_a_stopped_server():
    p, run_dir, pid = start("train", "60")
    os.kill(pid, signal.SIGSTOP)
    try:
        go(p)
        time.sleep(1.0)   # blocked in the push by now
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        rc, out, err = finish(p)
        took = time.monotonic() - t0
    finally:
        resume(pid)
    assert "INTERRUPTED after" in out, out + err
    assert rc != 0 and "KeyboardInterrupt" in err
    # Interrupted at once; the exit stops the stopped server (SIGTERM, then
    # SIGKILL after 5 s) and removes the run directory.
    assert took < 5 + 5, took
    assert not os.path.exists(run_dir), "the run directory was left"


@pytest.mark.parametrize("how", ["sigterm", "exception"])
def test_sigterm_and_an_exception_clean_up(how):
    p, run_dir, pid = start("raise" if how == "exception" else "train")
    if how == "sigterm":
        go(p)
        time.sleep(0.5)   # training
        p.send_signal(signal.SIGTERM)
    else:
        go(p)
    rc, out, err = finish(p)
    assert rc == (128 + signal.SIGTERM if how == "sigterm" else 1), (rc, err)
    if how == "exception":
        assert "the user's loop failed" in err
    assert not os.path.exists(run_dir), "the run directory was left"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)   # the server is gone too
