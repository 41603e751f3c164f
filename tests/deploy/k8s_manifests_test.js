#!/usr/bin/env node
// tests/deploy: renders a deploy/k8s overlay with `kubectl kustomize` (each
// --kubectl given; their renders must agree up to object and env order),
// validates every object against the committed Kubernetes schemas
// (deploy/k8s/validate.js), checks the cross-references (k8s_checks.js),
// resolves the ConfigMap's ds_config.json with the real `zeroshard-ctl
// config` and runs the README's credentials recipe (k8s_secret_check.js).
// --mutations instead breaks the rendered objects one way at a time and
// requires each break to be reported: the checks can fail.
//
//   node tests/deploy/k8s_manifests_test.js --overlay=deploy/k8s/overlays/gpu \
//     --comm=gloo --gpus=1 [--bin=build/bin/zeroshard-ctl]... [--kubectl=K]... [--mutations] [--torch]
// (--torch: the pytorch overlay, whose ranks are a PyTorch script's Job)
//
// --bin names a zeroshard binary of this build (zeroshard-ctl resolves the
// config; for each binary given, the flags the manifests pass it must be
// ones it defines).
//
// Exit status: 0 pass, 1 fail, 2 usage, 77 skipped (kubectl, node-ajv or
// node-js-yaml missing).
"use strict";
const { spawnSync } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");
const { checkManifests } = require("./k8s_checks.js");
const { checkSecret } = require("./k8s_secret_check.js");

const SKIP = 77;
const validateJs = path.join(__dirname, "..", "..", "deploy", "k8s", "validate.js");

function parseArgs(argv) {
  const a = { kubectl: [], bin: new Map(), comm: "gloo", gpus: 0, mutations: false, torch: false };
  for (const arg of argv) {
    const m = /^--([a-z]+)(?:=(.*))?$/.exec(arg);
    if (!m) throw new Error(`unexpected argument ${arg}`);
    if (m[1] === "kubectl") a.kubectl.push(m[2]);
    else if (m[1] === "bin") a.bin.set(path.basename(m[2]), m[2]);
    else if (m[1] === "mutations") a.mutations = true;
    else if (m[1] === "torch") a.torch = true;
    else if (["overlay", "comm"].includes(m[1])) a[m[1]] = m[2];
    else if (m[1] === "gpus") a.gpus = Number(m[2]);
    else throw new Error(`unknown flag ${arg}`);
  }
  if (!a.overlay) throw new Error("--overlay=DIR is required");
  if (a.kubectl.length === 0) a.kubectl.push("kubectl");
  a.ctl = a.bin.get("zeroshard-ctl");
  return a;
}

// kubectl kustomize DIR, as text; null when kubectl is not there.
function render(kubectl, overlay) {
  const r = spawnSync(kubectl, ["kustomize", overlay], { encoding: "utf8", timeout: 20000 });
  if (r.error && r.error.code === "ENOENT") return null;
  if (r.error) throw new Error(`${kubectl} kustomize: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${kubectl} kustomize ${overlay} failed:\n${r.stderr}`);
  return r.stdout;
}

function kubectlVersion(kubectl) {
  const r = spawnSync(kubectl, ["version", "--client", "--short"], { encoding: "utf8", timeout: 10000 });
  const out = `${r.stdout || ""}`.trim() ||
      `${spawnSync(kubectl, ["version", "--client"], { encoding: "utf8", timeout: 10000 }).stdout || ""}`.trim();
  return out.split("\n")[0];
}

// The meaning of a render: objects by kind/name, keys sorted, env by name
// (kustomize versions order strategic-merge results differently).
function canonical(objects) {
  const sortKeys = (v, key) => {
    if (Array.isArray(v)) {
      const items = v.map((x) => sortKeys(x));
      if (key === "env") items.sort((x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : 0));
      return items;
    }
    if (v === null || typeof v !== "object") return v;
    const o = {};
    for (const k of Object.keys(v).sort()) o[k] = sortKeys(v[k], k);
    return o;
  };
  const key = (x) => `${x.kind}/${x.metadata.name}`;
  return objects.map((x) => sortKeys(x)).sort((x, y) => (key(x) < key(y) ? -1 : 1));
}

function firstDifference(a, b, where = "") {
  if (JSON.stringify(a) === JSON.stringify(b)) return null;
  if (a && b && typeof a === "object" && typeof b === "object") {
    for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
      const d = firstDifference(a[k], b[k], `${where}/${k}`);
      if (d) return d;
    }
  }
  return `${where || "/"}: ${JSON.stringify(a)} vs ${JSON.stringify(b)}`;
}

// zeroshard-ctl config must resolve the ConfigMap's file, to what the
// manifests say.
function checkWithCtl(ctl, objects) {
  const cm = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === "zeroshard-config");
  if (!cm || !cm.data || cm.data["ds_config.json"] === undefined) return ["ConfigMap/zeroshard-config: no ds_config.json"];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "zs-k8s-"));
  try {
    const config = path.join(dir, "ds_config.json");
    const out = path.join(dir, "resolved.json");
    fs.writeFileSync(config, cm.data["ds_config.json"]);
    const r = spawnSync(ctl, ["config", `--config=${config}`, `--out=${out}`],
                        { encoding: "utf8", timeout: 20000 });
    if (r.error) return [`zeroshard-ctl config: ${r.error.message}`];
    if (r.status !== 0) return [`zeroshard-ctl config rejects ds_config.json: ${r.stderr.trim()}`];
    const cluster = JSON.parse(fs.readFileSync(out, "utf8")).config.cluster;
    const job = objects.find((o) => o.kind === "Job" &&
        ["zeroshard-worker", "zeroshard-torch"].includes(o.metadata.name));
    const sts = objects.find((o) => o.kind === "StatefulSet" && o.metadata.name === "zeroshard-server");
    const problems = [];
    if (job && cluster.workers !== job.spec.completions) {
      problems.push(`zeroshard-ctl config: ${cluster.workers} workers, the Job ${job.spec.completions}`);
    }
    if (sts && cluster.servers !== sts.spec.replicas) {
      problems.push(`zeroshard-ctl config: ${cluster.servers} servers, the StatefulSet ${sts.spec.replicas}`);
    }
    return problems;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// The flags each binary defines, from its --helpfull (common/command_line.cc:
// "  --name (default ...)", or "  --name" alone when the default is empty).
const definedCache = new Map();
function definedFlags(binary) {
  if (definedCache.has(binary)) return definedCache.get(binary);
  const r = spawnSync(binary, ["--helpfull"], { encoding: "utf8", timeout: 10000 });
  if (r.error) throw new Error(`${binary} --helpfull: ${r.error.message}`);
  const flags = new Set();
  for (const m of `${r.stdout}${r.stderr}`.matchAll(/^ {2}--([a-z0-9_]+)(?= \(|$)/gm)) flags.add(m[1]);
  if (flags.size === 0) throw new Error(`${binary} --helpfull lists no flags`);
  definedCache.set(binary, flags);
  return flags;
}

// Every --flag=value a container or probe passes to a zeroshard binary
// given with --bin must be one that binary defines (the binaries of this
// build; the images hold the same).
function checkBinaryFlags(bins, objects) {
  const problems = [];
  const check = (argv, where) => {
    if (argv[0] === "sh" && argv[1] === "-c") argv = (argv[2] || "").trim().split(/\s+/).filter((w) => w !== "exec");
    const binary = bins.get(path.basename(argv[0] || ""));
    if (!binary) return;
    let defined;
    try {
      defined = definedFlags(binary);
    } catch (e) {
      problems.push(`${where}: ${e.message}`);
      return;
    }
    for (const a of argv.slice(1)) {
      const m = /^--([a-z0-9_]+)(=|$)/.exec(a);
      if (m && !defined.has(m[1])) problems.push(`${where}: ${path.basename(binary)} defines no --${m[1]}`);
    }
  };
  for (const obj of objects) {
    const spec = obj.spec && obj.spec.template && obj.spec.template.spec;
    if (!spec) continue;
    for (const c of [...(spec.initContainers || []), ...(spec.containers || [])]) {
      const where = `${obj.kind}/${obj.metadata.name} container ${c.name}`;
      check([...(c.command || []), ...(c.args || [])], where);
      for (const p of ["readinessProbe", "livenessProbe", "startupProbe"]) {
        if (c[p] && c[p].exec) check(c[p].exec.command || [], `${where} ${p}`);
      }
    }
  }
  return problems;
}

function allProblems(objects, validate, args) {
  const problems = [];
  for (const obj of objects) {
    for (const e of validate(obj)) problems.push(`schema: ${obj.kind}/${obj.metadata && obj.metadata.name}: ${e}`);
  }
  problems.push(...checkManifests(objects, { comm: args.comm, gpus: args.gpus, torch: args.torch }));
  if (args.ctl) problems.push(...checkWithCtl(args.ctl, objects));
  problems.push(...checkBinaryFlags(args.bin, objects));
  return problems;
}

const find = (objs, key) => objs.find((o) => `${o.kind}/${o.metadata.name}` === key);
const server = (objs) => find(objs, "StatefulSet/zeroshard-server");
const worker = (objs) => find(objs, "Job/zeroshard-worker");
const workerContainer = (objs) => worker(objs).spec.template.spec.containers[0];
const config = (objs, edit) => {
  const cm = find(objs, "ConfigMap/zeroshard-config");
  const cfg = JSON.parse(cm.data["ds_config.json"]);
  edit(cfg);
  cm.data["ds_config.json"] = JSON.stringify(cfg);
};

// Each: [name, break the objects, a text the report must contain].
const MUTATIONS = [
  ["replicas of the wrong type", (o) => { server(o).spec.replicas = "2"; }, "spec.replicas: should be integer"],
  ["a misspelt field", (o) => { server(o).spec.servicename = server(o).spec.serviceName; }, 'unknown field "servicename"'],
  ["a container without a name", (o) => { delete workerContainer(o).name; }, "should have required property 'name'"],
  ["a memory limit that is no quantity", (o) => { workerContainer(o).resources.limits.memory = "4 GB"; }, 'should match format "quantity"'],
  ["a Secret only root can read", (o) => { server(o).spec.template.spec.volumes.find((v) => v.secret).secret.defaultMode = 0o400; }, "is not readable by fsGroup"],
  ["an init container without limits", (o) => { delete worker(o).spec.template.spec.initContainers[0].resources.limits; }, "container resolve-config: no limits.cpu"],
  ["a third server not in the config", (o) => { server(o).spec.replicas = 3; }, "zeroshard.servers"],
  ["a server listed on another port", (o) => config(o, (c) => { c.zeroshard.servers[1] = "zeroshard-server-1.zeroshard-server:7071"; }), "zeroshard.servers"],
  ["a Service that selects nothing", (o) => { find(o, "Service/zeroshard-server").spec.selector["app.kubernetes.io/component"] = "servers"; }, "does not match the server pods"],
  ["a budget that drains two servers at once", (o) => { find(o, "PodDisruptionBudget/zeroshard-server").spec.maxUnavailable = 2; }, "two servers down at once"],
  ["a replicated config on one server", (o) => { server(o).spec.replicas = 1; config(o, (c) => { c.zeroshard.servers = c.zeroshard.servers.slice(0, 1); }); }, "zeroshard-ctl config rejects ds_config.json"],
  ["a PodDisruptionBudget over the workers", (o) => { find(o, "PodDisruptionBudget/zeroshard-server").spec.selector.matchLabels["app.kubernetes.io/component"] = "worker"; }, "PodDisruptionBudget"],
  ["a NetworkPolicy that shuts ctl out", (o) => { find(o, "NetworkPolicy/zeroshard-server").spec.ingress[0].from[0].podSelector.matchExpressions[1].values = ["worker"]; }, "ctl pods cannot reach port 7070"],
  ["a probe on another port", (o) => { server(o).spec.template.spec.containers[0].readinessProbe.exec.command[2] = "--servers=localhost:7071"; }, "readinessProbe: --servers=localhost:7071"],
  ["a third worker the config does not know", (o) => { worker(o).spec.completions = 3; worker(o).spec.parallelism = 3; }, "want zeroshard.workers = 2"],
  ["a world size off by one", (o) => { const a = workerContainer(o).args; a[a.findIndex((x) => x.startsWith("--world_size="))] = "--world_size=3"; }, "--world_size=3, want --world_size=2"],
  ["a worker without --attempt=auto", (o) => { workerContainer(o).args = workerContainer(o).args.filter((x) => !x.startsWith("--attempt=")); }, "--attempt is missing"],
  ["a flag the worker does not define", (o) => { workerContainer(o).args.push("--no_such_flag=1"); }, "zeroshard-worker defines no --no_such_flag"],
  ["a worker told --servers", (o) => { workerContainer(o).args.push("--servers=a:1"); }, "--servers is not one of the contract's flags"],
  ["a rank not from the completion index", (o) => { workerContainer(o).env.find((e) => e.name === "RANK").valueFrom.fieldRef.fieldPath = "metadata.name"; }, "env RANK does not come from"],
  ["scrape annotations on the wrong port", (o) => { worker(o).spec.template.metadata.annotations["prometheus.io/port"] = "9400"; }, "prometheus.io annotations do not name port 9401"],
  ["a checkpoint dir off the volume", (o) => config(o, (c) => { c.zeroshard.checkpoint.dir = "/tmp/ckpt"; }), "zeroshard.checkpoint.dir /tmp/ckpt"],
  ["a config this build refuses", (o) => config(o, (c) => { c.zeroshard.steps = "many"; }), "zeroshard-ctl config rejects ds_config.json"],
];

function runMutations(objects, validate, args) {
  let missed = 0;
  for (const [name, mutate, want] of MUTATIONS) {
    if ((name === "a config this build refuses" || name === "a replicated config on one server") &&
        !args.ctl) {
      continue;
    }
    if (name === "a flag the worker does not define" && !args.bin.has("zeroshard-worker")) continue;
    const copy = JSON.parse(JSON.stringify(objects));
    mutate(copy);
    const problems = allProblems(copy, validate, args);
    const hit = problems.find((p) => p.includes(want));
    if (hit) {
      console.log(`rejected: ${name}: ${hit}`);
    } else {
      ++missed;
      console.log(`MISSED: ${name}: want "${want}", got ${JSON.stringify(problems)}`);
    }
  }
  return missed;
}

function main(argv) {
  let args;
  try {
    args = parseArgs(argv);
  } catch (e) {
    console.error(e.message);
    return 2;
  }
  let validator;
  try {
    validator = require(validateJs);
    validator.requireModule("js-yaml");
    validator.requireModule("ajv");
  } catch (e) {
    if (e.code !== "MODULE_NOT_FOUND") throw e;
    console.log(`SKIP: ${e.message} (scripts/install-deps.sh)`);
    return SKIP;
  }
  const renders = [];
  for (const kubectl of args.kubectl) {
    const text = render(kubectl, args.overlay);
    if (text === null) {
      console.log(`SKIP: ${kubectl} not found (Debian: apt-get install kubernetes-client)`);
      return SKIP;
    }
    renders.push({ kubectl, version: kubectlVersion(kubectl), objects: validator.loadYaml(text) });
    console.log(`rendered ${args.overlay} with ${kubectl} (${renders[renders.length - 1].version}): ` +
                `${renders[renders.length - 1].objects.length} objects`);
  }
  const objects = renders[0].objects;
  const problems = [];
  for (const r of renders.slice(1)) {
    const d = firstDifference(canonical(objects), canonical(r.objects));
    if (d) problems.push(`${renders[0].kubectl} and ${r.kubectl} render differently: ${d}`);
  }
  const validate = validator.makeValidator();
  if (args.mutations) {
    const clean = allProblems(objects, validate, args);
    if (clean.length > 0) {
      console.log(`FAIL: the unbroken objects already fail:\n  ${clean.join("\n  ")}`);
      return 1;
    }
    const missed = runMutations(objects, validate, args);
    console.log(missed === 0 ? `PASS: all ${MUTATIONS.length} breaks reported` : `FAIL: ${missed} breaks not reported`);
    return missed === 0 && problems.length === 0 ? 0 : 1;
  }
  problems.push(...allProblems(objects, validate, args));
  const secret = checkSecret(renders[0].kubectl, objects, validate, validator.loadYaml);
  if (secret === null) console.log("secret check: skipped (openssl is missing)");
  else problems.push(...secret);
  if (problems.length > 0) {
    console.log(`FAIL: ${problems.length} problems:\n  ${problems.join("\n  ")}`);
    return 1;
  }
  console.log(`PASS: ${objects.length} objects valid and consistent` +
              (args.ctl ? "; zeroshard-ctl config resolves ds_config.json" : "") +
              (secret ? "; create-secret.sh makes a Secret the pods can use" : ""));
  return 0;
}

process.exitCode = main(process.argv.slice(2));
