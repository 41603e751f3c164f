#!/usr/bin/env node
// Validates Kubernetes objects offline against the JSON schemas in
// schemas/k8s-1.23.json (extracted from npm's kubernetes-models by
// schemas/extract.js), with Ajv 6 (Debian 12's node-ajv) or later, and
// strictly: a field the schema does not name is an error (a misspelt field
// would otherwise be dropped by the API server without a word).
//
//   kubectl kustomize deploy/k8s/overlays/cpu-demo | node deploy/k8s/validate.js
//   node deploy/k8s/validate.js FILE.yaml ...
//
// Exit status: 0 all valid, 1 an object is invalid, 2 usage or a missing
// module (Debian: apt-get install node-ajv node-js-yaml).
"use strict";
const fs = require("fs");
const path = require("path");

const DEFAULT_SCHEMAS = path.join(__dirname, "schemas", "k8s-1.23.json");

// Debian installs node modules under /usr/share/nodejs, which only Debian's
// own node (in /usr/bin) searches; for a node from elsewhere (nodesource,
// nvm) the folder joins the global paths, where the module's own
// dependencies are found too.
function requireModule(name) {
  const dirs = ["/usr/share/nodejs", "/usr/lib/nodejs"];
  try {
    return require(name);
  } catch (e) {
    if (e.code !== "MODULE_NOT_FOUND" || !e.message.includes(`'${name}'`)) throw e;
  }
  for (const dir of dirs) {
    if (!fs.existsSync(path.join(dir, name))) continue;
    const paths = (process.env.NODE_PATH || "").split(path.delimiter).filter((p) => p);
    process.env.NODE_PATH = [...paths, dir].join(path.delimiter);
    require("module")._initPaths();
    return require(name);
  }
  const err = new Error(`node module '${name}' is missing (Debian: apt-get install node-${name})`);
  err.code = "MODULE_NOT_FOUND";
  throw err;
}

// Every object schema that lists its properties is closed, as the API
// server's decoder is for typed fields (additionalProperties in the schema,
// e.g. labels, stays as it is).
function closeObjects(schema) {
  if (Array.isArray(schema)) return schema.map(closeObjects);
  if (schema === null || typeof schema !== "object") return schema;
  const out = {};
  for (const [k, v] of Object.entries(schema)) {
    if (k === "properties") {
      out[k] = {};
      for (const [name, s] of Object.entries(v)) out[k][name] = closeObjects(s);
    } else {
      out[k] = closeObjects(v);
    }
  }
  if (out.properties && !("additionalProperties" in out)) out.additionalProperties = false;
  return out;
}

const INT_RANGE = { int32: 2 ** 31, int64: 2 ** 63 };
const QUANTITY = /^[+-]?(?:\d+|\d+\.\d*|\.\d+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/i;

// The formats the Kubernetes schemas use. Ajv refuses a schema with a format
// it does not know, so a regenerated file with a new one fails loudly here.
function addFormats(ajv) {
  for (const [name, bound] of Object.entries(INT_RANGE)) {
    ajv.addFormat(name, {
      type: "number",
      validate: (x) => Number.isInteger(x) && x >= -bound && x < bound,
    });
  }
  ajv.addFormat("double", { type: "number", validate: (x) => Number.isFinite(x) });
  ajv.addFormat("quantity", QUANTITY);
  ajv.addFormat("byte", BASE64);
  ajv.addFormat("date-time", DATE_TIME);
  // Not used by these schemas, but by other generators' ("int-or-string").
  ajv.addFormat("int-or-string", {
    validate: (x) => typeof x === "string" || Number.isInteger(x),
  });
}

// Returns validate(object) -> list of error strings (empty when valid).
function makeValidator(schemaFile = DEFAULT_SCHEMAS) {
  const Ajv = requireModule("ajv");
  const doc = JSON.parse(fs.readFileSync(schemaFile, "utf8"));
  // Ajv 6 ignores keywords it does not know (OpenAPI's "nullable"); Ajv 8
  // needs strict: false for that.
  const ajv = new Ajv({ allErrors: true, strict: false });
  addFormats(ajv);
  const closed = closeObjects(doc);
  ajv.addSchema(closed, "k8s");
  const byKind = new Map();
  for (const [id, s] of Object.entries(closed.definitions)) {
    const p = s.properties || {};
    const versions = (p.apiVersion && p.apiVersion.enum) || [];
    const kinds = (p.kind && p.kind.enum) || [];
    for (const v of versions) for (const k of kinds) byKind.set(`${v}/${k}`, id);
  }
  const compiled = new Map();
  return (obj) => {
    if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
      return ["not an object"];
    }
    const id = byKind.get(`${obj.apiVersion}/${obj.kind}`);
    if (!id) {
      return [`no schema for apiVersion ${obj.apiVersion} kind ${obj.kind} ` +
              `(add it to deploy/k8s/schemas/extract.js and regenerate)`];
    }
    if (!compiled.has(id)) compiled.set(id, ajv.getSchema(`k8s#/definitions/${id}`));
    const validate = compiled.get(id);
    if (validate(obj)) return [];
    return describe(validate.errors);
  };
}

// Ajv's errors, one line each; a oneOf of "the type, or null" adds a
// "should be null" and "should match exactly one" per real error: dropped.
function describe(errors) {
  const lines = [];
  for (const e of errors) {
    const where = e.instancePath !== undefined ? e.instancePath : e.dataPath;
    if (e.keyword === "oneOf" || (e.keyword === "type" && e.params.type === "null")) continue;
    let what = e.message;
    if (e.keyword === "additionalProperties") what = `unknown field "${e.params.additionalProperty}"`;
    if (e.keyword === "enum") what += ` (${e.params.allowedValues.join(", ")})`;
    lines.push(`${where || "/"}: ${what}`);
  }
  if (lines.length === 0) lines.push(...errors.map((e) => `${e.instancePath || e.dataPath}: ${e.message}`));
  return [...new Set(lines)];
}

function objectName(obj) {
  const meta = (obj && obj.metadata) || {};
  return `${obj && obj.kind}/${meta.name}`;
}

// The objects of a multi-document YAML text (empty documents skipped).
function loadYaml(text) {
  const yaml = requireModule("js-yaml");
  return yaml.loadAll(text).filter((d) => d !== null && d !== undefined);
}

function main(argv) {
  let schemas = DEFAULT_SCHEMAS;
  const files = [];
  for (const a of argv) {
    if (a.startsWith("--schemas=")) schemas = a.slice("--schemas=".length);
    else if (a.startsWith("--")) {
      process.stderr.write("usage: validate.js [--schemas=FILE] [FILE.yaml|-]...\n");
      return 2;
    } else files.push(a);
  }
  if (files.length === 0) files.push("-");
  let validate;
  try {
    validate = makeValidator(schemas);
  } catch (e) {
    process.stderr.write(`validate: ${e.message}\n`);
    return 2;
  }
  let bad = 0;
  let count = 0;
  for (const f of files) {
    const text = fs.readFileSync(f === "-" ? 0 : f, "utf8");
    for (const obj of loadYaml(text)) {
      ++count;
      const errors = validate(obj);
      if (errors.length > 0) {
        ++bad;
        for (const e of errors) process.stderr.write(`${f}: ${objectName(obj)}: ${e}\n`);
      }
    }
  }
  process.stderr.write(`validate: ${count - bad} of ${count} objects valid\n`);
  return bad > 0 ? 1 : 0;
}

module.exports = { makeValidator, loadYaml, requireModule, objectName };

if (require.main === module) process.exitCode = main(process.argv.slice(2));
