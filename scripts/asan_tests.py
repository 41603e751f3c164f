#!/usr/bin/env python3
"""Chooses the CTest tests scripts/sanitize.sh runs under ASan + UBSan.

Reads `ctest --show-only=json-v1` on stdin and prints the chosen tests'
numbers, comma-separated, for `ctest -I`. Chosen: every test except

- those labelled multihost, image or bench (the multi-host run in network
  namespaces, the image build, the benchmarks at a tiny size: unchanged
  programs' code paths, timed or deployed), and
- the tests of the scenario programs below that KEPT does not name, which
  train whole runs again and again (random kills, resumes onto other
  counts, pod restarts, every ZeRO stage, optimizer and example config)
  through the code that the kept tests run already: one training run, one
  cut-and-resumed run, the trainer's fault handling, the engine's step and
  the ctl against live servers. integration_test also holds the cluster's
  tests against hostile clients, which are no scenarios: KEPT names them
  too.

Every test left out here runs in the plain build's CTest. The scenario
programs none of whose tests run here are not even built there:
`--unbuilt` prints them, ;-separated, for CMake's ZS_UNBUILT_TESTS, and
CTest lists each as a "<program>_NOT_BUILT" placeholder, never chosen.
"""
import json
import re
import sys

SCENARIO_PROGRAMS = {
    "engine_test",
    "integration_estimate_test",
    "integration_scenario_test",
    "integration_test",
}
KEPT = {  # program: its tests kept, full names as regular expressions
    "engine_test": [r"EngineStep\..*"],
    "integration_test": [
        r"ClusterTest\..*",
        r"HostileClientTest\..*",
        r"CtlTest\..*",
        r"TrainRunTest\.LossFallsAndOutputsAreWritten",
        r"ResumeTest\.CutAndResumedRunEqualsTheUninterruptedOneBitForBit",
        r"TrainFaultTest\..*",
    ],
}
LEFT_OUT_LABELS = {"multihost", "image", "bench"}
NOT_BUILT = "_NOT_BUILT"


def program_of(test):
    """The test's program's name; a placeholder's program for one unbuilt."""
    if test["name"].endswith(NOT_BUILT):  # CTest lists it without a command
        return test["name"][:-len(NOT_BUILT)]
    return (test.get("command") or [""])[0].rsplit("/", 1)[-1]


def chosen(test):
    labels = set()
    for prop in test.get("properties", []):
        if prop["name"] == "LABELS":
            labels = set(prop["value"])
    if labels & LEFT_OUT_LABELS:
        return False
    if test["name"].endswith(NOT_BUILT):
        return False
    program = program_of(test)
    if program not in SCENARIO_PROGRAMS:
        return True
    return any(re.fullmatch(k, test["name"]) for k in KEPT.get(program, []))


def unbuilt():
    """The scenario programs of which no test runs under ASan."""
    return sorted(SCENARIO_PROGRAMS - set(KEPT))


def main():
    if sys.argv[1:] == ["--unbuilt"]:
        print(";".join(unbuilt()))
        return
    tests = json.load(sys.stdin)["tests"]
    numbers = [str(i + 1) for i, t in enumerate(tests) if chosen(t)]
    # A scenario program renamed or a kept test gone would silently shrink
    # the run: every name above must still be there, each kept test in its
    # own program, and a program that runs here must have been built.
    programs = {program_of(t) for t in tests}
    missing = sorted(SCENARIO_PROGRAMS - programs)
    if missing:
        sys.exit("asan_tests: no such test program: " + ", ".join(missing))
    for program, kept in KEPT.items():
        for k in kept:
            if not any(re.fullmatch(k, t["name"]) and program_of(t) == program
                       for t in tests):
                sys.exit("asan_tests: no test of %s matches %s" % (program, k))
    left_unbuilt = unbuilt()
    for t in tests:
        if t["name"].endswith(NOT_BUILT) and program_of(t) not in left_unbuilt:
            sys.exit("asan_tests: %s was not built" % program_of(t))
    print(",".join(numbers))


if __name__ == "__main__":
    main()
