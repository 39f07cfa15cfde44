// What the server promises, read from its sources so that deploy/ cannot drift from them:
// the Prometheus metrics (server/metrics/metrics.cc: names, types, label names, known label values)
// and the environment variables with their checks (server/main.cc: CLI11 `->envname(...)`).
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from './deps.mjs';

const read = (rel) => fs.readFileSync(path.join(repoRoot, rel), 'utf8');

// C++ statements: split at semicolons outside string literals, // comments dropped.
function statements(source) {
  const out = [];
  let current = '';
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === '"') {
      const end = source.slice(i).match(/^"(?:[^"\\]|\\.)*"/);
      current += end[0];
      i += end[0].length - 1;
    } else if (c === '/' && source[i + 1] === '/') {
      while (i < source.length && source[i] !== '\n') i++;
      current += '\n';
    } else if (c === ';') {
      out.push(current);
      current = '';
    } else {
      current += c;
    }
  }
  out.push(current);
  return out;
}

// { name: { type: 'counter'|'gauge'|'histogram', labels: Set, values: {label: Set} } }
export function serverMetrics() {
  const source = read('server/metrics/metrics.cc');
  const metrics = {};
  const byVariable = {};
  // Label values: the literals passed to Add(); a label also set from a variable has open values.
  const addLabels = (metric, text) => {
    for (const m of text.matchAll(/\{"(\w+)",\s*(?:"([^"]*)"|[^}"]+)\}/g)) {
      metric.labels.add(m[1]);
      if (m[2] !== undefined) (metric.values[m[1]] ??= new Set()).add(m[2]);
      else metric.open.add(m[1]);
    }
  };
  for (const statement of statements(source)) {
    const built = statement.match(/Build(Counter|Gauge|Histogram)\(\)\s*\.Name\("([a-zA-Z_:][a-zA-Z0-9_:]*)"\)/);
    if (built) {
      const metric = { type: built[1].toLowerCase(), labels: new Set(), values: {}, open: new Set(), help: '' };
      const help = statement.match(/\.Help\("((?:[^"\\]|\\.)*)"\)/);
      if (help) metric.help = help[1];
      metrics[built[2]] = metric;
      const variable = statement.match(/(\w+)\s*=\s*&?\s*prometheus::Build/);
      if (variable) byVariable[variable[1]] = metric;
      const added = statement.indexOf('.Add(');
      if (added >= 0) addLabels(metric, statement.slice(added));
      continue;
    }
    for (const m of statement.matchAll(/(\w+)\s*(?:->|\.)\s*Add\(\s*\{/g)) {
      if (byVariable[m[1]]) addLabels(byVariable[m[1]], statement.slice(m.index));
    }
  }
  for (const metric of Object.values(metrics)) {
    for (const label of metric.open) delete metric.values[label];
  }
  // Values documented in the help text, e.g. "by state (queued, running, ...)" or "by outcome: a, b."
  for (const metric of Object.values(metrics)) {
    for (const label of metric.labels) {
      const list = metric.help.match(new RegExp(`by ${label}(?: \\(|: )([a-z_]+(?:, [a-z_]+)+)`));
      if (list) {
        const values = (metric.values[label] ??= new Set());
        for (const v of list[1].split(', ')) values.add(v);
      }
    }
  }
  // gRPC status code names (server/rpc/status_mapping.cc) label the RPC counter.
  const codes = new Set([...read('server/rpc/status_mapping.cc').matchAll(/return "([A-Z_]+)"/g)].map((m) => m[1]));
  if (metrics.posbias_rpc_requests_total && codes.size > 0) metrics.posbias_rpc_requests_total.values.code = codes;
  if (Object.keys(metrics).length < 10) {
    throw new Error(`found only ${Object.keys(metrics).length} metrics in server/metrics/metrics.cc: has its style changed?`);
  }
  return metrics;
}

// Parses a CLI11 bound such as `uint64_t{100'000'000}`, `1 << 20`, `int64_t{1} << 30` into a Number.
function bound(text) {
  const t = text.replace(/u?int\d+_t\{([^}]*)\}/g, '$1').replace(/'/g, '').trim();
  const shift = t.match(/^(\d+)\s*<<\s*(\d+)$/);
  if (shift) return Number(BigInt(shift[1]) << BigInt(shift[2]));
  if (/^-?\d+(\.\d+)?$/.test(t)) return Number(t);
  return undefined;
}

// The security flags of issue 12 (TLS, tokens, reflection), with their environment variables: the
// names are fixed by the issue, so deploy/ may use them before server/main.cc declares them (until
// then the server ignores the variables and rejects the flags). Once main.cc has a flag, its own
// declaration counts; a flag here that main.cc spells differently then fails the checks below.
export const SECURITY_FLAGS = {
  '--tls-cert-file': { env: 'POSBIAS_TLS_CERT_FILE', file: true },
  '--tls-key-file': { env: 'POSBIAS_TLS_KEY_FILE', file: true },
  '--tls-client-ca-file': { env: 'POSBIAS_TLS_CLIENT_CA_FILE', file: true },
  '--auth-tokens-file': { env: 'POSBIAS_AUTH_TOKENS_FILE', file: true },
  '--allow-unauthenticated': { env: 'POSBIAS_ALLOW_UNAUTHENTICATED', flag: true },
  '--no-reflection': { env: null, flag: true },
};
export const SECURITY_ENV = Object.fromEntries(Object.entries(SECURITY_FLAGS).filter(([, f]) => f.env).map(([name, f]) => [f.env, name]));

// The configurable limits of server/limits/limits.h, whose flags main.cc adds from that table
// (AddLimitFlag): { flag, env, lo, hi } per row X(kId, "name", "--flag", "unit", default, lo, hi, ...).
export function limitFlags() {
  const rows = [];
  const pattern = /X\(k\w+,\s*"[a-z_]+",\s*"(--[a-z0-9-]+)",\s*"[^"]*",\s*([^,]+),\s*([^,]+),\s*([^,]+),/g;
  for (const m of read('server/limits/limits.h').matchAll(pattern)) {
    rows.push({ flag: m[1], env: 'POSBIAS_' + m[1].slice(2).toUpperCase().replaceAll('-', '_'), lo: Number(m[3]), hi: Number(m[4]) });
  }
  if (rows.length < 10) throw new Error(`found only ${rows.length} configurable limits in server/limits/limits.h: has its style changed?`);
  return rows;
}

// { '--flag': { env, flag } } for every option and flag of server/main.cc (CLI11 add_option/add_flag,
// "!--no-x" negations included), plus the SECURITY_FLAGS not declared there yet (pending: true).
export function serverFlags() {
  const source = read('server/main.cc');
  const flags = {};
  for (const statement of statements(source)) {
    const m = statement.match(/add_(option|flag)\(\s*"!?((?:-\w,)?--[a-z0-9-]+)"/);
    if (!m) continue;
    const name = m[2].replace(/^-\w,/, '');
    flags[name] = { env: statement.match(/->envname\("([A-Z0-9_]+)"\)/)?.[1] ?? null, flag: m[1] === 'flag' };
  }
  for (const limit of limitFlags()) flags[limit.flag] = { env: limit.env, flag: false };
  if (Object.keys(flags).length < 10) throw new Error(`found only ${Object.keys(flags).length} flags in server/main.cc: has its style changed?`);
  for (const [name, f] of Object.entries(SECURITY_FLAGS)) if (!flags[name]) flags[name] = { ...f, pending: true };
  return flags;
}

// { POSBIAS_X: { check(value) -> error string | null } } for every envname in server/main.cc, plus
// the variables of SECURITY_FLAGS not declared there yet (pending: true).
export function serverEnvironment() {
  const source = read('server/main.cc');
  const env = {};
  for (const statement of statements(source)) {
    const name = statement.match(/->envname\("([A-Z0-9_]+)"\)/);
    if (!name) continue;
    const checks = [];
    if (/add_flag\(/.test(statement)) {
      checks.push((v) => (/^(true|false|1|0|on|off|yes|no)$/i.test(v) ? null : `${v} is not a boolean`));
    }
    const range = statement.match(/CLI::Range\(((?:[^(),]|\([^)]*\))+),((?:[^(),]|\([^)]*\))+)\)/);
    if (range) {
      const [lo, hi] = [bound(range[1]), bound(range[2])];
      if (lo !== undefined && hi !== undefined) {
        checks.push((v) => (/^-?\d+(\.\d+)?$/.test(v) && Number(v) >= lo && Number(v) <= hi ? null : `${v} is outside ${lo}..${hi}`));
      }
    }
    if (/CLI::PositiveNumber/.test(statement)) {
      checks.push((v) => (Number(v) > 0 ? null : `${v} is not a positive number`));
    }
    const member = statement.match(/CLI::IsMember\(\{([^}]*)\}\)/);
    if (member) {
      const allowed = [...member[1].matchAll(/"([^"]*)"/g)].map((m) => m[1]);
      checks.push((v) => (allowed.includes(v) ? null : `${v} is not one of ${allowed.join(', ')}`));
    }
    env[name[1]] = { check: (v) => checks.map((c) => c(String(v))).find((e) => e) ?? null };
  }
  for (const limit of limitFlags()) {
    env[limit.env] = {
      check: (v) => (/^-?\d+(\.\d+)?$/.test(String(v)) && Number(v) >= limit.lo && Number(v) <= limit.hi
        ? null : `${v} is outside ${limit.lo}..${limit.hi}`),
    };
  }
  if (Object.keys(env).length < 10) {
    throw new Error(`found only ${Object.keys(env).length} envnames in server/main.cc: has its style changed?`);
  }
  const boolean = (v) => (/^(true|false|1|0|on|off|yes|no)$/i.test(v) ? null : `${v} is not a boolean`);
  for (const [name, f] of Object.entries(SECURITY_FLAGS)) {
    if (f.env && !env[f.env]) env[f.env] = { check: (v) => (f.flag ? boolean(String(v)) : null), pending: true };
  }
  return env;
}

// Environment variables of other programs that deploy/ may set: libpq's, CUDA's, the C library's.
export const foreignEnvironment = /^(PG[A-Z]+|CUDA_[A-Z_]+|NVIDIA_[A-Z_]+|OMP_NUM_THREADS|TZ|HOME)$/;

// Checks one name=value an image, a pod or a Compose service gives the server.
export function checkEnvVar(env, name, value) {
  if (name.startsWith('POSBIAS_')) {
    if (!env[name]) return `${name} is not read by the server (no envname("${name}") in server/main.cc, no flag in server/limits/limits.h)`;
    if (value === undefined || value === null) return null;
    const problem = env[name].check(value);
    return problem ? `${name}: ${problem}` : null;
  }
  return foreignEnvironment.test(name) ? null : `${name} is neither a POSBIAS_* setting nor a known library variable`;
}
