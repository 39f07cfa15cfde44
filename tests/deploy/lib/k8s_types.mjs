// Kubernetes schema checks for rendered objects. kubernetes-models' validate() checks types and
// required fields but lets unknown fields through (a misspelt `readinesProbe` would be dropped by the
// API server without a word), so the field names are also checked here, against the TypeScript
// declarations (.d.ts) the same packages ship: each interface lists exactly the fields of its type.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { need } from './deps.mjs';

// apiVersion -> module folder of the class for each kind (core group: "v1").
const CRD_PACKAGES = { 'monitoring.coreos.com': '@kubernetes-models/prometheus-operator', 'cert-manager.io': '@kubernetes-models/cert-manager' };

export function modelModule(apiVersion, kind) {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  const pkg = CRD_PACKAGES[group];
  if (pkg) return `${pkg}/${group}/${version}/${kind}`;
  if (group && !group.endsWith('.k8s.io') && !['apps', 'batch', 'autoscaling', 'policy'].includes(group)) return null;
  return `kubernetes-models/${group ? `${group}/` : ''}${version}/${kind}`;
}

// Loads the class for apiVersion/kind; null when no package knows it (the caller fails the object).
export function modelClass(apiVersion, kind) {
  const module = modelModule(apiVersion, kind);
  if (!module) return null;
  try {
    return need(module)[kind] ?? null;
  } catch (e) {
    if (e.code === 'MODULE_NOT_FOUND') return null;
    throw e;
  }
}

// ---- A reader for the subset of TypeScript the declarations use. -------------------------------
// Types: { kind: 'object', fields: {name: type}, index: type|null } | { kind: 'array', of } |
// { kind: 'ref', name, file } | { kind: 'union', options } | { kind: 'any' }.
const fileCache = new Map();

function parseFile(file) {
  if (fileCache.has(file)) return fileCache.get(file);
  const source = fs.readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '');
  const parsed = { file, imports: {}, aliases: {}, declarations: {} };
  fileCache.set(file, parsed);
  for (const m of source.matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g)) {
    for (const part of m[1].split(',')) {
      const [orig, local] = part.trim().split(/\s+as\s+/);
      if (orig) parsed.imports[(local ?? orig).trim()] = { name: orig.trim(), from: m[2] };
    }
  }
  for (const m of source.matchAll(/export\s*\{([^}]*)\}\s*;/g)) {
    for (const part of m[1].split(',')) {
      const [orig, exported] = part.trim().split(/\s+as\s+/);
      if (orig && exported) parsed.aliases[exported.trim()] = orig.trim();
    }
  }
  for (const m of source.matchAll(/export\s+(?:declare\s+)?interface\s+(\w+)(?:\s+extends\s+[\w\s,<>]+)?\s*\{/g)) {
    const reader = new TypeReader(source, m.index + m[0].length - 1, file);
    parsed.declarations[m[1]] = reader.type();
  }
  for (const m of source.matchAll(/export\s+(?:declare\s+)?type\s+(\w+)\s*=/g)) {
    const reader = new TypeReader(source, m.index + m[0].length, file);
    parsed.declarations[m[1]] = reader.type();
  }
  return parsed;
}

class TypeReader {
  constructor(source, pos, file) { Object.assign(this, { source, pos, file }); }
  skip() { while (/\s/.test(this.source[this.pos] ?? '')) this.pos++; }
  peek(s) { this.skip(); return this.source.startsWith(s, this.pos); }
  eat(s) {
    if (!this.peek(s)) throw new Error(`${this.file}: expected ${s} at ${this.source.slice(this.pos, this.pos + 40)}`);
    this.pos += s.length;
  }
  type() {
    const options = [this.primary()];
    while (this.peek('|')) { this.eat('|'); options.push(this.primary()); }
    while (this.peek('[]')) { this.eat('[]'); options.splice(0, options.length, { kind: 'array', of: options.length === 1 ? options[0] : { kind: 'union', options: [...options] } }); }
    return options.length === 1 ? options[0] : { kind: 'union', options };
  }
  primary() {
    this.skip();
    if (this.peek('{')) return this.object();
    if (this.peek('(')) { this.eat('('); const t = this.type(); this.eat(')'); return t; }
    if (this.peek('"')) { const m = this.source.slice(this.pos).match(/^"(?:[^"\\]|\\.)*"/); this.pos += m[0].length; return { kind: 'any' }; }
    const m = this.source.slice(this.pos).match(/^[\w$.-]+/);
    if (!m) throw new Error(`${this.file}: cannot read a type at ${this.source.slice(this.pos, this.pos + 40)}`);
    this.pos += m[0].length;
    let t;
    if (m[0] === 'Array' && this.peek('<')) { this.eat('<'); t = { kind: 'array', of: this.type() }; this.eat('>'); }
    else if (/^[A-Z]/.test(m[0]) && !['Record', 'Partial'].includes(m[0])) t = { kind: 'ref', name: m[0], file: this.file };
    else t = { kind: 'any' };
    if (this.peek('<')) { this.eat('<'); this.type(); while (this.peek(',')) { this.eat(','); this.type(); } this.eat('>'); }
    while (this.peek('[')) { this.eat('['); this.type(); this.eat(']'); t = { kind: 'any' }; } // IDeployment["kind"]
    return t;
  }
  object() {
    this.eat('{');
    const fields = {};
    let index = null;
    while (!this.peek('}')) {
      if (this.peek('[')) {
        this.pos = this.source.indexOf(']', this.pos) + 1; // [key: string]
        this.eat(':');
        index = this.type();
      } else {
        this.skip();
        const m = this.source.slice(this.pos).match(/^(?:"((?:[^"\\]|\\.)*)"|([\w$]+))(\?)?\s*:/);
        if (!m) throw new Error(`${this.file}: cannot read a field at ${this.source.slice(this.pos, this.pos + 40)}`);
        this.pos += m[0].length;
        fields[m[1] ?? m[2]] = this.type();
      }
      this.skip();
      if (this.peek(';') || this.peek(',')) this.pos++;
    }
    this.eat('}');
    return { kind: 'object', fields, index };
  }
}

// Finds the declaration `name` visible in `file`: declared there, re-exported under an alias, or imported.
function resolve(name, file, depth = 0) {
  if (depth > 10) return null;
  const parsed = parseFile(file);
  if (parsed.declarations[name]) return parsed.declarations[name];
  if (parsed.aliases[name]) return resolve(parsed.aliases[name], file, depth + 1);
  const imported = parsed.imports[name];
  if (!imported) return null;
  let target;
  if (imported.from.startsWith('.')) target = path.resolve(path.dirname(file), `${imported.from}.d.ts`);
  else target = createRequire(file).resolve(imported.from).replace(/\.(c|m)?js$/, '.d.ts');
  if (!fs.existsSync(target)) return null;
  return resolve(imported.name, target, depth + 1);
}

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

// Problems (strings) for fields of `value` that `type` does not declare, with JSON-pointer-ish paths.
function unknownFields(value, type, where, problems, seen = 0) {
  if (!type || seen > 60) return;
  switch (type.kind) {
    case 'ref': {
      const resolved = resolve(type.name, type.file);
      if (!resolved) { problems.push(`${where}: no declaration for ${type.name} (checker cannot see this type)`); return; }
      unknownFields(value, resolved, where, problems, seen + 1);
      return;
    }
    case 'array':
      if (Array.isArray(value)) value.forEach((v, i) => unknownFields(v, type.of, `${where}/${i}`, problems, seen + 1));
      return;
    case 'union': {
      const candidates = type.options.filter((o) => o.kind !== 'any');
      if (candidates.length < type.options.length || !isPlainObject(value)) return;
      let best = null;
      for (const option of candidates) {
        const p = [];
        unknownFields(value, option, where, p, seen + 1);
        if (p.length === 0) return;
        if (!best || p.length < best.length) best = p;
      }
      problems.push(...best);
      return;
    }
    case 'object':
      if (!isPlainObject(value)) return;
      for (const [key, v] of Object.entries(value)) {
        if (key in type.fields) unknownFields(v, type.fields[key], `${where}/${key}`, problems, seen + 1);
        else if (type.index) unknownFields(v, type.index, `${where}/${key}`, problems, seen + 1);
        else problems.push(`${where}/${key}: unknown field`);
      }
      return;
    default:
  }
}

// Schema problems of one object: unknown apiVersion/kind, validate() errors, unknown fields.
export function schemaProblems(object) {
  const { apiVersion, kind } = object;
  const Model = modelClass(apiVersion, kind);
  if (!Model) return [`no schema for ${apiVersion} ${kind} (add its model package, or keep the object out of the render)`];
  const problems = [];
  try {
    new Model(object).validate();
  } catch (e) {
    problems.push(`schema: ${e.message}`);
  }
  const dts = need.resolve(modelModule(apiVersion, kind)).replace(/\.(c|m)?js$/, '.d.ts');
  const parsed = parseFile(dts);
  const interfaceName = Object.keys(parsed.declarations).find((n) => n === `I${kind}`);
  if (!interfaceName) return [...problems, `no TypeScript declaration I${kind} in ${dts}`];
  unknownFields(object, parsed.declarations[interfaceName], '', problems);
  return problems;
}
