// deploy.k8s_manifests: renders every overlay in deploy/k8s/overlays with `kubectl kustomize` and
// checks each object against the Kubernetes 1.27 schemas (kubernetes-models, including unknown
// fields; Prometheus Operator CRDs from @kubernetes-models/prometheus-operator; an object of any
// other kind fails), then the contract checks of lib/k8s_checks.mjs, then the files beside the
// overlays: prometheus-adapter values, the KEDA example, the Secret example, the rules shared with
// Compose. Usage: node validate_manifests.mjs [--kubectl PATH]
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { need, deployDir, Problems } from './lib/deps.mjs';
import { serverMetrics, serverEnvironment, serverFlags } from './lib/server_contract.mjs';
import { schemaProblems } from './lib/k8s_types.mjs';
import { checkRender } from './lib/k8s_checks.mjs';
import { checkPromQL } from './lib/promql.mjs';
import { pathToFileURL } from 'node:url';

const YAML = need('yaml');
const k8sDir = path.join(deployDir, 'k8s');
const rel = (p) => path.relative(deployDir, p);
const args = process.argv.slice(2);
const kubectl = args.includes('--kubectl') ? args[args.indexOf('--kubectl') + 1] : 'kubectl';

// Prerequisites the overlays expect in the cluster (documented in deploy/README.md), not rendered.
const EXTERNAL_CLAIMS = ['posbias-models'];
// Optional components in no overlay, rendered here on top of an overlay to check them too.
const OPTIONAL_COMPONENTS = { 'cert-manager': 'production' };
// Files under deploy/k8s that are deliberately in no kustomization.
const NOT_RENDERED = [/\.example\.yaml$/, /^prometheus-adapter\/values\.yaml$/];
const IMAGE_UID = 10001;

export function loadYamlStream(file) {
  const docs = YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'));
  for (const d of docs) if (d.errors.length) throw new Error(`${rel(file)}: ${d.errors[0].message}`);
  return docs.map((d) => d.toJS()).filter((o) => o);
}

// prometheus-adapter rules -> { external: Map(name -> {series}), custom: Map(name -> {series}) }.
export function adapterRules(values, metrics, problems) {
  const result = { external: new Map(), custom: new Map() };
  for (const [section, map] of [['external', result.external], ['custom', result.custom]]) {
    for (const rule of values?.rules?.[section] ?? []) {
      const where = `prometheus-adapter/values.yaml rules.${section}`;
      const series = rule.seriesQuery?.match(/^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/)?.[1]
        ?? rule.seriesQuery?.match(/__name__="([^"]+)"/)?.[1];
      if (!series) { problems.add(where, `cannot tell the series of ${rule.seriesQuery}`); continue; }
      for (const p of checkPromQL(rule.seriesQuery, metrics)) problems.add(where, `seriesQuery: ${p}`);
      const query = rule.metricsQuery.replaceAll('<<.Series>>', series).replaceAll('<<.LabelMatchers>>', 'namespace="posbias"').replaceAll('<<.GroupBy>>', 'pod');
      for (const p of checkPromQL(query, metrics)) problems.add(where, `metricsQuery: ${p}`);
      if (rule.name?.matches && !new RegExp(rule.name.matches).test(series)) problems.add(where, `name.matches ${rule.name.matches} does not match ${series}`);
      for (const label of Object.keys(rule.resources?.overrides ?? {})) {
        if (!['namespace', 'pod'].includes(label)) problems.add(where, `resources.overrides.${label}: not a label Prometheus puts on posbias series`);
      }
      map.set(rule.name?.as ?? series, { series });
    }
  }
  return result;
}

// JSON with sorted keys: kustomize reorders fields.
const canonical = (v) => JSON.stringify(v, (k, x) => (x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort()) : x));

function kustomizeVersion(problems) {
  try {
    const out = JSON.parse(execFileSync(kubectl, ['version', '--client', '-o', 'json'], { encoding: 'utf8' }));
    const v = out.kustomizeVersion ?? '';
    const major = Number(v.replace(/^v/, '').split('.')[0]);
    if (!(major >= 5)) problems.add('kubectl', `kustomize ${v || '(unknown)'} is too old: the overlays need kustomize v5 (kubectl 1.27 or later)`);
    return v;
  } catch (e) {
    problems.add('kubectl', `cannot run ${kubectl}: ${e.message.split('\n')[0]} (scripts/setup.sh installs it)`);
    return null;
  }
}

function referencedFiles() {
  const referenced = new Set();
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) { walk(p); continue; }
      if (entry.name !== 'kustomization.yaml') continue;
      const k = YAML.parse(fs.readFileSync(p, 'utf8'));
      const refs = [...(k.resources ?? []), ...(k.components ?? []), ...(k.patches ?? []).map((x) => x.path).filter(Boolean)];
      for (const r of refs) referenced.add(path.resolve(dir, r));
    }
  };
  walk(k8sDir);
  return referenced;
}

// The cert-manager component issues the Secret the API pods mount for TLS, with the SANs the probes
// and in-cluster clients use, from an Issuer that is in the render or named as a ClusterIssuer.
export function checkCertManager(objects) {
  const problems = [];
  const api = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'posbias');
  const server = api?.spec.template.spec.containers.find((c) => c.name === 'posbias');
  const certArg = (server?.args ?? []).find((a) => a.startsWith('--tls-cert-file='))?.split('=')[1];
  const mount = certArg && (server.volumeMounts ?? []).find((m) => certArg.startsWith(`${m.mountPath}/`));
  const secretName = mount && api.spec.template.spec.volumes.find((v) => v.name === mount.name)?.secret?.secretName;
  const certs = objects.filter((o) => o.kind === 'Certificate');
  const cert = certs.find((c) => c.spec?.secretName === secretName);
  if (!cert) { problems.push(`no Certificate issues the Secret ${secretName} that the API pods read --tls-cert-file from`); return problems; }
  const names = [...(cert.spec.dnsNames ?? []), ...(cert.spec.ipAddresses ?? [])];
  const ns = api.metadata.namespace;
  for (const want of ['localhost', 'posbias', `posbias.${ns}.svc`]) if (!names.includes(want)) problems.push(`Certificate/${cert.metadata.name}: no SAN ${want} (${want === 'localhost' ? 'the probes verify --tls-server-name localhost' : 'in-cluster clients connect to the Service'})`);
  if (!(cert.spec.usages ?? ['server auth']).includes('server auth')) problems.push(`Certificate/${cert.metadata.name}: no usage server auth`);
  const ref = cert.spec.issuerRef ?? {};
  if ((ref.kind ?? 'Issuer') === 'Issuer' && !objects.some((o) => o.kind === 'Issuer' && o.metadata.name === ref.name)) problems.push(`Certificate/${cert.metadata.name}: issuerRef Issuer/${ref.name} is not in the render`);
  for (const issuer of objects.filter((o) => o.kind === 'Issuer' && o.spec?.ca)) {
    if (!certs.some((c) => c.spec?.secretName === issuer.spec.ca.secretName && c.spec?.isCA)) problems.push(`Issuer/${issuer.metadata.name}: its CA Secret ${issuer.spec.ca.secretName} is issued by no CA Certificate in the render`);
  }
  return problems;
}

function main() {
  const problems = new Problems();
  const version = kustomizeVersion(problems);
  if (!version) return problems.report('');
  const metrics = serverMetrics();
  const serverEnv = serverEnvironment();
  const flags = serverFlags();
  const pending = Object.entries(flags).filter(([, f]) => f.pending).map(([n]) => n);
  if (pending.length) console.log(`note: not in server/main.cc yet, accepted by name (issue 12): ${pending.join(', ')}`);

  const secretExample = path.join(k8sDir, 'overlays', 'production', 'secret.example.yaml');
  const externalSecrets = {};
  for (const s of loadYamlStream(secretExample)) {
    if (s.kind !== 'Secret') { problems.add(rel(secretExample), `holds a ${s.kind}`); continue; }
    externalSecrets[s.metadata.name] = Object.keys({ ...s.data, ...s.stringData });
    for (const p of schemaProblems(s)) problems.add(rel(secretExample), p);
    for (const v of Object.values(s.stringData ?? {})) {
      if (/:\/\/[^:/@]+:(?!CHANGE-ME@)[^@/]+@/.test(v)) problems.add(rel(secretExample), 'holds what looks like a real password (use CHANGE-ME)');
      if (/-----BEGIN [A-Z ]+-----/.test(v)) problems.add(rel(secretExample), `${s.metadata.name}: holds a PEM block; examples hold placeholders only (CHANGE-ME)`);
      if (/"token_sha256"\s*:\s*"[0-9a-fA-F]{64}"/.test(v)) problems.add(rel(secretExample), `${s.metadata.name}: holds a real-looking token hash; use CHANGE-ME`);
    }
    if (Object.keys(s.data ?? {}).length) problems.add(rel(secretExample), `${s.metadata.name}: base64 data in an example; use stringData with CHANGE-ME placeholders`);
  }
  const adapterFile = path.join(k8sDir, 'prometheus-adapter', 'values.yaml');
  const adapter = adapterRules(YAML.parse(fs.readFileSync(adapterFile, 'utf8')), metrics, problems);

  const overlaysDir = path.join(k8sDir, 'overlays');
  const overlays = fs.readdirSync(overlaysDir).filter((o) => fs.existsSync(path.join(overlaysDir, o, 'kustomization.yaml')));
  for (const required of ['dev', 'production']) if (!overlays.includes(required)) problems.add('k8s/overlays', `no ${required} overlay`);
  const renders = {};
  const renderDir = (where, dir) => {
    try {
      const out = execFileSync(kubectl, ['kustomize', dir], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
      return YAML.parseAllDocuments(out).map((d) => d.toJS()).filter((o) => o);
    } catch (e) {
      problems.add(where, `kubectl kustomize failed: ${(e.stderr || e.message).trim()}`);
      return null;
    }
  };
  const checkObjects = (where, objects) => {
    for (const o of objects) problems.addAll(`${where} ${o.kind}/${o.metadata?.name}`, schemaProblems(o));
    problems.addAll(where, checkRender(objects, { metrics, serverEnv, serverFlags: flags, uid: IMAGE_UID, externalSecrets, externalClaims: new Set(EXTERNAL_CLAIMS), adapter }));
    console.log(`${where}: ${objects.length} objects (${[...new Set(objects.map((o) => o.kind))].join(', ')})`);
  };
  for (const overlay of overlays) {
    const where = `overlays/${overlay}`;
    const objects = renderDir(where, path.join(overlaysDir, overlay));
    if (!objects) continue;
    renders[overlay] = objects;
    checkObjects(where, objects);
  }
  // Optional components: overlay + component in a temporary kustomization (kustomize wants relative paths).
  const used = new Set();
  for (const overlay of overlays) for (const c of YAML.parse(fs.readFileSync(path.join(overlaysDir, overlay, 'kustomization.yaml'), 'utf8')).components ?? []) used.add(path.basename(c));
  for (const component of fs.readdirSync(path.join(k8sDir, 'components')).filter((c) => !used.has(c))) {
    const where = `components/${component}`;
    const overlay = OPTIONAL_COMPONENTS[component];
    if (!overlay) { problems.add(where, 'is in no overlay and not in OPTIONAL_COMPONENTS of validate_manifests.mjs: nothing renders it'); continue; }
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'posbias-kustomize-'));
    try {
      const base = YAML.parse(fs.readFileSync(path.join(overlaysDir, overlay, 'kustomization.yaml'), 'utf8'));
      fs.writeFileSync(path.join(tmp, 'kustomization.yaml'), YAML.stringify({
        apiVersion: 'kustomize.config.k8s.io/v1beta1', kind: 'Kustomization', namespace: base.namespace,
        resources: [path.relative(tmp, path.join(overlaysDir, overlay))], components: [path.relative(tmp, path.join(k8sDir, 'components', component))],
      }));
      const objects = renderDir(`${where} (on overlays/${overlay})`, tmp);
      if (objects) {
        renders[`${overlay}+${component}`] = objects;
        checkObjects(`${where} (on overlays/${overlay})`, objects);
        if (component === 'cert-manager') problems.addAll(where, checkCertManager(objects));
      }
    } finally { fs.rmSync(tmp, { recursive: true, force: true }); }
  }

  // Every Secret/claim the renders expect from outside is documented for the operator.
  const readmeFile = path.join(deployDir, 'README.md');
  const readme = fs.existsSync(readmeFile) ? fs.readFileSync(readmeFile, 'utf8') : '';
  if (!readme) problems.add('README.md', 'missing');
  for (const name of [...EXTERNAL_CLAIMS, ...Object.keys(externalSecrets)]) {
    if (!readme.includes(name)) problems.add('README.md', `does not tell the operator to create ${name}`);
  }

  // The PrometheusRule and Compose's rule file carry the same groups.
  const composeRules = YAML.parse(fs.readFileSync(path.join(deployDir, 'prometheus', 'rules', 'posbias.yml'), 'utf8'));
  for (const [overlay, objects] of Object.entries(renders)) {
    for (const r of objects.filter((o) => o.kind === 'PrometheusRule')) {
      if (canonical(r.spec.groups) !== canonical(composeRules.groups)) {
        problems.add(`overlays/${overlay} PrometheusRule/${r.metadata.name}`, 'groups differ from deploy/prometheus/rules/posbias.yml');
      }
    }
  }

  // The KEDA example: a ScaledObject for a worker Deployment of the production render.
  const production = renders.production ?? [];
  for (const file of fs.readdirSync(path.join(k8sDir, 'keda')).map((f) => path.join(k8sDir, 'keda', f))) {
    for (const o of loadYamlStream(file)) {
      const where = rel(file);
      if (o.apiVersion !== 'keda.sh/v1alpha1' || o.kind !== 'ScaledObject') { problems.add(where, `unexpected ${o.apiVersion} ${o.kind}`); continue; }
      const target = production.find((d) => d.kind === 'Deployment' && d.metadata.name === o.spec?.scaleTargetRef?.name);
      if (!target) problems.add(where, `scales ${o.spec?.scaleTargetRef?.name}, not a Deployment of overlays/production`);
      else if (o.metadata.namespace !== target.metadata.namespace) problems.add(where, `namespace ${o.metadata.namespace}, production uses ${target.metadata.namespace}`);
      for (const t of o.spec?.triggers ?? []) {
        if (t.type !== 'prometheus') continue;
        for (const p of checkPromQL(t.metadata.query, metrics)) problems.add(where, `query: ${p}`);
      }
    }
  }

  // No stray manifests: every YAML file under deploy/k8s is rendered or a declared example.
  const referenced = referencedFiles();
  const walk = (dir) => fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]));
  for (const file of walk(k8sDir).filter((f) => /\.ya?ml$/.test(f))) {
    const r = path.relative(k8sDir, file);
    const example = NOT_RENDERED.some((re) => re.test(r));
    if (path.basename(file) === 'kustomization.yaml') continue;
    if (example && referenced.has(file)) problems.add(`k8s/${r}`, 'is an example but a kustomization includes it');
    if (!example && !referenced.has(file) && !referenced.has(path.dirname(file))) problems.add(`k8s/${r}`, 'is in no kustomization');
  }
  return problems.report(`k8s manifests OK (${overlays.join(', ')}; kustomize ${version})`);
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) main();
