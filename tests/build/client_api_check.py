#!/usr/bin/env python3
"""Checks that the client library's public API is what other parts use.

The public headers are the `hdrs` of //client:zs_client in client/BUILD.bazel
(ShardCluster and the types it speaks). The check fails, naming the file and
the header, when:
  - a public header includes a client/ header that is not public, or a
    gRPC, protobuf or proto/ header (the API speaks the project's types);
  - a source outside client/, tests/ and bench/ includes a client/ header
    that is not public.

  python3 tests/build/client_api_check.py --root .
  python3 tests/build/client_api_check.py --root . --pretend worker/main.cc:client/shard_channels.h
"""

import argparse
import glob
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
FORBIDDEN_IN_API = ("grpc", "grpcpp/", "google/protobuf/", "proto/", "wire/")


def public_headers(root):
    text = open(os.path.join(root, "client", "BUILD.bazel")).read()
    m = re.search(r'name = "zs_client",.*?hdrs = \[(.*?)\]', text, re.S)
    if not m:
        sys.exit("client/BUILD.bazel: no hdrs list for zs_client")
    return {"client/" + h for h in re.findall(r'"([^"]+\.h)"', m.group(1))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=".")
    ap.add_argument("--pretend", action="append", default=[],
                    help="FILE:HEADER, an include added for the check's own test")
    args = ap.parse_args()
    root = args.root
    public = public_headers(root)
    extra = {}
    for p in args.pretend:
        f, h = p.split(":", 1)
        extra.setdefault(f, []).append(h)
    problems = []
    for h in sorted(public):
        incs = INCLUDE.findall(open(os.path.join(root, h)).read())
        for inc in incs + extra.get(h, []):
            if inc.startswith("client/") and inc not in public:
                problems.append(f"{h}: public header includes {inc}, which is internal")
            elif inc.startswith(FORBIDDEN_IN_API):
                problems.append(f"{h}: public header includes {inc}")
    for part in ("worker", "tools", "model", "server", "optim", "common", "wire"):
        for f in sorted(glob.glob(os.path.join(root, part, "**", "*.*"), recursive=True)):
            if not f.endswith((".h", ".cc", ".cu")):
                continue
            rel = os.path.relpath(f, root)
            incs = INCLUDE.findall(open(f, errors="replace").read())
            for inc in incs + extra.get(rel, []):
                if inc.startswith("client/") and inc not in public:
                    problems.append(f"{rel}: includes {inc}, which is internal to client/")
    for p in problems:
        print(p)
    print(f"client API: {len(public)} public headers, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
