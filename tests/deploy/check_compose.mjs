// deploy.compose: checks deploy/compose.yaml and the files it mounts without a container engine:
// services and their keys, the image build (Dockerfile, target stage), the environment against the
// server's settings, the PostgreSQL wiring, ports, volumes (the API and the workers share one /data
// volume: the model registry lives there), and the monitoring stack: Prometheus's
// scrape targets and rules, Grafana's provisioning and the dashboard (every query is PromQL over
// metrics the server exports, and every exported metric is on the dashboard).
import fs from 'node:fs';
import path from 'node:path';
import { need, deployDir, repoRoot, Problems } from './lib/deps.mjs';
import { serverMetrics, serverEnvironment, checkEnvVar } from './lib/server_contract.mjs';
import { checkPromQL, metricNames } from './lib/promql.mjs';
import { SERVICE_KEYS, TOP_KEYS, interpolate, loadCompose, environmentOf, mountsOf, hostPathOf, publishedContainerPorts } from './lib/compose.mjs';
import { instructions } from './lint_dockerfile.mjs';
import { pathToFileURL } from 'node:url';

const YAML = need('yaml');
const composeFile = path.join(deployDir, 'compose.yaml');
const portOf = (address) => Number(String(address ?? '').split(':').pop());
const isLoopback = (address) => /^(127\.\d+\.\d+\.\d+|::1|\[::1\]|localhost)$/.test(String(address ?? '').replace(/:\d+$/, ''));
const truthy = (v) => /^(true|1|on|yes)$/i.test(String(v ?? ''));
// Issue 12: the one variable every published port binds to, and its default.
export const PUBLISH_VARIABLE = 'POSBIAS_PUBLISH_ADDRESS';
export const PUBLISH_DEFAULT = '127.0.0.1';
const SECRETS_SCRIPT = path.join(deployDir, 'compose', 'make-local-certs.sh');

// POSBIAS_* defaults of a Dockerfile's final stage (ENV), which a Compose service inherits.
export function imageDefaults(text) {
  const list = instructions(text);
  const lastFrom = list.map((i) => i.keyword).lastIndexOf('FROM');
  const env = {};
  for (const ins of list.slice(lastFrom + 1).filter((i) => i.keyword === 'ENV')) {
    for (const m of ins.args.matchAll(/(POSBIAS_\w+)=("[^"]*"|\S*)/g)) env[m[1]] = m[2].replace(/^"(.*)"$/, '$1');
  }
  return env;
}

// Issue 12 lockdown of the Compose file: every published port on ${POSBIAS_PUBLISH_ADDRESS:-127.0.0.1};
// Grafana without anonymous access and without a password in the file; Prometheus without its
// lifecycle and admin APIs; secrets from files that make-local-certs.sh makes in a git-ignored folder;
// the posbias services authenticate when they listen off loopback, with their TLS files mounted.
export function checkLockdown(compose, problems, { composeDir = deployDir, imageEnv = {}, scriptText = null, gitignore = null } = {}) {
  const services = compose.services ?? {};
  const bindPattern = new RegExp(`^\\$\\{${PUBLISH_VARIABLE}:-${PUBLISH_DEFAULT.replace(/\./g, '\\.')}\\}$`);
  for (const [name, s] of Object.entries(services)) {
    const where = `compose.yaml services.${name}`;
    for (const p of s.ports ?? []) {
      if (typeof p === 'object') {
        if (!bindPattern.test(String(p.host_ip ?? ''))) problems.add(where, `port ${p.target}: host_ip ${p.host_ip ?? '(all interfaces)'}, expected \${${PUBLISH_VARIABLE}:-${PUBLISH_DEFAULT}}`);
        continue;
      }
      const text = String(p);
      const m = text.match(/^(\$\{[^}]+\}|[^:]*):(\d+(?:-\d+)?):(\d+(?:-\d+)?)(\/\w+)?$/);
      if (!m || !bindPattern.test(m[1])) problems.add(where, `port "${text}" is published on ${m ? m[1] || 'all interfaces' : 'all interfaces'}; write "\${${PUBLISH_VARIABLE}:-${PUBLISH_DEFAULT}}:HOST:CONTAINER"`);
    }
  }
  // Secrets: declared, used, made by the script in a git-ignored folder.
  const declared = compose.secrets ?? {};
  for (const [name, s] of Object.entries(services)) {
    for (const ref of s.secrets ?? []) {
      const source = typeof ref === 'string' ? ref : ref.source;
      if (!declared[source]) problems.add(`compose.yaml services.${name}`, `secret ${source} is not declared under secrets:`);
    }
  }
  const secretsDir = path.join(composeDir, 'compose', 'secrets');
  for (const [name, sec] of Object.entries(declared)) {
    const where = `compose.yaml secrets.${name}`;
    if (!sec?.file) { if (!sec?.environment && !sec?.external) problems.add(where, 'has no file'); continue; }
    const file = path.resolve(composeDir, interpolate(sec.file).value);
    if (!file.startsWith(`${secretsDir}${path.sep}`)) { problems.add(where, `file ${sec.file} is outside deploy/compose/secrets/ (git-ignored, made by make-local-certs.sh)`); continue; }
    const relative = path.relative(secretsDir, file);
    if (scriptText !== null && !scriptText.includes(`$out/${relative}`)) problems.add(where, `file ${sec.file}: make-local-certs.sh does not make ${relative}`);
  }
  if (gitignore !== null && Object.keys(declared).length && !gitignore.split('\n').some((l) => /^\/?deploy\/compose\/secrets\/?$/.test(l.trim()))) {
    problems.add('.gitignore', 'does not ignore deploy/compose/secrets/ (keys and tokens would be committable)');
  }
  // Grafana: no anonymous access, the admin password from a file.
  const grafana = services.grafana;
  if (grafana) {
    const where = 'compose.yaml services.grafana';
    const env = environmentOf(grafana);
    const value = (k) => (env[k] === undefined || env[k] === null ? undefined : interpolate(env[k]).value);
    if (truthy(value('GF_AUTH_ANONYMOUS_ENABLED')) || value('GF_AUTH_ANONYMOUS_ENABLED') === undefined) problems.add(where, `GF_AUTH_ANONYMOUS_ENABLED ${value('GF_AUTH_ANONYMOUS_ENABLED') ?? '(unset)'}: set it to "false"`);
    if (env.GF_SECURITY_ADMIN_PASSWORD !== undefined) problems.add(where, `GF_SECURITY_ADMIN_PASSWORD in the Compose file (${env.GF_SECURITY_ADMIN_PASSWORD === null ? 'passed through' : `"${env.GF_SECURITY_ADMIN_PASSWORD}"`}): use GF_SECURITY_ADMIN_PASSWORD__FILE with a secret`);
    const file = value('GF_SECURITY_ADMIN_PASSWORD__FILE');
    if (!file) problems.add(where, 'no GF_SECURITY_ADMIN_PASSWORD__FILE: Grafana would start with admin/admin');
    else {
      const targets = (grafana.secrets ?? []).map((r) => (typeof r === 'string' ? `/run/secrets/${r}` : r.target?.startsWith('/') ? r.target : `/run/secrets/${r.target ?? r.source}`));
      if (!targets.includes(file)) problems.add(where, `GF_SECURITY_ADMIN_PASSWORD__FILE ${file} is no secret of the service`);
    }
    if (truthy(value('GF_USERS_ALLOW_SIGN_UP'))) problems.add(where, 'GF_USERS_ALLOW_SIGN_UP: anyone could make an account');
  }
  // Prometheus: no lifecycle (shutdown, reload) or admin (delete series) API.
  const prometheus = services.prometheus;
  if (prometheus) {
    for (const c of [].concat(prometheus.command ?? [], prometheus.entrypoint ?? [])) {
      if (/^--web\.enable-(lifecycle|admin-api)\b/.test(String(c))) problems.add('compose.yaml services.prometheus', `${c}: anyone reaching the port could shut it down or delete data`);
    }
  }
  // posbias services: authenticate off loopback, TLS for the API, TLS files mounted from secrets.
  for (const [name, s] of Object.entries(services).filter(([n]) => n === 'posbias' || n.startsWith('posbias-'))) {
    const where = `compose.yaml services.${name}`;
    const env = { ...imageEnv, ...Object.fromEntries(Object.entries(environmentOf(s)).map(([k, v]) => [k, v === null ? undefined : interpolate(v).value])) };
    const args = [].concat(s.command ?? []).map(String);
    const setting = (flag, envName) => { const a = args.find((x) => x === flag || x.startsWith(`${flag}=`)); if (a) return a.includes('=') ? a.split('=').slice(1).join('=') : true; return env[envName] || undefined; };
    const listen = env.POSBIAS_LISTEN ?? '127.0.0.1:50051';
    const tls = setting('--tls-cert-file', 'POSBIAS_TLS_CERT_FILE');
    const tokens = setting('--auth-tokens-file', 'POSBIAS_AUTH_TOKENS_FILE');
    const clientCa = setting('--tls-client-ca-file', 'POSBIAS_TLS_CLIENT_CA_FILE');
    const role = env.POSBIAS_ROLE ?? 'both';
    if (!isLoopback(listen)) {
      if (!tokens && !clientCa && !truthy(setting('--allow-unauthenticated', 'POSBIAS_ALLOW_UNAUTHENTICATED'))) problems.add(where, `listens on ${listen} with neither tokens nor a client CA: the server refuses to start`);
      if (!tls && role !== 'worker') problems.add(where, `serves the API on ${listen} without TLS`);
    } else if (name === 'posbias') problems.add(where, `POSBIAS_LISTEN ${listen} is loopback: the published gRPC port reaches nothing`);
    const secretTargets = (s.secrets ?? []).map((r) => (typeof r === 'string' ? `/run/secrets/${r}` : r.target?.startsWith('/') ? r.target : `/run/secrets/${r.target ?? r.source}`));
    const roMounts = mountsOf(s, composeDir).filter((m) => m.readOnly).map((m) => m.target);
    for (const [flag, file] of [['--tls-cert-file', tls], ['--tls-key-file', setting('--tls-key-file', 'POSBIAS_TLS_KEY_FILE')], ['--tls-client-ca-file', clientCa], ['--auth-tokens-file', tokens]]) {
      if (typeof file !== 'string') continue;
      if (!secretTargets.includes(file) && !roMounts.some((t) => file.startsWith(`${t}/`))) problems.add(where, `${flag} ${file} comes from no secret or read-only mount (the image holds none: the server would not start)`);
    }
    const health = [].concat(s.healthcheck?.test ?? []).map(String);
    if (tls && !isLoopback(listen)) {
      if (!health.includes('--tls')) problems.add(where, 'TLS is on but the healthcheck does not pass --tls');
      const ca = health[health.indexOf('--ca-file') + 1];
      if (!health.includes('--ca-file') || !(secretTargets.includes(ca) || roMounts.some((t) => ca.startsWith(`${t}/`)))) problems.add(where, 'the TLS healthcheck has no --ca-file from a secret of the service');
      if (!health.includes('--tls-server-name')) problems.add(where, 'the TLS healthcheck connects to 127.0.0.1 without --tls-server-name');
    } else if (health.includes('--tls')) problems.add(where, 'the healthcheck passes --tls to a server without TLS');
  }
}

// Stage names of a Dockerfile (FROM ... AS name).
export function dockerfileStages(text) {
  return [...text.matchAll(/^\s*FROM\s+(?:--platform=\S+\s+)?\S+\s+AS\s+(\S+)\s*$/gim)].map((m) => m[1].toLowerCase());
}

export function checkCompose(compose, problems, { metrics, serverEnv, composeDir = deployDir }) {
  const add = (where, m) => problems.add(where, m);
  for (const key of Object.keys(compose)) {
    if (!TOP_KEYS.has(key) && !key.startsWith('x-')) add('compose.yaml', `unknown top-level key ${key}${key === 'version' ? ' (obsolete)' : ''}`);
  }
  const services = compose.services ?? {};
  for (const required of ['posbias', 'postgres', 'prometheus', 'grafana']) if (!services[required]) add('compose.yaml', `no service ${required}`);
  const declaredVolumes = new Set(Object.keys(compose.volumes ?? {}));
  const unsetVars = new Set();
  for (const [name, s] of Object.entries(services)) {
    const where = `compose.yaml services.${name}`;
    for (const key of Object.keys(s)) if (!SERVICE_KEYS.has(key)) add(where, `unknown key ${key}`);
    for (const m of mountsOf(s, composeDir)) {
      if (m.type === 'bind' && !fs.existsSync(m.hostPath)) add(where, `bind mount source ${m.source} does not exist (${m.hostPath})`);
      if (m.type === 'volume' && m.source && !declaredVolumes.has(m.source)) add(where, `volume ${m.source} is not declared under volumes:`);
    }
    for (const dep of Object.keys(Array.isArray(s.depends_on) ? Object.fromEntries(s.depends_on.map((d) => [d, {}])) : s.depends_on ?? {})) {
      if (!services[dep]) add(where, `depends on ${dep}, which is no service`);
    }
    const walk = (v) => {
      if (typeof v === 'string') for (const u of interpolate(v).unset) unsetVars.add(`${u} (services.${name})`);
      else if (v && typeof v === 'object') Object.values(v).forEach(walk);
    };
    walk(s);
  }
  for (const u of unsetVars) add('compose.yaml', `\${${u.split(' ')[0]}} has no default: ${u} (Compose warns and substitutes "")`);

  // The posbias services: image, environment, store, ports, filesystem.
  const postgres = services.postgres ?? {};
  const pgEnv = Object.fromEntries(Object.entries(environmentOf(postgres)).map(([k, v]) => [k, interpolate(v ?? '').value]));
  if (!/^postgres:15(\b|$)/.test(postgres.image ?? '')) add('compose.yaml services.postgres', `image ${postgres.image}, expected postgres:15`);
  if (!/pg_isready/.test(JSON.stringify(postgres.healthcheck?.test ?? ''))) add('compose.yaml services.postgres', 'no pg_isready healthcheck');
  const posbiasServices = Object.entries(services).filter(([n]) => n === 'posbias' || n.startsWith('posbias-'));
  for (const [name, s] of posbiasServices) {
    const where = `compose.yaml services.${name}`;
    const build = s.build ?? {};
    if (name === 'posbias' || s.build) {
      const context = path.resolve(composeDir, build.context ?? '.');
      if (context !== repoRoot) add(where, `build.context ${build.context} is not the repository root`);
      const dockerfile = path.join(context, build.dockerfile ?? 'Dockerfile');
      if (!fs.existsSync(dockerfile)) add(where, `build.dockerfile ${path.relative(repoRoot, dockerfile)} does not exist (yet?)`);
      else if (!dockerfileStages(fs.readFileSync(dockerfile, 'utf8')).includes(String(build.target).toLowerCase())) {
        add(where, `build.target ${build.target} is no stage of ${path.relative(repoRoot, dockerfile)} (stages: ${dockerfileStages(fs.readFileSync(dockerfile, 'utf8')).join(', ')})`);
      }
      if (s.image !== 'posbias:cpu') add(where, `image ${s.image}, expected posbias:cpu`);
    }
    const env = environmentOf(s);
    const value = (k) => (env[k] === undefined || env[k] === null ? undefined : interpolate(env[k]).value);
    for (const k of Object.keys(env)) {
      const problem = checkEnvVar(serverEnv, k, value(k));
      if (problem) add(where, problem);
    }
    const role = value('POSBIAS_ROLE') ?? 'both';
    const store = value('POSBIAS_JOB_STORE');
    if (name !== 'posbias' && role !== 'worker') add(where, `role ${role}: extra posbias services are workers`);
    if (name !== 'posbias' && !(s.profiles ?? []).length) add(where, 'extra workers belong in a profile (docker compose --profile workers)');
    if (!store) add(where, 'no POSBIAS_JOB_STORE: the stack shares jobs through PostgreSQL');
    else {
      let url;
      try { url = new URL(store); } catch { add(where, `POSBIAS_JOB_STORE ${store} is not a URI`); }
      if (url) {
        if (!/^postgres(ql)?:$/.test(url.protocol)) add(where, `POSBIAS_JOB_STORE ${store} is not a postgresql:// URI`);
        if (url.hostname !== 'postgres' || !services[url.hostname]) add(where, `POSBIAS_JOB_STORE host ${url.hostname} is not the postgres service`);
        if ((url.port || '5432') !== '5432') add(where, `POSBIAS_JOB_STORE port ${url.port}, PostgreSQL listens on 5432`);
        if (url.username !== (pgEnv.POSTGRES_USER ?? 'postgres')) add(where, `POSBIAS_JOB_STORE user ${url.username}, postgres creates ${pgEnv.POSTGRES_USER}`);
        if (url.pathname.slice(1) !== (pgEnv.POSTGRES_DB ?? pgEnv.POSTGRES_USER)) add(where, `POSBIAS_JOB_STORE database ${url.pathname.slice(1)}, postgres creates ${pgEnv.POSTGRES_DB}`);
        if (url.password) add(where, 'POSBIAS_JOB_STORE carries the password: pass it in PGPASSWORD');
        if (env.PGPASSWORD !== (environmentOf(postgres).POSTGRES_PASSWORD)) add(where, 'PGPASSWORD is not the same expression as postgres POSTGRES_PASSWORD');
      }
    }
    const deps = Array.isArray(s.depends_on) ? {} : s.depends_on ?? {};
    if (deps.postgres?.condition !== 'service_healthy') add(where, 'does not wait for postgres to be healthy (depends_on condition: service_healthy)');
    const published = publishedContainerPorts(s);
    if (name === 'posbias') {
      if (!published.includes(portOf(value('POSBIAS_LISTEN')))) add(where, `gRPC port of POSBIAS_LISTEN (${value('POSBIAS_LISTEN')}) is not published`);
      if (!published.includes(portOf(value('POSBIAS_METRICS_LISTEN')))) add(where, `metrics port of POSBIAS_METRICS_LISTEN (${value('POSBIAS_METRICS_LISTEN')}) is not published`);
    } else if (published.length) add(where, 'a scalable worker cannot publish host ports');
    if (!/^0\.0\.0\.0:|^\[::\]:/.test(value('POSBIAS_METRICS_LISTEN') ?? '')) add(where, 'POSBIAS_METRICS_LISTEN must listen on all interfaces for Prometheus');
    if (s.read_only) {
      const writable = [...mountsOf(s, composeDir).filter((m) => !m.readOnly).map((m) => m.target), ...[].concat(s.tmpfs ?? [])];
      for (const dir of ['/tmp', value('POSBIAS_DATA_DIR') ?? '/data']) if (!writable.includes(dir)) add(where, `read_only but nothing writable at ${dir}`);
    }
    const health = [].concat(s.healthcheck?.test ?? []);
    if (!health.includes('health') || !health.includes(`127.0.0.1:${portOf(value('POSBIAS_LISTEN'))}`)) {
      add(where, `healthcheck ${JSON.stringify(health)} does not run \`posbias --server 127.0.0.1:${portOf(value('POSBIAS_LISTEN'))} health\``);
    }
    const modelRoot = value('POSBIAS_MODEL_ROOT');
    if (modelRoot && !hostPathOf(s, composeDir, modelRoot)) add(where, `POSBIAS_MODEL_ROOT ${modelRoot} is not a bind mount`);
    const grace = String(s.stop_grace_period ?? '10s').match(/^(\d+)s$/);
    if (!grace || Number(grace[1]) <= Number(value('POSBIAS_DRAIN_SECONDS') ?? 10)) add(where, `stop_grace_period ${s.stop_grace_period} is not longer than POSBIAS_DRAIN_SECONDS`);
  }
  checkSharedData(posbiasServices, problems, composeDir);
  return posbiasServices;
}

// The registry (models.json, uploads/) is in POSBIAS_DATA_DIR, not in PostgreSQL: the API service
// and the workers (every replica of a scaled service too) must mount one named volume there, at the
// same path (models.json records uploads by absolute path), writable. An anonymous volume or a
// tmpfs gives each container its own registry; the embedded SQLite store must not share a volume.
export function checkSharedData(posbiasServices, problems, composeDir = deployDir) {
  const info = posbiasServices.map(([name, s]) => {
    const env = environmentOf(s);
    const value = (k) => (env[k] === undefined || env[k] === null ? undefined : interpolate(env[k]).value);
    const dir = value('POSBIAS_DATA_DIR') ?? '/data';
    const mount = mountsOf(s, composeDir).find((m) => m.target === dir);
    const tmpfs = [].concat(s.tmpfs ?? []).some((t) => String(t).split(':')[0] === dir);
    const key = mount && (mount.type === 'bind' ? `bind ${mount.hostPath}` : mount.source ? `volume ${mount.source}` : null);
    return { name, where: `compose.yaml services.${name}`, dir, mount, tmpfs, key, shared: /^postgres(ql)?:\/\//.test(value('POSBIAS_JOB_STORE') ?? '') };
  });
  const onShared = info.filter((x) => x.shared);
  if (onShared.length > 1 || onShared.some((x) => x.name !== 'posbias')) {
    for (const x of onShared) {
      if (x.tmpfs) problems.add(x.where, `a tmpfs at ${x.dir}: every container would keep its own models.json; mount the shared volume posbias-data`);
      else if (!x.mount) problems.add(x.where, `nothing mounted at POSBIAS_DATA_DIR ${x.dir}: mount the volume the API and the workers share`);
      else if (!x.key) problems.add(x.where, `an anonymous volume at ${x.dir}: every container gets its own, so models registered through the API stay unknown to it; mount the named volume the API and the workers share`);
      else if (x.mount.readOnly) problems.add(x.where, `mounts ${x.dir} read-only; the registry writes models.json and uploads there`);
    }
    const api = onShared.find((x) => x.name === 'posbias') ?? onShared[0];
    for (const x of onShared) {
      if (x === api || !x.key || !api.key) continue;
      if (x.key !== api.key) problems.add(x.where, `mounts ${x.key} at ${x.dir}, services.${api.name} mounts ${api.key}: registered models would not reach it`);
      if (x.dir !== api.dir) problems.add(x.where, `POSBIAS_DATA_DIR ${x.dir}, services.${api.name} uses ${api.dir}: models.json records uploads by absolute path`);
    }
  }
  for (const x of info.filter((y) => !y.shared && y.key)) {
    const others = info.filter((y) => y !== x && y.key === x.key).map((y) => y.name);
    if (others.length) problems.add(x.where, `the embedded SQLite store (${x.dir}/jobs.sqlite) on a volume that ${others.join(', ')} mount too`);
  }
}

export function checkPrometheus(services, problems, metrics, composeDir) {
  const prometheus = services.prometheus;
  if (!prometheus) return new Set();
  const where = 'compose.yaml services.prometheus';
  const configArg = [].concat(prometheus.command ?? []).find((c) => String(c).startsWith('--config.file='));
  const configPath = configArg ? configArg.split('=')[1] : '/etc/prometheus/prometheus.yml';
  const hostConfig = hostPathOf(prometheus, composeDir, configPath);
  if (!hostConfig || !fs.existsSync(hostConfig)) { problems.add(where, `${configPath} comes from no existing file`); return new Set(); }
  const cfgWhere = path.relative(deployDir, hostConfig);
  const config = YAML.parse(fs.readFileSync(hostConfig, 'utf8'));
  const jobs = config.scrape_configs ?? [];
  if (new Set(jobs.map((j) => j.job_name)).size !== jobs.length) problems.add(cfgWhere, 'duplicate job_name');
  const posbias = services.posbias ?? {};
  const metricsPort = portOf(interpolate(environmentOf(posbias).POSBIAS_METRICS_LISTEN ?? '').value);
  const staticTargets = jobs.flatMap((j) => (j.static_configs ?? []).flatMap((s) => s.targets ?? []));
  if (!staticTargets.includes(`posbias:${metricsPort}`)) problems.add(cfgWhere, `no scrape target posbias:${metricsPort} (the posbias service's metrics port)`);
  for (const t of staticTargets) {
    const [host] = t.split(':');
    if (host !== 'localhost' && !services[host]) problems.add(cfgWhere, `target ${t}: no service ${host}`);
  }
  for (const j of jobs) {
    for (const d of j.dns_sd_configs ?? []) {
      for (const n of d.names ?? []) {
        if (!services[n]) problems.add(cfgWhere, `dns_sd name ${n} is no service`);
        else if (Number(d.port) !== portOf(interpolate(environmentOf(services[n]).POSBIAS_METRICS_LISTEN ?? '').value)) problems.add(cfgWhere, `dns_sd ${n} port ${d.port} is not its metrics port`);
      }
    }
  }
  const ruleFiles = [];
  for (const pattern of config.rule_files ?? []) {
    const hostPattern = hostPathOf(prometheus, composeDir, pattern);
    if (!hostPattern) { problems.add(cfgWhere, `rule_files ${pattern} is not mounted`); continue; }
    const dir = path.dirname(hostPattern);
    const re = new RegExp(`^${path.basename(hostPattern).replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.')}$`);
    const found = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => re.test(f)).map((f) => path.join(dir, f)) : [];
    if (found.length === 0) problems.add(cfgWhere, `rule_files ${pattern} matches no file`);
    ruleFiles.push(...found);
  }
  const rules = ruleFiles.map((f) => ({ file: f, groups: YAML.parse(fs.readFileSync(f, 'utf8')).groups ?? [] }));
  const recorded = new Set(rules.flatMap((r) => r.groups.flatMap((g) => g.rules.map((x) => x.record).filter(Boolean))));
  for (const r of rules) {
    for (const g of r.groups) {
      for (const rule of g.rules ?? []) {
        const w = `${path.relative(deployDir, r.file)} ${rule.record ?? rule.alert}`;
        if (!rule.expr) problems.add(w, 'no expr');
        if (rule.record && !/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(rule.record)) problems.add(w, 'invalid record name');
        if (rule.for && !/^\d+[smhd]$/.test(rule.for)) problems.add(w, `invalid for: ${rule.for}`);
        for (const k of Object.keys(rule)) if (!['record', 'alert', 'expr', 'for', 'labels', 'annotations', 'keep_firing_for'].includes(k)) problems.add(w, `unknown key ${k}`);
        for (const p of checkPromQL(rule.expr ?? '', metrics, { recorded })) problems.add(w, p);
      }
    }
  }
  return recorded;
}

export function checkGrafana(services, problems, metrics, recorded, composeDir) {
  const grafana = services.grafana;
  if (!grafana) return;
  const where = 'compose.yaml services.grafana';
  const provisioning = hostPathOf(grafana, composeDir, '/etc/grafana/provisioning');
  if (!provisioning) { problems.add(where, 'nothing mounted at /etc/grafana/provisioning'); return; }
  const yamlFiles = (dir) => (fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).map((f) => path.join(dir, f)) : []);
  const datasources = yamlFiles(path.join(provisioning, 'datasources')).flatMap((f) => YAML.parse(fs.readFileSync(f, 'utf8')).datasources ?? []);
  if (datasources.length === 0) problems.add('grafana/provisioning/datasources', 'provisions no datasource');
  const uids = new Set();
  for (const ds of datasources) {
    const w = `grafana/provisioning/datasources ${ds.name}`;
    if (!ds.uid) problems.add(w, 'no fixed uid (the dashboard refers to datasources by uid)');
    uids.add(ds.uid);
    if (ds.type === 'prometheus') {
      const url = new URL(ds.url);
      const listen = [].concat(services[url.hostname]?.command ?? []).find((c) => String(c).startsWith('--web.listen-address='));
      if (!services[url.hostname]) problems.add(w, `url ${ds.url}: no service ${url.hostname}`);
      else if (Number(url.port) !== (listen ? portOf(listen.split('=')[1]) : 9090)) problems.add(w, `url ${ds.url}: Prometheus listens on ${listen ?? 9090}`);
    }
  }
  const providers = yamlFiles(path.join(provisioning, 'dashboards')).flatMap((f) => YAML.parse(fs.readFileSync(f, 'utf8')).providers ?? []);
  if (providers.length === 0) problems.add('grafana/provisioning/dashboards', 'provisions no dashboard provider');
  const dashboards = [];
  for (const p of providers) {
    const host = hostPathOf(grafana, composeDir, p.options?.path ?? '');
    if (!host || !fs.existsSync(host)) { problems.add(`grafana/provisioning/dashboards ${p.name}`, `options.path ${p.options?.path} is not a mounted folder`); continue; }
    for (const f of fs.readdirSync(host).filter((x) => x.endsWith('.json'))) dashboards.push(path.join(host, f));
  }
  if (dashboards.length === 0) problems.add('grafana', 'no dashboard JSON is provisioned');
  const home = environmentOf(grafana).GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH;
  if (home && !fs.existsSync(hostPathOf(grafana, composeDir, home) ?? '')) problems.add(where, `GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH ${home} is no mounted file`);
  const seenUids = new Set();
  for (const file of dashboards) {
    const w = path.relative(deployDir, file);
    let dash;
    try { dash = JSON.parse(fs.readFileSync(file, 'utf8')); } catch (e) { problems.add(w, `not JSON: ${e.message}`); continue; }
    if (seenUids.has(dash.uid)) problems.add(w, `uid ${dash.uid} used twice`);
    seenUids.add(dash.uid);
    checkDashboard(dash, w, problems, { metrics, recorded, datasourceUids: uids });
  }
}

// One Grafana dashboard: datasources, template variables, grid, every query, every metric shown.
export function checkDashboard(dash, w, problems, { metrics, recorded = new Set(), datasourceUids }) {
  if (!dash.uid || !dash.title) problems.add(w, 'needs a uid and a title');
  const used = new Set();
  const checkDs = (ds, ww) => { if (ds && typeof ds === 'object' && !datasourceUids.has(ds.uid)) problems.add(ww, `datasource uid ${ds.uid} is not provisioned`); };
  for (const v of dash.templating?.list ?? []) {
    checkDs(v.datasource, `${w} variable ${v.name}`);
    const q = typeof v.query === 'string' ? v.query : v.query?.query ?? '';
    const lv = q.match(/^label_values\(\s*([^,]+?)\s*,\s*(\w+)\s*\)$/);
    if (v.type === 'query' && !lv) problems.add(`${w} variable ${v.name}`, `unsupported query ${q}`);
    if (lv) {
      for (const p of checkPromQL(lv[1], metrics, { recorded })) problems.add(`${w} variable ${v.name}`, p);
      const m = metrics[metricNames(lv[1])[0]];
      if (m && !m.labels.has(lv[2]) && !['job', 'instance', 'namespace', 'pod'].includes(lv[2])) problems.add(`${w} variable ${v.name}`, `no label ${lv[2]}`);
    }
  }
  const panels = (dash.panels ?? []).flatMap((p) => [p, ...(p.panels ?? [])]);
  const cells = new Map();
  for (const p of panels) {
    const pw = `${w} panel "${p.title}"`;
    const g = p.gridPos;
    if (!g) { problems.add(pw, 'no gridPos'); continue; }
    if (g.x + g.w > 24) problems.add(pw, 'wider than the 24-column grid');
    overlap: for (let y = g.y; y < g.y + g.h; y++) {
      for (let x = g.x; x < g.x + g.w; x++) {
        const key = `${x},${y}`;
        if (cells.has(key)) { problems.add(pw, `overlaps panel "${cells.get(key)}"`); break overlap; }
        cells.set(key, p.title);
      }
    }
    if (p.type === 'row') continue;
    checkDs(p.datasource, pw);
    if (!(p.targets ?? []).length) problems.add(pw, 'has no query');
    for (const t of p.targets ?? []) {
      checkDs(t.datasource, pw);
      for (const e of checkPromQL(t.expr ?? '', metrics, { recorded })) problems.add(`${pw} ${t.refId}`, e);
      for (const n of metricNames(t.expr ?? '')) used.add(metrics[n] ? n : n.replace(/_(bucket|sum|count)$/, ''));
    }
  }
  for (const name of Object.keys(metrics)) if (!used.has(name)) problems.add(w, `shows no panel of the server metric ${name}`);
}

function main() {
  const problems = new Problems();
  const metrics = serverMetrics();
  const serverEnv = serverEnvironment();
  let compose;
  try { compose = loadCompose(composeFile, fs.readFileSync(composeFile, 'utf8')); } catch (e) { problems.add('compose.yaml', e.message); return problems.report(''); }
  checkCompose(compose, problems, { metrics, serverEnv });
  const dockerfile = path.join(repoRoot, 'Dockerfile');
  checkLockdown(compose, problems, {
    imageEnv: fs.existsSync(dockerfile) ? imageDefaults(fs.readFileSync(dockerfile, 'utf8')) : {},
    scriptText: fs.existsSync(SECRETS_SCRIPT) ? fs.readFileSync(SECRETS_SCRIPT, 'utf8') : '',
    gitignore: fs.existsSync(path.join(repoRoot, '.gitignore')) ? fs.readFileSync(path.join(repoRoot, '.gitignore'), 'utf8') : '',
  });
  if (!fs.existsSync(SECRETS_SCRIPT)) problems.add('compose/make-local-certs.sh', 'missing: nothing makes the secrets compose.yaml needs');
  const recorded = checkPrometheus(compose.services ?? {}, problems, metrics, deployDir);
  checkGrafana(compose.services ?? {}, problems, metrics, recorded, deployDir);
  return problems.report(`compose OK (${Object.keys(compose.services).join(', ')})`);
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) main();
