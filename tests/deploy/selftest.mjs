// deploy.checks_selftest: the checks of this folder must fail on broken input, not only pass on good
// input. Each case breaks a copy of a real manifest, the Compose file, the dashboard, a Dockerfile or
// the README in one way and expects a new problem matching a pattern (problems already present in
// the unbroken input do not count). Usage: node selftest.mjs [--kubectl PATH]
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import { need, deployDir, repoRoot } from './lib/deps.mjs';
import { serverMetrics, serverEnvironment } from './lib/server_contract.mjs';
import { schemaProblems } from './lib/k8s_types.mjs';
import { checkRender } from './lib/k8s_checks.mjs';
import { checkPromQL } from './lib/promql.mjs';
import { loadCompose } from './lib/compose.mjs';
import { checkCompose, checkDashboard, checkLockdown, imageDefaults } from './check_compose.mjs';
import { adapterRules, checkCertManager } from './validate_manifests.mjs';
import { lintDockerfile } from './lint_dockerfile.mjs';
import { checkDocs } from './check_docs.mjs';

const YAML = need('yaml');
const args = process.argv.slice(2);
const kubectl = args.includes('--kubectl') ? args[args.indexOf('--kubectl') + 1] : 'kubectl';
const metrics = serverMetrics();
const serverEnv = serverEnvironment();

class Collect { constructor() { this.list = []; } add(w, m) { this.list.push(`${w}: ${m}`); } addAll(w, ms) { for (const m of ms) this.add(w, m); } }

const render = (overlay) => YAML.parseAllDocuments(execFileSync(kubectl, ['kustomize', path.join(deployDir, 'k8s', 'overlays', overlay)], { encoding: 'utf8' })).map((d) => d.toJS()).filter(Boolean);
const adapterProblems = new Collect();
const adapter = adapterRules(YAML.parse(fs.readFileSync(path.join(deployDir, 'k8s', 'prometheus-adapter', 'values.yaml'), 'utf8')), metrics, adapterProblems);
const k8sContext = { metrics, serverEnv, uid: 10001, externalSecrets: { 'posbias-postgres': ['uri'], 'posbias-tls': ['tls.crt', 'tls.key', 'ca.crt'], 'posbias-auth': ['tokens.json'] }, externalClaims: new Set(['posbias-models']), adapter };
const checkK8s = (objects) => [...checkRender(objects, k8sContext), ...objects.flatMap((o) => schemaProblems(o).map((p) => `${o.kind}/${o.metadata?.name}: ${p}`))];
const find = (objects, kind, name) => objects.find((o) => o.kind === kind && (!name || o.metadata.name === name));
const server = (d) => d.spec.template.spec.containers.find((c) => c.name === 'posbias');
const envEntry = (d, name) => server(d).env.find((e) => e.name === name);

let failures = 0;
let count = 0;
function expect(label, baseline, broken, pattern) {
  count++;
  const before = new Set(baseline);
  const fresh = broken.filter((p) => !before.has(p));
  if (fresh.some((p) => pattern.test(p))) { console.log(`ok    ${label}`); return; }
  failures++;
  console.error(`FAIL  ${label}: expected a new problem matching ${pattern}; new problems: ${JSON.stringify(fresh)}`);
}

// ---- Kubernetes ------------------------------------------------------------------------------------
const renders = { production: render('production'), 'cpu-cluster': render('cpu-cluster'), dev: render('dev') };
const baselines = Object.fromEntries(Object.entries(renders).map(([k, v]) => [k, checkK8s(v)]));
function k8sCase(label, overlay, mutate, pattern) {
  const objects = structuredClone(renders[overlay]);
  mutate(objects);
  expect(`k8s ${overlay}: ${label}`, baselines[overlay], checkK8s(objects), pattern);
}
const api = (o) => find(o, 'Deployment', 'posbias');
const gpu = (o) => find(o, 'Deployment', 'posbias-worker-gpu');
const cpu = (o) => find(o, 'Deployment', 'posbias-worker-cpu');
const dataVolumeOf = (d) => d.spec.template.spec.volumes.find((v) => v.name === 'data');
const dataMountOf = (d) => server(d).volumeMounts.find((m) => m.name === 'data');
const perPodData = (d) => { const v = dataVolumeOf(d); delete v.persistentVolumeClaim; v.emptyDir = { sizeLimit: '2Gi' }; };
k8sCase('misspelt field (readinesProbe)', 'production', (o) => { const c = server(api(o)); c.readinesProbe = c.readinessProbe; delete c.readinessProbe; }, /readinesProbe: unknown field/);
k8sCase('misspelt CRD field', 'production', (o) => { find(o, 'ServiceMonitor').spec.endpoints[0].intervall = '5s'; }, /intervall: unknown field/);
k8sCase('wrong type (replicas "two")', 'production', (o) => { api(o).spec.replicas = 'two'; }, /schema: .*replicas/);
k8sCase('object of an unknown kind', 'production', (o) => { o.push({ apiVersion: 'keda.sh/v1alpha1', kind: 'ScaledObject', metadata: { name: 'x', namespace: 'posbias', labels: api(o).metadata.labels }, spec: {} }); }, /no schema for keda\.sh/);
const probeCommand = (d, probe) => server(d)[probe].exec.command;
const cutService = (cmd) => cmd.splice(cmd.indexOf('--service'), 2);
k8sCase('HTTP readiness probe', 'production', (o) => { server(api(o)).readinessProbe = { httpGet: { port: 9464, path: '/healthz' }, timeoutSeconds: 5 }; }, /readinessProbe is an HTTP probe/);
k8sCase('native gRPC probe on a TLS server', 'production', (o) => { server(api(o)).startupProbe = { grpc: { port: 50051 } }; }, /cannot speak TLS/);
k8sCase('native gRPC probe on a loopback worker', 'production', (o) => { server(gpu(o)).readinessProbe = { grpc: { port: 50051 } }; }, /out of the kubelet's reach/);
k8sCase('exec probe without --tls', 'production', (o) => { const c = probeCommand(api(o), 'startupProbe'); c.splice(c.indexOf('--tls'), 1); }, /without --tls against a TLS server/);
k8sCase('exec probe without --ca-file', 'production', (o) => { const c = probeCommand(api(o), 'readinessProbe'); c.splice(c.indexOf('--ca-file'), 2); }, /--tls but no --ca-file/);
k8sCase('readiness on the wrong port', 'production', (o) => { const c = probeCommand(api(o), 'readinessProbe'); c[c.indexOf('--server') + 1] = '127.0.0.1:50052'; }, /readinessProbe asks --server 127\.0\.0\.1:50052/);
k8sCase('API readiness on the overall service', 'production', (o) => { cutService(probeCommand(api(o), 'readinessProbe')); }, /readinessProbe of an API pod/);
k8sCase('liveness on the wrong path', 'production', (o) => { server(api(o)).livenessProbe.httpGet.path = '/metrics'; }, /not \/healthz/);
k8sCase('mTLS without a client certificate in the probe', 'production', (o) => { const c = server(api(o)); c.args.push('--tls-client-ca-file=/etc/posbias/tls/ca.crt'); for (const p of ['startupProbe', 'readinessProbe']) { const cmd = c[p].exec.command; cmd.splice(cmd.indexOf('--cert-file'), 4); } }, /presents no client certificate/);
k8sCase('API without tokens', 'production', (o) => { const c = server(api(o)); c.args = c.args.filter((a) => !a.startsWith('--auth-tokens-file')); }, /neither --auth-tokens-file nor --tls-client-ca-file/);
k8sCase('API without TLS', 'production', (o) => { const c = server(api(o)); c.args = c.args.filter((a) => !a.startsWith('--tls-')); }, /without TLS/);
k8sCase('unknown server flag', 'production', (o) => { server(api(o)).args.push('--tls-cert=/x'); }, /--tls-cert is not a flag/);
k8sCase('tokens on a writable mount', 'production', (o) => { server(api(o)).volumeMounts.find((m) => m.name === 'auth').readOnly = false; }, /mounted writable/);
k8sCase('TLS Secret under a subPath', 'production', (o) => { const m = server(api(o)).volumeMounts.find((x) => x.name === 'tls'); m.subPath = 'tls.crt'; }, /subPath, which never sees an updated Secret/);
k8sCase('tokens file in an emptyDir', 'production', (o) => { const v = api(o).spec.template.spec.volumes.find((x) => x.name === 'auth'); delete v.secret; v.emptyDir = {}; }, /is a emptyDir, not a Secret/);
k8sCase('TLS Secret without ca.crt', 'production', (o) => { const v = api(o).spec.template.spec.volumes.find((x) => x.name === 'tls'); v.secret.secretName = 'posbias-postgres'; }, /no key tls\.crt/);
k8sCase('undocumented TLS Secret', 'production', (o) => { api(o).spec.template.spec.volumes.find((x) => x.name === 'tls').secret.secretName = 'my-tls'; }, /Secret my-tls is neither in the render/);
k8sCase('worker off loopback without authentication', 'production', (o) => { envEntry(gpu(o), 'POSBIAS_LISTEN').value = '0.0.0.0:50051'; }, /posbias-worker-gpu: listens on 0\.0\.0\.0:50051 with neither/);
k8sCase('writable root filesystem', 'production', (o) => { server(api(o)).securityContext.readOnlyRootFilesystem = false; }, /writable root filesystem/);
k8sCase('no seccomp profile', 'production', (o) => { delete api(o).spec.template.spec.securityContext.seccompProfile; }, /no seccomp profile RuntimeDefault/);
const policy = (o, name) => find(o, 'NetworkPolicy', name);
k8sCase('no default deny', 'production', (o) => { o.splice(o.indexOf(policy(o, 'posbias-default-deny')), 1); }, /no default-deny NetworkPolicy/);
k8sCase('gRPC from every namespace', 'production', (o) => { policy(o, 'posbias-api').spec.ingress[0].from = [{ namespaceSelector: {} }]; }, /port 50051 admitted from every namespace/);
k8sCase('gRPC from any source', 'production', (o) => { delete policy(o, 'posbias-api').spec.ingress[0].from; }, /admits every source/);
k8sCase('API policy without ports', 'production', (o) => { delete policy(o, 'posbias-api').spec.ingress[0].ports; }, /admits every port/);
k8sCase('metrics from the own namespace', 'production', (o) => { policy(o, 'posbias-metrics').spec.ingress[0].from.push({ podSelector: {} }); }, /port 9464 admitted from pods of its own namespace/);
k8sCase('workers admit gRPC', 'production', (o) => { policy(o, 'posbias-api').spec.podSelector = { matchLabels: { 'app.kubernetes.io/name': 'posbias' } }; server(gpu(o)).ports.push({ name: 'grpc', containerPort: 50051 }); }, /posbias-worker-gpu: NetworkPolicies admit port 50051/);
k8sCase('no NetworkPolicies at all', 'production', (o) => { for (const n of o.filter((x) => x.kind === 'NetworkPolicy')) o.splice(o.indexOf(n), 1); }, /Service\/posbias: exposes port metrics \(9464\) .* to the whole cluster/);
k8sCase('metrics not admitted from monitoring', 'production', (o) => { o.splice(o.indexOf(policy(o, 'posbias-metrics')), 1); }, /Prometheus cannot scrape it/);
k8sCase('LoadBalancer Service', 'production', (o) => { find(o, 'Service').spec.type = 'LoadBalancer'; }, /type LoadBalancer exposes posbias/);
k8sCase('may run as root', 'production', (o) => { delete api(o).spec.template.spec.securityContext.runAsNonRoot; }, /may run as root/);
k8sCase('no resource requests', 'production', (o) => { delete server(gpu(o)).resources.requests; }, /lacks cpu and memory requests/);
k8sCase('GPU worker without toleration', 'production', (o) => { delete gpu(o).spec.template.spec.tolerations; }, /does not tolerate/);
k8sCase('GPU worker without a GPU', 'production', (o) => { const r = server(gpu(o)).resources; delete r.limits['nvidia.com/gpu']; delete r.requests['nvidia.com/gpu']; }, /requests no GPU/);
k8sCase('GPU request without the CUDA image', 'production', (o) => { server(gpu(o)).image = 'ghcr.io/posbias/posbias-server:0.1.0'; }, /CPU image/);
k8sCase('Service selecting workers', 'production', (o) => { find(o, 'Service').spec.selector['app.kubernetes.io/component'] = 'worker'; }, /selects the worker pods/);
k8sCase('Service selecting nothing', 'production', (o) => { find(o, 'Service').spec.selector['app.kubernetes.io/name'] = 'posbais'; }, /selects no pod/);
k8sCase('HPA target misspelt', 'production', (o) => { find(o, 'HorizontalPodAutoscaler', 'posbias').spec.scaleTargetRef.name = 'posbais'; }, /scales Deployment\/posbais, not in the render/);
k8sCase('PDB selecting nothing', 'production', (o) => { find(o, 'PodDisruptionBudget', 'posbias-worker-gpu').spec.selector.matchLabels['posbias.io/pool'] = 'tpu'; }, /selects no pod/);
k8sCase('two PDBs on one pod', 'production', (o) => { find(o, 'PodDisruptionBudget', 'posbias').spec.selector = { matchLabels: { 'app.kubernetes.io/name': 'posbias' } }; }, /selected by both/);
k8sCase('external metric the adapter does not serve', 'production', (o) => { find(o, 'HorizontalPodAutoscaler', 'posbias-worker-gpu').spec.metrics[0].external.metric.name = 'posbias_queue'; }, /not served by/);
k8sCase('external metric selector value misspelt', 'production', (o) => { find(o, 'HorizontalPodAutoscaler', 'posbias-worker-gpu').spec.metrics[0].external.metric.selector.matchExpressions[0].values = ['queud']; }, /selector value queud/);
k8sCase('environment variable misspelt', 'production', (o) => { server(api(o)).env.push({ name: 'POSBIAS_LISTN', value: '0.0.0.0:1' }); }, /POSBIAS_LISTN is not read by the server/);
k8sCase('invalid setting value', 'production', (o) => { find(o, 'ConfigMap').data.POSBIAS_LOG_FORMAT = 'xml'; }, /xml is not one of/);
k8sCase('grace period shorter than the drain', 'production', (o) => { envEntry(gpu(o), 'POSBIAS_DRAIN_SECONDS').value = '600'; }, /terminationGracePeriodSeconds 180 is not longer/);
k8sCase('Secret key misspelt', 'production', (o) => { envEntry(api(o), 'POSBIAS_JOB_STORE').valueFrom.secretKeyRef.key = 'url'; }, /reads key url/);
k8sCase('password in the manifest', 'production', (o) => { envEntry(api(o), 'POSBIAS_JOB_STORE').valueFrom = undefined; envEntry(api(o), 'POSBIAS_JOB_STORE').value = 'postgresql://u:secret@db:5432/p'; }, /password in the manifest/);
k8sCase('API tier without a shared store', 'production', (o) => { const c = server(api(o)); c.env = c.env.filter((e) => e.name !== 'POSBIAS_JOB_STORE'); }, /without a shared POSBIAS_JOB_STORE/);
k8sCase('API tier without workers', 'production', (o) => { o.splice(o.indexOf(gpu(o)), 1); }, /no worker/);
k8sCase('unknown metric in a rule', 'production', (o) => { find(o, 'PrometheusRule').spec.groups[1].rules[0].expr = 'posbias_up == 0'; }, /unknown metric posbias_up/);
k8sCase('wrong label in a rule', 'production', (o) => { find(o, 'PrometheusRule').spec.groups[0].rules[0].expr = 'max by (state) (process_memory_bytes{kind="resident"})'; }, /has no label kind/);
k8sCase('ServiceMonitor port name', 'production', (o) => { find(o, 'ServiceMonitor').spec.endpoints[0].port = 'metric'; }, /no port named metric/);
k8sCase('PodMonitor selecting nothing', 'production', (o) => { find(o, 'PodMonitor').spec.selector.matchLabels['app.kubernetes.io/component'] = 'workers'; }, /selects no pod/);
k8sCase('read-only root without /tmp', 'production', (o) => { const d = api(o); server(d).volumeMounts = server(d).volumeMounts.filter((m) => m.mountPath !== '/tmp'); d.spec.template.spec.volumes = d.spec.template.spec.volumes.filter((v) => v.name !== 'tmp'); }, /no writable volume at \/tmp/);
k8sCase('claim of an undocumented PVC', 'production', (o) => { api(o).spec.template.spec.volumes.find((v) => v.name === 'models').persistentVolumeClaim.claimName = 'models'; }, /claims models/);
k8sCase('object without namespace', 'production', (o) => { delete find(o, 'Service').metadata.namespace; }, /has no namespace/);
k8sCase('GPU worker with a per-pod /data', 'production', (o) => perPodData(gpu(o)), /posbias-worker-gpu: POSBIAS_DATA_DIR \/data is a per-pod emptyDir/);
k8sCase('API tier with a per-pod /data', 'production', (o) => perPodData(api(o)), /Deployment\/posbias: POSBIAS_DATA_DIR \/data is a per-pod emptyDir/);
k8sCase('CPU worker with a per-pod /data', 'cpu-cluster', (o) => perPodData(cpu(o)), /posbias-worker-cpu: POSBIAS_DATA_DIR \/data is a per-pod emptyDir/);
k8sCase('API replicas alone with a per-pod /data', 'production', (o) => { o.splice(o.indexOf(gpu(o)), 1); perPodData(api(o)); }, /1 Deployment\(s\) \(up to 10 pods\)/);
k8sCase('shared data claim ReadWriteOnce', 'production', (o) => { find(o, 'PersistentVolumeClaim', 'posbias-data').spec.accessModes = ['ReadWriteOnce']; }, /PersistentVolumeClaim\/posbias-data: access modes .* must be ReadWriteMany/);
k8sCase('shared data claim missing from the render', 'production', (o) => { o.splice(o.indexOf(find(o, 'PersistentVolumeClaim', 'posbias-data')), 1); }, /shared data claim posbias-data is not in the render/);
k8sCase('workers on another data claim', 'cpu-cluster', (o) => {
  const other = structuredClone(find(o, 'PersistentVolumeClaim', 'posbias-data'));
  other.metadata.name = 'posbias-data-cpu';
  o.push(other);
  dataVolumeOf(cpu(o)).persistentVolumeClaim.claimName = 'posbias-data-cpu';
}, /mount different claims/);
k8sCase('shared data claim under a subPath', 'production', (o) => { dataMountOf(gpu(o)).subPath = 'gpu'; }, /with subPath gpu/);
k8sCase('shared data claim mounted read-only', 'production', (o) => { dataMountOf(gpu(o)).readOnly = true; }, /mounts the shared data claim posbias-data read-only/);
k8sCase('workers on another POSBIAS_DATA_DIR', 'production', (o) => { server(gpu(o)).env.push({ name: 'POSBIAS_DATA_DIR', value: '/var/lib/posbias' }); dataMountOf(gpu(o)).mountPath = '/var/lib/posbias'; }, /different POSBIAS_DATA_DIR/);
k8sCase('SQLite store on the shared ReadWriteMany claim', 'production', (o) => { const c = server(api(o)); c.env = c.env.filter((e) => e.name !== 'POSBIAS_JOB_STORE'); envEntry(api(o), 'POSBIAS_ROLE').value = 'both'; }, /embedded SQLite store .* on the ReadWriteMany claim posbias-data/);
k8sCase('SQLite on a ReadWriteMany claim', 'dev', (o) => { find(o, 'PersistentVolumeClaim', 'posbias-data').spec.accessModes = ['ReadWriteMany']; }, /embedded SQLite store .* on the ReadWriteMany claim/);
k8sCase('SQLite with two replicas', 'dev', (o) => { api(o).spec.replicas = 2; }, /allows one replica/);
k8sCase('SQLite on RWO with a rolling update', 'dev', (o) => { api(o).spec.strategy = { type: 'RollingUpdate' }; }, /strategy Recreate/);
k8sCase('worker role on SQLite', 'dev', (o) => { envEntry(api(o), 'POSBIAS_ROLE').value = 'worker'; }, /without a shared POSBIAS_JOB_STORE/);

// ---- Compose ---------------------------------------------------------------------------------------
const composeText = fs.readFileSync(path.join(deployDir, 'compose.yaml'), 'utf8');
const composeProblems = (c) => { const p = new Collect(); checkCompose(c, p, { metrics, serverEnv }); return p.list; };
const composeBase = loadCompose('compose.yaml', composeText);
const composeBaseline = composeProblems(composeBase);
function composeCase(label, mutate, pattern) {
  const c = structuredClone(composeBase);
  mutate(c);
  expect(`compose: ${label}`, composeBaseline, composeProblems(c), pattern);
}
composeCase('store on the wrong host', (c) => { c.services.posbias.environment.POSBIAS_JOB_STORE = 'postgresql://posbias@db:5432/posbias'; }, /host db is not the postgres service/);
composeCase('password in the store URI', (c) => { c.services.posbias.environment.POSBIAS_JOB_STORE = 'postgresql://posbias:pw@postgres:5432/posbias'; }, /carries the password/);
composeCase('metrics port not published', (c) => { c.services.posbias.ports = ['50051:50051']; }, /metrics port .* is not published/);
composeCase('misspelt service key', (c) => { c.services.posbias.enviroment = {}; }, /unknown key enviroment/);
if (fs.existsSync(path.join(repoRoot, 'Dockerfile'))) composeCase('build target that is no stage', (c) => { c.services.posbias.build.target = 'runtim'; }, /build\.target runtim is no stage/);
else console.log('skip  compose: build target that is no stage (no Dockerfile: deploy.dockerfile_lint fails on that)');
composeCase('healthcheck on the wrong port', (c) => { c.services.posbias.healthcheck.test = ['CMD', 'posbias', '--server', '127.0.0.1:50052', 'health']; }, /healthcheck/);
composeCase('missing postgres service', (c) => { delete c.services.postgres; }, /no service postgres/);
composeCase('worker publishing ports', (c) => { c.services['posbias-worker'].ports = ['9465:9464']; }, /cannot publish host ports/);
const workerVolumes = (c, data) => { c.services['posbias-worker'].volumes = [...data, '${POSBIAS_MODELS_DIR:-./models}:/models:ro']; };
composeCase('worker with an anonymous /data', (c) => workerVolumes(c, ['/data']), /posbias-worker: an anonymous volume at \/data/);
composeCase('worker on a volume of its own', (c) => { workerVolumes(c, ['posbias-worker-data:/data']); c.volumes['posbias-worker-data'] = null; }, /mounts volume posbias-worker-data at \/data, services\.posbias mounts volume posbias-data/);
composeCase('worker /data on tmpfs', (c) => { workerVolumes(c, []); c.services['posbias-worker'].tmpfs = ['/tmp', '/data']; }, /a tmpfs at \/data/);
composeCase('worker /data read-only', (c) => workerVolumes(c, ['posbias-data:/data:ro']), /mounts \/data read-only/);
composeCase('variable without default', (c) => { c.services.posbias.environment.POSBIAS_LOG_LEVEL = '${LOG_LEVEL}'; }, /has no default/);

// ---- cert-manager component ---------------------------------------------------------------------------
{
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'posbias-selftest-'));
  fs.writeFileSync(path.join(tmp, 'kustomization.yaml'), YAML.stringify({ apiVersion: 'kustomize.config.k8s.io/v1beta1', kind: 'Kustomization', namespace: 'posbias',
    resources: [path.relative(tmp, path.join(deployDir, 'k8s', 'overlays', 'production'))], components: [path.relative(tmp, path.join(deployDir, 'k8s', 'components', 'cert-manager'))] }));
  const objects = YAML.parseAllDocuments(execFileSync(kubectl, ['kustomize', tmp], { encoding: 'utf8' })).map((d) => d.toJS()).filter(Boolean);
  fs.rmSync(tmp, { recursive: true, force: true });
  const base = checkCertManager(objects);
  const cmCase = (label, mutate, pattern) => { const o = structuredClone(objects); mutate(o); expect(`cert-manager: ${label}`, base, checkCertManager(o), pattern); };
  cmCase('Certificate into another Secret', (o) => { find(o, 'Certificate', 'posbias-tls').spec.secretName = 'posbias-cert'; }, /no Certificate issues the Secret posbias-tls/);
  cmCase('no SAN localhost', (o) => { const c = find(o, 'Certificate', 'posbias-tls'); c.spec.dnsNames = c.spec.dnsNames.filter((n) => n !== 'localhost'); }, /no SAN localhost/);
  cmCase('Issuer missing', (o) => { o.splice(o.indexOf(find(o, 'Issuer', 'posbias-ca')), 1); }, /issuerRef Issuer\/posbias-ca is not in the render/);
}

// ---- Compose lockdown (issue 12) -----------------------------------------------------------------------
{
  const imageEnv = fs.existsSync(path.join(repoRoot, 'Dockerfile')) ? imageDefaults(fs.readFileSync(path.join(repoRoot, 'Dockerfile'), 'utf8')) : {};
  const scriptText = fs.readFileSync(path.join(deployDir, 'compose', 'make-local-certs.sh'), 'utf8');
  const lockProblems = (c, gitignore = 'deploy/compose/secrets/\n') => { const p = new Collect(); checkLockdown(c, p, { imageEnv, scriptText, gitignore }); return p.list; };
  const lockBase = lockProblems(composeBase);
  const lockCase = (label, mutate, pattern, gitignore) => { const c = structuredClone(composeBase); mutate(c); expect(`compose lockdown: ${label}`, lockBase, lockProblems(c, gitignore), pattern); };
  lockCase('gRPC on all interfaces', (c) => { c.services.posbias.ports[0] = '50051:50051'; }, /port "50051:50051" is published on all interfaces/);
  lockCase('Grafana on 0.0.0.0', (c) => { c.services.grafana.ports = ['0.0.0.0:3000:3000']; }, /published on 0\.0\.0\.0/);
  lockCase('another variable', (c) => { c.services.prometheus.ports = ['${PROM_ADDRESS:-127.0.0.1}:9090:9090']; }, /PROM_ADDRESS/);
  lockCase('Grafana anonymous access', (c) => { c.services.grafana.environment.GF_AUTH_ANONYMOUS_ENABLED = 'true'; }, /GF_AUTH_ANONYMOUS_ENABLED true/);
  lockCase('Grafana literal admin password', (c) => { c.services.grafana.environment.GF_SECURITY_ADMIN_PASSWORD = '${GRAFANA_ADMIN_PASSWORD:-admin}'; }, /GF_SECURITY_ADMIN_PASSWORD in the Compose file/);
  lockCase('Grafana without a password file', (c) => { delete c.services.grafana.environment.GF_SECURITY_ADMIN_PASSWORD__FILE; }, /admin\/admin/);
  lockCase('Prometheus lifecycle API', (c) => { c.services.prometheus.command.push('--web.enable-lifecycle'); }, /--web\.enable-lifecycle: anyone/);
  lockCase('API without tokens', (c) => { c.services.posbias.environment.POSBIAS_AUTH_TOKENS_FILE = ''; }, /neither tokens nor a client CA/);
  lockCase('API without TLS', (c) => { c.services.posbias.environment.POSBIAS_TLS_CERT_FILE = ''; c.services.posbias.environment.POSBIAS_TLS_KEY_FILE = ''; }, /without TLS/);
  lockCase('worker inheriting TLS without the files', (c) => { delete c.services['posbias-worker'].environment.POSBIAS_TLS_CERT_FILE; }, /posbias-worker: --tls-cert-file .* comes from no secret/);
  lockCase('TLS file not mounted', (c) => { c.services.posbias.secrets = c.services.posbias.secrets.filter((x) => x.source !== 'posbias-tls-key'); }, /--tls-key-file \/etc\/posbias\/tls\/tls\.key comes from no secret/);
  lockCase('healthcheck without TLS', (c) => { c.services.posbias.healthcheck.test = ['CMD', 'posbias', '--server', '127.0.0.1:50051', 'health']; }, /does not pass --tls/);
  lockCase('secret file the script does not make', (c) => { c.secrets['posbias-tokens'].file = './compose/secrets/auth/other.json'; }, /does not make auth\/other\.json/);
  lockCase('secret file outside the secrets folder', (c) => { c.secrets['posbias-tokens'].file = './tokens.json'; }, /outside deploy\/compose\/secrets/);
  lockCase('secrets folder not git-ignored', () => {}, /does not ignore deploy\/compose\/secrets/, 'build/\n');
}

// ---- Grafana dashboard -----------------------------------------------------------------------------
const dashboard = JSON.parse(fs.readFileSync(path.join(deployDir, 'grafana', 'dashboards', 'posbias.json'), 'utf8'));
const dashProblems = (d) => { const p = new Collect(); checkDashboard(d, 'dashboard', p, { metrics, datasourceUids: new Set(['prometheus']) }); return p.list; };
const dashBaseline = dashProblems(dashboard);
function dashCase(label, mutate, pattern) {
  const d = structuredClone(dashboard);
  mutate(d);
  expect(`dashboard: ${label}`, dashBaseline, dashProblems(d), pattern);
}
const panel = (d, title) => d.panels.find((p) => p.title === title);
dashCase('unknown metric', (d) => { panel(d, 'Queue depth').targets[0].expr = 'max by (state) (posbias_queue_depth)'; }, /unknown metric posbias_queue_depth/);
dashCase('metric without a panel', (d) => { d.panels = d.panels.filter((p) => p.title !== 'Device memory'); }, /no panel of the server metric posbias_device_memory_bytes/);
dashCase('label value misspelt', (d) => { panel(d, 'Queue depth').targets[0].expr = 'max by (state) (posbias_jobs{state="queue"})'; }, /has no value queue/);
dashCase('quantile without le', (d) => { panel(d, 'Job run time').targets[0].expr = 'histogram_quantile(0.5, sum(rate(posbias_job_run_seconds_bucket[5m])))'; }, /drops le/);
dashCase('rate of a gauge', (d) => { panel(d, 'RPCs in flight').targets[0].expr = 'rate(posbias_rpcs_in_flight[5m])'; }, /rate\(\) of the gauge/);
dashCase('syntax error', (d) => { panel(d, 'Uptime').targets[0].expr = 'time() - process_start_time_seconds{'; }, /syntax error/);
dashCase('unprovisioned datasource', (d) => { panel(d, 'Uptime').datasource = { type: 'prometheus', uid: 'prom' }; }, /datasource uid prom/);
dashCase('overlapping panels', (d) => { panel(d, 'Uptime').gridPos = { ...panel(d, 'Versions').gridPos }; }, /overlaps/);

// ---- Dockerfile --------------------------------------------------------------------------------
const realDockerfile = path.join(repoRoot, 'Dockerfile');
const dockerfile = fs.existsSync(realDockerfile) ? fs.readFileSync(realDockerfile, 'utf8') : [
  'ARG BASE=debian:bookworm-slim', 'FROM ${BASE} AS build', 'RUN echo build', 'FROM ${BASE} AS runtime',
  'RUN useradd --uid 10001 posbias', 'USER 10001:10001', 'EXPOSE 50051 9464',
  'HEALTHCHECK --interval=30s --start-period=30s CMD ["posbias", "health"]', 'ENTRYPOINT ["posbias-server"]', ''].join('\n');
const dockerProblems = (text) => { const p = new Collect(); lintDockerfile(path.join(repoRoot, 'Dockerfile'), text, p, { serverEnv, requiredStage: 'runtime' }); return p.list; };
const dockerBaseline = dockerProblems(dockerfile);
const dockerCase = (label, text, pattern) => expect(`Dockerfile: ${label}`, dockerBaseline, dockerProblems(text), pattern);
dockerCase('no USER', dockerfile.replace(/^USER .*$/gm, ''), /runs as root/);
dockerCase('another uid', dockerfile.replace(/^USER .*$/gm, 'USER 1000'), /is not uid 10001/);
dockerCase('metrics port not exposed', dockerfile.replace(/^EXPOSE .*$/gm, 'EXPOSE 50051'), /does not EXPOSE 9464/);
dockerCase('no runtime stage', dockerfile.replace(/ AS runtime\b/g, ' AS final'), /no stage named runtime/);
dockerCase('apt-get without cleanup (dockerfilelint)', `${dockerfile}\nRUN apt-get update && apt-get install -y --no-install-recommends curl\n`, /apt-get_missing_rm/);
dockerCase('bad HEALTHCHECK option', dockerfile.replace(/^HEALTHCHECK /m, 'HEALTHCHECK --every=5s '), /option --every/);
dockerCase('listening off loopback without tokens', dockerfile.replace(/^\s*POSBIAS_AUTH_TOKENS_FILE=\S+ \\\n/m, ''), /neither POSBIAS_AUTH_TOKENS_FILE/);
dockerCase('HEALTHCHECK without TLS', dockerfile.replace(/\$\{POSBIAS_TLS_CERT_FILE:\+--tls /, '${POSBIAS_TLS_CERT_FILE:+'), /HEALTHCHECK does not switch to --tls/);
dockerCase('untagged base image (dockerfilelint)', `FROM ubuntu AS extra\n${dockerfile}`, /missing_tag/);

// ---- README metrics table ----------------------------------------------------------------------
const readme = fs.readFileSync(path.join(deployDir, 'README.md'), 'utf8');
const docProblems = (text) => { const p = new Collect(); checkDocs(text, metrics, p); return p.list; };
const docBaseline = docProblems(readme);
expect('README: metric missing from the table', docBaseline, docProblems(readme.replace(/^\| `posbias_jobs` \|.*$/m, '')), /lacks posbias_jobs/);
expect('README: wrong label in the table', docBaseline, docProblems(readme.replace(/(\| `process_memory_bytes` \| gauge \| )`type`/, '$1`kind`')), /process_memory_bytes has labels/);
expect('README: wrong type in the table', docBaseline, docProblems(readme.replace(/(\| `posbias_jobs` \| )gauge/, '$1counter')), /is a gauge, the table says counter/);

// ---- PromQL on its own ---------------------------------------------------------------------------
expect('PromQL: recording rule names are accepted only when recorded', [], checkPromQL('posbias:jobs:max', metrics), /unknown metric posbias:jobs:max/);
expect('PromQL: grouping by a label no metric has', [], checkPromQL('sum by (device) (posbias_jobs)', metrics), /groups by device/);
expect('PromQL: quantile over `without (le)`', [], checkPromQL('histogram_quantile(0.5, sum without (le) (rate(posbias_job_run_seconds_bucket[5m])))', metrics), /drops le/);
if (adapterProblems.list.length) { failures++; console.error(`FAIL  prometheus-adapter values: ${adapterProblems.list.join('; ')}`); }

console.log('');
if (failures) { console.error(`${failures} of ${count} broken inputs went unnoticed`); process.exitCode = 1; }
else console.log(`all ${count} broken inputs were caught`);
