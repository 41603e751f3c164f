// The cross-references of deploy/k8s's rendered manifests that no schema
// sees: the server list in the ConfigMap against the StatefulSet and its
// headless Service, ports against probes, Services and scrape annotations,
// selectors against labels, the worker count and flags against the config
// and the contract (deploy/k8s/README.md). checkManifests(objects,
// expect) returns the problems found, one string each (empty: consistent).
"use strict";

const NAME = "app.kubernetes.io/name";
const COMPONENT = "app.kubernetes.io/component";
const CREDENTIALS = "/etc/zeroshard/credentials";
const CONFIG_DIR = "/etc/zeroshard/config";
const RESOLVED = "/run/zeroshard/resolved.json";
const CKPT = "/ckpt";
const GRPC_PORT = 7070;
const METRICS = { server: 9400, worker: 9401 };
const INDEX_ANNOTATION = "metadata.annotations['batch.kubernetes.io/job-completion-index']";

// Whether a LabelSelector (matchLabels, matchExpressions) selects labels.
function selects(selector, labels) {
  if (!selector) return false;
  labels = labels || {};
  for (const [k, v] of Object.entries(selector.matchLabels || {})) {
    if (labels[k] !== v) return false;
  }
  for (const e of selector.matchExpressions || []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const ok = {
      In: () => has && e.values.includes(labels[e.key]),
      NotIn: () => !has || !e.values.includes(labels[e.key]),
      Exists: () => has,
      DoesNotExist: () => !has,
    }[e.operator];
    if (!ok || !ok()) return false;
  }
  return true;
}

// --flag=value arguments as a Map (a repeated flag is an error).
function parseFlags(args, where, problems) {
  const flags = new Map();
  for (const a of args) {
    const m = /^--([a-z_]+)=(.*)$/.exec(a);
    if (!m) {
      problems.push(`${where}: argument "${a}" is not --flag=value`);
      continue;
    }
    if (flags.has(m[1])) problems.push(`${where}: --${m[1]} given twice`);
    flags.set(m[1], m[2]);
  }
  return flags;
}

function expectFlags(flags, want, where, problems) {
  for (const [k, v] of Object.entries(want)) {
    if (!flags.has(k)) problems.push(`${where}: --${k} is missing`);
    else if (v !== null && flags.get(k) !== String(v)) {
      problems.push(`${where}: --${k}=${flags.get(k)}, want --${k}=${v}`);
    }
  }
  for (const k of flags.keys()) {
    if (!(k in want)) problems.push(`${where}: --${k} is not one of the contract's flags`);
  }
}

function mountPath(container, volumes, test) {
  const names = new Set((volumes || []).filter(test).map((v) => v.name));
  const m = (container.volumeMounts || []).find((vm) => names.has(vm.name));
  return m ? m.mountPath : undefined;
}

const isSecret = (v) => v.secret && v.secret.secretName === "zeroshard-credentials";
const isClaim = (v) => v.persistentVolumeClaim &&
    v.persistentVolumeClaim.claimName === "zeroshard-checkpoints";
const isConfig = (v) => v.configMap && v.configMap.name === "zeroshard-config";
const isRun = (v) => v.emptyDir !== undefined;

function imageName(image) {
  const noDigest = (image || "").split("@")[0];
  const last = noDigest.split("/").pop();
  return last.split(":")[0];
}

function checkContainerBasics(c, spec, image, where, problems, { ckpt = true } = {}) {
  if (imageName(c.image) !== image) problems.push(`${where}: image ${c.image} is not ${image}`);
  if (mountPath(c, spec.volumes, isSecret) !== CREDENTIALS) {
    problems.push(`${where}: Secret zeroshard-credentials is not mounted at ${CREDENTIALS}`);
  }
  if (ckpt && mountPath(c, spec.volumes, isClaim) !== CKPT) {
    problems.push(`${where}: PVC zeroshard-checkpoints is not mounted at ${CKPT}`);
  }
  // The images run as UID 10001: the Secret's files, root's by default, must
  // be readable by the pod's fsGroup.
  const psc = spec.securityContext || {};
  const secret = (spec.volumes || []).find(isSecret);
  const mode = secret && secret.secret.defaultMode !== undefined ? secret.secret.defaultMode : 0o644;
  if (psc.runAsNonRoot !== true || psc.fsGroup === undefined) {
    problems.push(`${where}: the pod sets no runAsNonRoot and fsGroup (the images' user is 10001)`);
  } else if ((mode & 0o040) === 0) {
    problems.push(`${where}: Secret zeroshard-credentials mode 0${mode.toString(8)} is not readable by fsGroup ${psc.fsGroup}`);
  }
}

function portOf(container, name) {
  const p = (container.ports || []).find((x) => x.name === name);
  return p ? p.containerPort : undefined;
}

function checkScrape(template, port, where, problems) {
  const a = (template.metadata || {}).annotations || {};
  if (a["prometheus.io/scrape"] !== "true" || a["prometheus.io/port"] !== String(port) ||
      a["prometheus.io/path"] !== "/metrics") {
    problems.push(`${where}: prometheus.io annotations do not name port ${port} and /metrics`);
  }
}

// A readiness or liveness probe of the standard health service on grpcPort:
// a grpc probe (plaintext servers) or zeroshard-ctl health over mTLS.
function checkProbe(probe, grpcPort, where, problems) {
  if (!probe) {
    problems.push(`${where}: missing`);
    return;
  }
  if (probe.grpc) {
    if (probe.grpc.port !== grpcPort) problems.push(`${where}: grpc port ${probe.grpc.port}, want ${grpcPort}`);
    return;
  }
  const cmd = (probe.exec || {}).command || [];
  if (cmd[0] !== "zeroshard-ctl" || cmd[1] !== "health") {
    problems.push(`${where}: neither a grpc probe nor zeroshard-ctl health`);
    return;
  }
  expectFlags(parseFlags(cmd.slice(2), where, problems),
              { servers: `localhost:${grpcPort}`, credentials: CREDENTIALS, timeout: null },
              where, problems);
}

function checkServers(o, cfg, problems) {
  const sts = o.get("StatefulSet/zeroshard-server");
  const svc = o.get("Service/zeroshard-server");
  const tpl = sts.spec.template;
  const labels = tpl.metadata.labels || {};
  const R = sts.spec.replicas;
  if (labels[COMPONENT] !== "server" || labels[NAME] !== "zeroshard") {
    problems.push("StatefulSet/zeroshard-server: template labels are not name zeroshard, component server");
  }
  if (!selects(sts.spec.selector, labels)) problems.push("StatefulSet/zeroshard-server: selector does not match its template");
  if (sts.spec.serviceName !== "zeroshard-server") problems.push("StatefulSet/zeroshard-server: serviceName is not zeroshard-server");
  if (svc.spec.clusterIP !== "None") problems.push("Service/zeroshard-server: not headless (clusterIP: None)");
  if (!selects({ matchLabels: svc.spec.selector }, labels)) {
    problems.push("Service/zeroshard-server: selector does not match the server pods");
  }
  const want = Array.from({ length: R }, (_, k) => `zeroshard-server-${k}.zeroshard-server:${GRPC_PORT}`);
  const servers = cfg.zeroshard && cfg.zeroshard.servers;
  if (JSON.stringify(servers) !== JSON.stringify(want)) {
    problems.push(`ConfigMap/zeroshard-config: zeroshard.servers ${JSON.stringify(servers)}, ` +
                  `want the ${R} StatefulSet names ${JSON.stringify(want)}`);
  }
  const c = tpl.spec.containers[0];
  const where = "StatefulSet/zeroshard-server container " + c.name;
  checkContainerBasics(c, tpl.spec, "zeroshard-server", where, problems);
  const cmd = c.command || [];
  if (cmd[0] !== "sh" || cmd[1] !== "-c" || !/^exec zeroshard-server /.test(cmd[2] || "")) {
    problems.push(`${where}: command is not sh -c 'exec zeroshard-server ...'`);
  } else {
    expectFlags(parseFlags(cmd[2].trim().split(/\s+/).slice(2), where, problems), {
      listen: `0.0.0.0:${GRPC_PORT}`, server_index: "${HOSTNAME##*-}", num_servers: R,
      credentials: CREDENTIALS, metrics_listen: `0.0.0.0:${METRICS.server}`,
      placement: (cfg.zeroshard && cfg.zeroshard.placement) || "host",
    }, where, problems);
  }
  if (portOf(c, "grpc") !== GRPC_PORT) problems.push(`${where}: port grpc is not ${GRPC_PORT}`);
  if (portOf(c, "metrics") !== METRICS.server) problems.push(`${where}: port metrics is not ${METRICS.server}`);
  checkProbe(c.readinessProbe, portOf(c, "grpc"), `${where} readinessProbe`, problems);
  checkProbe(c.livenessProbe, portOf(c, "grpc"), `${where} livenessProbe`, problems);
  for (const name of ["grpc", "metrics"]) {
    const sp = (svc.spec.ports || []).find((p) => p.name === name);
    const target = sp && (typeof sp.targetPort === "string" ? portOf(c, sp.targetPort) : sp.targetPort || sp.port);
    if (!sp || sp.port !== portOf(c, name) || target !== portOf(c, name)) {
      problems.push(`Service/zeroshard-server: port ${name} does not lead to the container's ${portOf(c, name)}`);
    }
  }
  checkScrape(tpl, METRICS.server, "StatefulSet/zeroshard-server", problems);
  return labels;
}

function checkWorkers(o, cfg, expect, problems) {
  const job = o.get("Job/zeroshard-worker");
  const tpl = job.spec.template;
  const labels = tpl.metadata.labels || {};
  const W = cfg.zeroshard && cfg.zeroshard.workers;
  if (labels[COMPONENT] !== "worker" || labels[NAME] !== "zeroshard") {
    problems.push("Job/zeroshard-worker: template labels are not name zeroshard, component worker");
  }
  if (job.spec.completionMode !== "Indexed") problems.push("Job/zeroshard-worker: completionMode is not Indexed");
  if (job.spec.completions !== W || job.spec.parallelism !== W) {
    problems.push(`Job/zeroshard-worker: completions ${job.spec.completions}, parallelism ` +
                  `${job.spec.parallelism}, want zeroshard.workers = ${W} for both`);
  }
  const spec = tpl.spec;
  const init = (spec.initContainers || [])[0];
  if (!init || JSON.stringify(init.command) !== JSON.stringify([
    "zeroshard-ctl", "config", `--config=${CONFIG_DIR}/ds_config.json`, `--out=${RESOLVED}`])) {
    problems.push("Job/zeroshard-worker: the first initContainer is not zeroshard-ctl config into " + RESOLVED);
  } else {
    if (imageName(init.image) !== "zeroshard-worker") problems.push("Job/zeroshard-worker: initContainer image is not zeroshard-worker");
    if (mountPath(init, spec.volumes, isConfig) !== CONFIG_DIR) problems.push(`Job/zeroshard-worker: ConfigMap zeroshard-config is not mounted at ${CONFIG_DIR} in the initContainer`);
    if (mountPath(init, spec.volumes, isRun) !== "/run/zeroshard") problems.push("Job/zeroshard-worker: no emptyDir at /run/zeroshard in the initContainer");
  }
  const c = spec.containers[0];
  const where = "Job/zeroshard-worker container " + c.name;
  checkContainerBasics(c, spec, "zeroshard-worker", where, problems);
  if (mountPath(c, spec.volumes, isRun) !== "/run/zeroshard") problems.push(`${where}: no emptyDir at /run/zeroshard`);
  if (JSON.stringify(c.command) !== JSON.stringify(["zeroshard-worker"])) problems.push(`${where}: command is not zeroshard-worker`);
  const env = new Map((c.env || []).map((e) => [e.name, e]));
  const rank = env.get("RANK");
  if (!rank || !rank.valueFrom || !rank.valueFrom.fieldRef || rank.valueFrom.fieldRef.fieldPath !== INDEX_ANNOTATION) {
    problems.push(`${where}: env RANK does not come from ${INDEX_ANNOTATION}`);
  }
  const flags = parseFlags(c.args || [], where, problems);
  // $(VAR) in args is expanded by the kubelet from the container's env.
  const comm = (flags.get("comm") || "").replace(/^\$\((\w+)\)$/, (m, v) => (env.get(v) || {}).value);
  expectFlags(flags, {
    rank: "$(RANK)", world_size: W, config: RESOLVED, credentials: CREDENTIALS,
    role: "auto", attempt: "auto", run_id: null, resume: CKPT,
    metrics_listen: `0.0.0.0:${METRICS.worker}`, comm: null,
  }, where, problems);
  if (comm !== expect.comm) problems.push(`${where}: --comm resolves to ${comm}, want ${expect.comm}`);
  if (!flags.get("run_id")) problems.push(`${where}: --run_id is empty`);
  if (portOf(c, "metrics") !== METRICS.worker) problems.push(`${where}: port metrics is not ${METRICS.worker}`);
  checkScrape(tpl, METRICS.worker, "Job/zeroshard-worker", problems);
  const limits = (c.resources || {}).limits || {};
  const requests = (c.resources || {}).requests || {};
  const gpus = Number(limits["nvidia.com/gpu"] || 0);
  if (gpus !== expect.gpus) problems.push(`${where}: limits nvidia.com/gpu ${gpus}, want ${expect.gpus}`);
  if (Number(requests["nvidia.com/gpu"] || gpus) !== gpus) problems.push(`${where}: nvidia.com/gpu requests differ from limits`);
  const ckpt = cfg.zeroshard && cfg.zeroshard.checkpoint && cfg.zeroshard.checkpoint.dir;
  if (ckpt !== CKPT) problems.push(`ConfigMap/zeroshard-config: zeroshard.checkpoint.dir ${ckpt}, want ${CKPT}`);
  return labels;
}

// The pytorch overlay's ranks of a user's script (expect.torch): an Indexed
// Job as the workers' (labels, counts, Secret, PVC), torchrun's environment
// with MASTER_ADDR naming rank 0's pod under the headless Service its pods'
// subdomain names, the shim on PYTHONPATH, the script from its ConfigMap
// and the DeepSpeed config from zeroshard-config.
const TORCH_SHIM = "/opt/zeroshard/shim";
const SCRIPT_DIR = "/etc/zeroshard/script";
function checkTorch(o, cfg, problems) {
  const job = o.get("Job/zeroshard-torch");
  const svc = o.get("Service/zeroshard-torch");
  const tpl = job.spec.template;
  const spec = tpl.spec;
  const labels = tpl.metadata.labels || {};
  const W = cfg.zeroshard && cfg.zeroshard.workers;
  const where = "Job/zeroshard-torch";
  if (labels[COMPONENT] !== "worker" || labels[NAME] !== "zeroshard") {
    problems.push(`${where}: template labels are not name zeroshard, component worker`);
  }
  if (job.spec.completionMode !== "Indexed") problems.push(`${where}: completionMode is not Indexed`);
  if (job.spec.completions !== W || job.spec.parallelism !== W) {
    problems.push(`${where}: completions ${job.spec.completions}, parallelism ` +
                  `${job.spec.parallelism}, want zeroshard.workers = ${W} for both`);
  }
  if (svc.spec.clusterIP !== "None") problems.push("Service/zeroshard-torch: not headless (clusterIP: None)");
  if (spec.subdomain !== "zeroshard-torch") problems.push(`${where}: pods' subdomain is not the Service zeroshard-torch`);
  if (!selects({ matchLabels: svc.spec.selector },
               Object.assign({ "job-name": "zeroshard-torch" }, labels))) {
    problems.push("Service/zeroshard-torch: selector does not match the Job's pods");
  }
  const c = spec.containers[0];
  const cw = `${where} container ${c.name}`;
  checkContainerBasics(c, spec, "zeroshard-torch", cw, problems);
  const env = new Map((c.env || []).map((e) => [e.name, e]));
  const value = (k) => (env.get(k) || {}).value;
  const rank = env.get("RANK");
  if (!rank || !rank.valueFrom || !rank.valueFrom.fieldRef || rank.valueFrom.fieldRef.fieldPath !== INDEX_ANNOTATION) {
    problems.push(`${cw}: env RANK does not come from ${INDEX_ANNOTATION}`);
  }
  const want = {
    WORLD_SIZE: String(W), LOCAL_RANK: "0", LOCAL_WORLD_SIZE: "1",
    MASTER_ADDR: "zeroshard-torch-0.zeroshard-torch", ZEROSHARD_CREDENTIALS: CREDENTIALS,
    PYTHONPATH: TORCH_SHIM,
  };
  for (const [k, v] of Object.entries(want)) {
    if (value(k) !== v) problems.push(`${cw}: env ${k} is ${JSON.stringify(value(k))}, want ${JSON.stringify(v)}`);
  }
  const port = Number(value("MASTER_PORT"));
  if (portOf(c, "dist") !== port) problems.push(`${cw}: MASTER_PORT ${port} is not its port dist`);
  if (!value("ZEROSHARD_RUN_ID")) problems.push(`${cw}: no ZEROSHARD_RUN_ID`);
  const argv = [...(c.command || []), ...(c.args || [])];
  const isScript = (v) => v.configMap && v.configMap.name === "zeroshard-torch-script";
  const script = argv.find((a) => a.endsWith(".py"));
  if (argv[0] !== "python3" || !script || !script.startsWith(SCRIPT_DIR + "/")) {
    problems.push(`${cw}: command is not python3 ${SCRIPT_DIR}/SCRIPT.py`);
  }
  if (mountPath(c, spec.volumes, isScript) !== SCRIPT_DIR) problems.push(`${cw}: ConfigMap zeroshard-torch-script is not mounted at ${SCRIPT_DIR}`);
  const scriptCm = o.get("ConfigMap/zeroshard-torch-script");
  if (script && !(scriptCm && scriptCm.data && scriptCm.data[script.slice(SCRIPT_DIR.length + 1)])) {
    problems.push(`ConfigMap/zeroshard-torch-script: no ${script.slice(SCRIPT_DIR.length + 1)}`);
  }
  if (mountPath(c, spec.volumes, isConfig) !== CONFIG_DIR) problems.push(`${cw}: ConfigMap zeroshard-config is not mounted at ${CONFIG_DIR}`);
  if (!argv.includes(`--deepspeed_config=${CONFIG_DIR}/ds_config.json`)) {
    problems.push(`${cw}: no --deepspeed_config=${CONFIG_DIR}/ds_config.json`);
  }
  if (o.has("Job/zeroshard-worker")) problems.push("Job/zeroshard-worker: still there beside the script's ranks");
  return labels;
}

function checkCtl(o, cfg, problems) {
  const job = o.get("Job/zeroshard-ctl-inspect");
  const tpl = job.spec.template;
  const labels = tpl.metadata.labels || {};
  if (labels[COMPONENT] !== "ctl" || labels[NAME] !== "zeroshard") {
    problems.push("Job/zeroshard-ctl-inspect: template labels are not name zeroshard, component ctl");
  }
  const c = tpl.spec.containers[0];
  const where = "Job/zeroshard-ctl-inspect container " + c.name;
  checkContainerBasics(c, tpl.spec, "zeroshard-server", where, problems, { ckpt: false });
  const args = c.args || [];
  if (JSON.stringify(c.command) !== JSON.stringify(["zeroshard-ctl"]) || args[0] !== "inspect") {
    problems.push(`${where}: not zeroshard-ctl inspect`);
  } else {
    const servers = ((cfg.zeroshard && cfg.zeroshard.servers) || []).join(",");
    expectFlags(parseFlags(args.slice(1), where, problems),
                { servers, credentials: CREDENTIALS, timeout: null }, where, problems);
  }
  return labels;
}

function checkPolicies(o, pods, problems) {
  const pdb = o.get("PodDisruptionBudget/zeroshard-server");
  if (!selects(pdb.spec.selector, pods.server) || selects(pdb.spec.selector, pods.worker) ||
      selects(pdb.spec.selector, pods.ctl)) {
    problems.push("PodDisruptionBudget/zeroshard-server: selector does not pick exactly the server pods");
  }
  // Two servers drained at once lose both copies of the slot they share
  // (zeroshard.replicas 2: slot k on servers k and k + 1), or two shards.
  const down = pdb.spec.maxUnavailable;
  if (pdb.spec.minAvailable !== undefined || typeof down !== "number" || down > 1) {
    problems.push(`PodDisruptionBudget/zeroshard-server: maxUnavailable ${JSON.stringify(down)}` +
                  (pdb.spec.minAvailable !== undefined ? ` with minAvailable ${JSON.stringify(pdb.spec.minAvailable)}` : "") +
                  ", want 0 or 1: two servers down at once lose a slot's both copies");
  }
  const sv = o.get("NetworkPolicy/zeroshard-server");
  if (!selects(sv.spec.podSelector, pods.server) || selects(sv.spec.podSelector, pods.worker)) {
    problems.push("NetworkPolicy/zeroshard-server: podSelector does not pick the server pods");
  }
  const admits = (policy, from, port) => (policy.spec.ingress || []).some((rule) =>
    (!rule.ports || rule.ports.some((p) => p.port === port)) &&
    (!rule.from || rule.from.some((peer) =>
      (peer.podSelector && !peer.namespaceSelector && selects(peer.podSelector, from)) ||
      (peer.namespaceSelector && Object.keys(peer.namespaceSelector).length === 0 && !peer.podSelector))));
  const anyPod = { "example.com/other": "pod" };
  for (const [who, allowed] of [["worker", true], ["ctl", true], ["server", false]]) {
    if (admits(sv, pods[who], GRPC_PORT) !== allowed) {
      problems.push(`NetworkPolicy/zeroshard-server: ${who} pods ${allowed ? "cannot" : "can"} reach port ${GRPC_PORT}`);
    }
  }
  if (admits(sv, anyPod, GRPC_PORT)) problems.push(`NetworkPolicy/zeroshard-server: any pod can reach ${GRPC_PORT}`);
  if (!admits(sv, anyPod, METRICS.server)) problems.push(`NetworkPolicy/zeroshard-server: Prometheus cannot reach ${METRICS.server}`);
  const wk = o.get("NetworkPolicy/zeroshard-worker");
  if (!selects(wk.spec.podSelector, pods.worker) || selects(wk.spec.podSelector, pods.server)) {
    problems.push("NetworkPolicy/zeroshard-worker: podSelector does not pick the worker pods");
  }
  for (const port of [29500, 45000]) {  // Gloo and NCCL choose their ports
    if (!admits(wk, pods.worker, port)) problems.push(`NetworkPolicy/zeroshard-worker: workers cannot reach each other on port ${port}`);
  }
  if (admits(wk, anyPod, 29500)) problems.push("NetworkPolicy/zeroshard-worker: any pod can reach the workers");
  if (!admits(wk, anyPod, METRICS.worker)) problems.push(`NetworkPolicy/zeroshard-worker: Prometheus cannot reach ${METRICS.worker}`);
  const pvc = o.get("PersistentVolumeClaim/zeroshard-checkpoints");
  if (!(pvc.spec.accessModes || []).includes("ReadWriteMany")) {
    problems.push("PersistentVolumeClaim/zeroshard-checkpoints: not ReadWriteMany");
  }
}

const REQUIRED = [
  "ConfigMap/zeroshard-config", "Service/zeroshard-server", "StatefulSet/zeroshard-server",
  "PodDisruptionBudget/zeroshard-server", "NetworkPolicy/zeroshard-server",
  "NetworkPolicy/zeroshard-worker", "PersistentVolumeClaim/zeroshard-checkpoints",
  "Job/zeroshard-ctl-inspect",
];
const WORKERS = ["Job/zeroshard-worker"];
const TORCH = ["Job/zeroshard-torch", "Service/zeroshard-torch", "ConfigMap/zeroshard-torch-script"];

// expect: { comm: "gloo" | "nccl", gpus: workers' nvidia.com/gpu (0: none),
// torch: the ranks are a PyTorch script's (the pytorch overlay) }.
function checkManifests(objects, expect) {
  const problems = [];
  const o = new Map();
  for (const obj of objects) {
    const key = `${obj.kind}/${obj.metadata && obj.metadata.name}`;
    if (o.has(key)) problems.push(`${key}: defined twice`);
    o.set(key, obj);
    if (obj.metadata && obj.metadata.namespace) problems.push(`${key}: has a namespace (the manifests are namespace-less)`);
    if (!obj.metadata || !obj.metadata.labels || obj.metadata.labels[NAME] !== "zeroshard") {
      problems.push(`${key}: no label ${NAME}: zeroshard`);
    }
  }
  const missing = [...REQUIRED, ...(expect.torch ? TORCH : WORKERS)].filter((k) => !o.has(k));
  if (missing.length > 0) return problems.concat(missing.map((k) => `${k}: missing`));
  let cfg;
  try {
    cfg = JSON.parse(o.get("ConfigMap/zeroshard-config").data["ds_config.json"]);
  } catch (e) {
    return problems.concat([`ConfigMap/zeroshard-config: ds_config.json: ${e.message}`]);
  }
  // Every container, init containers too, asks for CPU and memory and is
  // bounded (a namespace with a ResourceQuota admits nothing less).
  for (const [key, obj] of o) {
    const spec = obj.spec && obj.spec.template && obj.spec.template.spec;
    for (const c of spec ? [...(spec.initContainers || []), ...spec.containers] : []) {
      const r = c.resources || {};
      for (const kind of ["requests", "limits"]) {
        for (const res of ["cpu", "memory"]) {
          if (!r[kind] || r[kind][res] === undefined) problems.push(`${key} container ${c.name}: no ${kind}.${res}`);
        }
      }
    }
  }
  const pods = {};
  pods.server = checkServers(o, cfg, problems);
  pods.worker = expect.torch ? checkTorch(o, cfg, problems) : checkWorkers(o, cfg, expect, problems);
  pods.ctl = checkCtl(o, cfg, problems);
  checkPolicies(o, pods, problems);
  return problems;
}

module.exports = { checkManifests, selects };
