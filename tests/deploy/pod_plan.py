#!/usr/bin/env python3
"""Reads a rendered zeroshard overlay (kubectl kustomize output, YAML on stdin)
and prints, as JSON, what each pod runs: the server StatefulSet's container
command and replicas, the worker Job's init and main containers and
completions, the ConfigMap's ds_config.json, and the volume mount paths.

tests/deploy/multihost_run.sh starts processes from exactly this plan, so a
flag the manifests give the pods is the flag the processes get.
"""
import json
import sys

import yaml


def container_plan(c):
    return {
        "name": c["name"],
        "command": c.get("command", []) + c.get("args", []),
        "env": {e["name"]: e.get("value") for e in c.get("env", [])
                if "value" in e},
        "env_from_index": [e["name"] for e in c.get("env", [])
                           if "valueFrom" in e],
        "mounts": {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])},
    }


def main():
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
    plan = {}
    for d in docs:
        kind, name = d["kind"], d["metadata"]["name"]
        if kind == "StatefulSet" and name == "zeroshard-server":
            pod = d["spec"]["template"]["spec"]
            plan["servers"] = d["spec"]["replicas"]
            plan["server"] = container_plan(pod["containers"][0])
        elif kind == "Job" and name == "zeroshard-worker":
            pod = d["spec"]["template"]["spec"]
            plan["workers"] = d["spec"]["completions"]
            plan["worker_init"] = [container_plan(c)
                                   for c in pod.get("initContainers", [])]
            plan["worker"] = container_plan(pod["containers"][0])
        elif kind == "ConfigMap" and name.startswith("zeroshard-config"):
            plan["ds_config"] = json.loads(d["data"]["ds_config.json"])
    missing = [k for k in ("servers", "server", "workers", "worker", "ds_config")
               if k not in plan]
    if missing:
        sys.exit("pod_plan: the rendered overlay lacks " + ", ".join(missing))
    json.dump(plan, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
