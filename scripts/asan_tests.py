#!/usr/bin/env python3
"""Chooses the CTest tests scripts/sanitize.sh runs under ASan + UBSan.

Reads `ctest --show-only=json-v1` on stdin and prints the chosen tests'
numbers, comma-separated, for `ctest -I`. Chosen: every test except

- those labelled multihost, image or bench (the multi-host run in network
  namespaces, the image build, the benchmarks at a tiny size: unchanged
  programs' code paths, timed or deployed), and
- the tests of the scenario programs below, which train whole runs again
  and again (random kills, resumes onto other counts, pod restarts, every
  ZeRO stage, optimizer and example config) through the code that the
  tests kept from them run already: one training run, one cut-and-resumed
  run, the trainer's fault handling, the engine's step and the ctl against
  live servers.

Every test left out here runs in the plain build's CTest.
"""
import json
import re
import sys

SCENARIO_PROGRAMS = {
    "engine_test",
    "engine_model_memory_test",
    "integration_checkpoint_test",
    "integration_connection_fault_test",
    "integration_ctl_snapshot_test",
    "integration_ctl_test",
    "integration_deepspeed_examples_test",
    "integration_estimate_test",
    "integration_fault_injection_test",
    "integration_init_from_test",
    "integration_load_test",
    "integration_metrics_test",
    "integration_pod_mode_test",
    "integration_sample_test",
    "integration_secure_run_test",
    "integration_token_data_run_test",
    "integration_train_fault_test",
    "integration_train_run_test",
}
KEPT = [  # full test names, as regular expressions
    r"TrainRunTest\.LossFallsAndOutputsAreWritten",
    r"ResumeTest\.CutAndResumedRunEqualsTheUninterruptedOneBitForBit",
    r"TrainFaultTest\..*",
    r"EngineStep\..*",
    r"CtlTest\..*",
]
LEFT_OUT_LABELS = {"multihost", "image", "bench"}


def chosen(test):
    labels = set()
    for prop in test.get("properties", []):
        if prop["name"] == "LABELS":
            labels = set(prop["value"])
    if labels & LEFT_OUT_LABELS:
        return False
    command = test.get("command") or [""]
    program = command[0].rsplit("/", 1)[-1]
    return program not in SCENARIO_PROGRAMS or any(
        re.fullmatch(k, test["name"]) for k in KEPT)


def main():
    tests = json.load(sys.stdin)["tests"]
    numbers = [str(i + 1) for i, t in enumerate(tests) if chosen(t)]
    # A scenario program renamed or a kept test gone would silently shrink
    # the run: every name above must still be there.
    programs = {(t.get("command") or [""])[0].rsplit("/", 1)[-1] for t in tests}
    missing = sorted(SCENARIO_PROGRAMS - programs)
    if missing:
        sys.exit("asan_tests: no such test program: " + ", ".join(missing))
    for k in KEPT:
        if not any(re.fullmatch(k, t["name"]) for t in tests):
            sys.exit("asan_tests: no test matches " + k)
    print(",".join(numbers))


if __name__ == "__main__":
    main()
