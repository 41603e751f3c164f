// The credentials recipe of deploy/k8s/README.md, run for real: development
// credentials for the servers the ConfigMap lists
// (scripts/make-dev-credentials.sh), then deploy/k8s/create-secret.sh with
// `--dry-run=client -o yaml` (no cluster needed). The Secret must be valid,
// hold every file the pods read and not ca.key, and the server certificate
// must name every server as the workers dial it, and localhost (the probes).
// checkSecret(...) returns the problems found, or null when openssl is
// missing (the check is then skipped).
"use strict";
const { spawnSync } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");

const REPO = path.join(__dirname, "..", "..");
const FILES = ["ca.pem", "tokens", "server.pem", "server.key",
  "worker.pem", "worker.key", "worker.token", "ctl.pem", "ctl.key", "ctl.token",
  "admin.pem", "admin.key", "admin.token"];

function run(cmd, args, env) {
  return spawnSync(cmd, args, { encoding: "utf8", timeout: 30000, env: { ...process.env, ...env } });
}

function checkSecret(kubectl, objects, validate, loadYaml) {
  if (run("openssl", ["version"]).error) return null;
  const cm = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === "zeroshard-config");
  const servers = JSON.parse(cm.data["ds_config.json"]).zeroshard.servers;
  const hosts = servers.map((s) => s.replace(/:\d+$/, ""));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "zs-k8s-secret-"));
  try {
    const creds = path.join(dir, "creds");
    const made = run("bash", [path.join(REPO, "scripts", "make-dev-credentials.sh"), creds,
      ...hosts.map((h) => `DNS:${h}`)]);
    if (made.status !== 0) return [`make-dev-credentials.sh failed: ${made.stderr}`];
    const created = run("bash", [path.join(REPO, "deploy", "k8s", "create-secret.sh"), creds,
      "--dry-run=client", "-o", "yaml"], { KUBECTL: kubectl });
    if (created.status !== 0) return [`create-secret.sh failed: ${created.stderr}`];
    const secrets = loadYaml(created.stdout);
    if (secrets.length !== 1 || secrets[0].kind !== "Secret") return ["create-secret.sh: not one Secret"];
    const secret = secrets[0];
    const problems = validate(secret).map((e) => `schema: Secret/zeroshard-credentials: ${e}`);
    if (secret.metadata.name !== "zeroshard-credentials") problems.push(`create-secret.sh: Secret ${secret.metadata.name}`);
    const keys = Object.keys(secret.data || {}).sort();
    if (JSON.stringify(keys) !== JSON.stringify([...FILES].sort())) {
      problems.push(`create-secret.sh: the Secret holds ${keys.join(" ")}, want ${[...FILES].sort().join(" ")}`);
    }
    const pem = Buffer.from(secret.data["server.pem"] || "", "base64").toString();
    const x = spawnSync("openssl", ["x509", "-noout", "-ext", "subjectAltName"],
                        { input: pem, encoding: "utf8", timeout: 10000 });
    const sans = new Set((x.stdout || "").split(/[\s,]+/).filter((s) => s.startsWith("DNS:")));
    for (const h of ["localhost", ...hosts]) {
      if (!sans.has(`DNS:${h}`)) problems.push(`server.pem does not name DNS:${h}`);
    }
    return problems;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

module.exports = { checkSecret };
