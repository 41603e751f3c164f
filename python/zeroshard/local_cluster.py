"""Local shard servers for one Python run: the embedded default.

With ``"zeroshard": {"servers": S}`` as a count and no addresses,
``zeroshard.initialize`` starts S ``zeroshard-server`` processes on
127.0.0.1 (port 0, each writes the port it bound), with fresh per-run bearer
tokens, as ``zeroshard-train`` does, and stops them when the engine closes,
at interpreter exit, or when this process dies (PR_SET_PDEATHSIG). Their
tokens, ports and logs go to a temporary directory that goes with them,
unless a server exited on its own: then its log stays, and the error names
it.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import _zeroshard

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # Runs in the child between fork and exec: SIGTERM when the parent dies.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def bin_dir():
    """Where zeroshard-server lives: $ZEROSHARD_BIN_DIR, else inside the
    package (zeroshard/bin/, as pip installs it), else the build tree this
    package was built into (build/python/zeroshard -> build/bin)."""
    d = os.environ.get("ZEROSHARD_BIN_DIR")
    if d:
        return d
    here = os.path.dirname(os.path.abspath(__file__))
    packaged = os.path.join(here, "bin")
    if os.access(os.path.join(packaged, "zeroshard-server"), os.X_OK):
        return packaged
    return os.path.normpath(os.path.join(here, "..", "..", "bin"))


class LocalCluster:
    """S zeroshard-server processes on this machine."""

    def __init__(self, servers, placement="host", out_dir=None,
                 startup_timeout_s=60.0, replicas=1):
        if not isinstance(servers, int) or servers < 1 or servers > 4096:
            raise ValueError(
                f"zeroshard.servers: {servers!r} is not a count in [1, 4096]")
        # With two copies of each slot (zeroshard.replicas), a server that
        # dies while both servers next to it live is no failure.
        self.replicas = replicas
        self._reported = set()
        self._argv = []          # each server's command line
        self.replacements = [0] * servers
        server = os.path.join(bin_dir(), "zeroshard-server")
        if not os.access(server, os.X_OK):
            raise FileNotFoundError(
                f"{server} not found: build the project first (the README's "
                "main or test command), or set ZEROSHARD_BIN_DIR")
        self._owned_dir = out_dir is None
        self._keep_dir = False
        self.out_dir = out_dir or tempfile.mkdtemp(prefix="zeroshard-run-")
        os.makedirs(os.path.join(self.out_dir, "logs"), exist_ok=True)
        os.makedirs(os.path.join(self.out_dir, "ports"), exist_ok=True)
        self.credentials = _zeroshard.make_run_tokens(
            os.path.join(self.out_dir, "credentials"))
        self.procs = []
        self.addresses = []
        try:
            ports = []
            for k in range(servers):
                port_file = os.path.join(self.out_dir, "ports",
                                         f"server{k}.port")
                if os.path.exists(port_file):
                    os.unlink(port_file)
                ports.append(port_file)
                log = open(os.path.join(self.out_dir, "logs",
                                        f"server{k}.log"), "wb")
                argv = [server, "--listen=127.0.0.1:0",
                        f"--server_index={k}", f"--num_servers={servers}",
                        f"--placement={placement}",
                        f"--port_file={port_file}",
                        f"--credentials={self.credentials}"]
                self._argv.append(argv)
                self.procs.append(subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, preexec_fn=_die_with_parent))
                log.close()
            deadline = time.monotonic() + startup_timeout_s
            for k, port_file in enumerate(ports):
                while True:
                    rc = self.procs[k].poll()
                    if rc is not None:
                        raise RuntimeError(
                            f"server {k} exited with code {rc} before it "
                            f"listened: {self._last_line(k)} "
                            f"(its log: {self._log(k)})")
                    port = self._read_port(port_file)
                    if port:
                        self.addresses.append(f"127.0.0.1:{port}")
                        break
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"server {k} did not listen within "
                            f"{startup_timeout_s} s: {self._last_line(k)} "
                            f"(its log: {self._log(k)})")
                    time.sleep(0.02)
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _read_port(path):
        try:
            with open(path) as f:
                text = f.read().strip()
        except FileNotFoundError:
            return None
        return text if text.isdigit() and int(text) > 0 else None

    def _log(self, k):
        return os.path.join(self.out_dir, "logs", f"server{k}.log")

    def _last_line(self, k):
        try:
            with open(self._log(k), "rb") as f:
                lines = f.read().decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else "(its log is empty)"
        except OSError:
            return "(no log)"

    def check_alive(self):
        """Raises naming the first server that has exited; with replicas,
        only once a slot lost both its copies (two neighbours exited)."""
        gone = [p.poll() is not None for p in self.procs]
        n = len(self.procs)
        for k, p in enumerate(self.procs):
            rc = p.poll()
            if (rc is not None and self.replicas > 1 and n > 1
                    and not gone[(k + 1) % n] and not gone[(k - 1) % n]):
                if self.replacements[k] < 3:
                    self._replace(k, rc)
                elif k not in self._reported:
                    self._reported.add(k)
                    print(f"zeroshard: server {k} ({self.addresses[k]}) "
                          f"exited ({rc}); its slots go on from their other "
                          "copies", file=sys.stderr)
                continue
            if rc is not None:
                how = (f"killed by signal {-rc}" if rc < 0
                       else f"exited with code {rc}")
                raise RuntimeError(
                    f"server {k} ({self.addresses[k] if k < len(self.addresses) else '?'}) "
                    f"{how}: {self._last_line(k)} (its log: {self._log(k)})")

    def _replace(self, k, rc):
        """With replicas: server k again at its address (its old log kept
        as server<k>.log.replacedN); rank 0 catches it up from a
        checkpoint when it finds it (docs/DESIGN.md, "Replicas")."""
        self.replacements[k] += 1
        log_path = self._log(k)
        try:
            os.replace(log_path, f"{log_path}.replaced{self.replacements[k]}")
        except OSError:
            pass
        argv = [a if not a.startswith("--listen=")
                else f"--listen={self.addresses[k]}" for a in self._argv[k]]
        with open(log_path, "wb") as log:
            self.procs[k] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, preexec_fn=_die_with_parent)
        print(f"zeroshard: server {k} ({self.addresses[k]}) exited ({rc}); "
              "its slots go on from their other copies, and a replacement "
              "listens at its address", file=sys.stderr)

    def stop(self, timeout_s=5.0):
        """SIGTERM, then SIGKILL after timeout_s; idempotent. Removes the
        directory it made itself, unless a server had exited on its own
        (its log is what tells why)."""
        if any(p.poll() is not None for p in self.procs):
            self._keep_dir = True
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        if self._owned_dir and not self._keep_dir:
            shutil.rmtree(self.out_dir, ignore_errors=True)
