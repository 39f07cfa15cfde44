// What the schemas cannot see in a rendered overlay: the contract between the objects (selectors,
// references, autoscaling targets), with the server (probes, ports, environment, roles and job
// store) and with the GPU nodes. checkRender(objects, context) returns a list of problem strings.
import { checkEnvVar, serverFlags, SECURITY_ENV } from './server_contract.mjs';
import { checkPromQL } from './promql.mjs';

export const GRPC_PORT = 50051;
export const METRICS_PORT = 9464;
export const API_SERVICES = ['posbias.v1.DensityService', 'posbias.v1.ModelService', 'posbias.v1.JobService'];
// NetworkPolicy contract (deploy/k8s/base/networkpolicy.yaml): who may reach which port.
export const CLIENT_NAMESPACE_LABEL = ['posbias.io/client', 'true'];
export const MONITORING_NAMESPACE_LABEL = ['kubernetes.io/metadata.name', 'monitoring'];
const GPU = 'nvidia.com/gpu';
const CLUSTER_SCOPED = new Set(['Namespace', 'PersistentVolume', 'ClusterRole', 'ClusterRoleBinding', 'StorageClass', 'PriorityClass']);

const id = (o) => `${o.kind}/${o.metadata?.name}`;
const matches = (selector, labels) => {
  if (!selector) return false;
  const ml = selector.matchLabels ?? {};
  const ok = Object.entries(ml).every(([k, v]) => labels?.[k] === v);
  const me = (selector.matchExpressions ?? []).every((e) => {
    const v = labels?.[e.key];
    switch (e.operator) {
      case 'In': return e.values.includes(v);
      case 'NotIn': return !e.values.includes(v);
      case 'Exists': return v !== undefined;
      case 'DoesNotExist': return v === undefined;
      default: return false;
    }
  });
  return (Object.keys(ml).length > 0 || (selector.matchExpressions ?? []).length > 0) && ok && me;
};
const matchesMap = (selector, labels) => Object.keys(selector ?? {}).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v);
const portOf = (address) => Number(String(address ?? '').split(':').pop());
const hostOf = (address) => String(address ?? '').replace(/:\d+$/, '').replace(/^\[(.*)\]$/, '$1');
export const isLoopback = (address) => /^(127\.\d+\.\d+\.\d+|::1|localhost)$/.test(hostOf(address));
const truthy = (v) => /^(true|1|on|yes)$/i.test(String(v ?? ''));

// The server flags a container sets: its args (--name=value, --name value, bare flags) over the
// POSBIAS_* environment (ConfigMaps and env; a valueFrom counts as set). { '--flag': value|true }.
export function serverSettings(container, env, flags) {
  const settings = {};
  for (const [envName, flag] of Object.entries(SECURITY_ENV)) {
    const e = env[envName];
    if (e && (e.from || e.value !== '')) settings[flag] = e.from ? '(from a reference)' : e.value;
  }
  const args = [...(container.command ?? []).slice(1), ...(container.args ?? [])].map(String);
  const unknown = [];
  for (let i = 0; i < args.length; i++) {
    const m = args[i].match(/^(--[a-z0-9-]+)(?:=(.*))?$/);
    if (!m) continue;
    const known = flags[m[1]];
    if (!known) { unknown.push(m[1]); continue; }
    if (m[2] !== undefined) settings[m[1]] = m[2];
    else if (known.flag) settings[m[1]] = true;
    else settings[m[1]] = args[++i];
    if (settings[m[1]] === '') delete settings[m[1]];
  }
  return { settings, unknown };
}
// The volume mount holding a container path: the longest mountPath that is a prefix of it.
const mountOf = (container, file) => (container.volumeMounts ?? [])
  .filter((m) => file === m.mountPath || file.startsWith(`${m.mountPath.replace(/\/$/, '')}/`))
  .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
// The Secret a volume projects: { name, items } from secret or projected sources.
const secretsOfVolume = (v) => [
  ...(v?.secret ? [{ name: v.secret.secretName, items: v.secret.items }] : []),
  ...(v?.projected?.sources ?? []).filter((x) => x.secret).map((x) => ({ name: x.secret.name, items: x.secret.items })),
];

// The command line of an exec probe running the bundled CLI: { server, tls, caFile, service, health }.
function cliProbe(command) {
  const c = (command ?? []).map(String);
  if (!/(^|\/)posbias$/.test(c[0] ?? '')) return null;
  const value = (name) => { const i = c.findIndex((x) => x === name || x.startsWith(`${name}=`)); if (i < 0) return undefined; return c[i].includes('=') ? c[i].split('=').slice(1).join('=') : c[i + 1]; };
  const health = c.indexOf('health');
  return { server: value('--server') ?? value('-s'), tls: c.includes('--tls'), caFile: value('--ca-file'), certFile: value('--cert-file'), keyFile: value('--key-file'), serverName: value('--tls-server-name'), service: health >= 0 ? (value('--service') ?? '') : undefined, health: health >= 0 };
}
const quantity = (q) => {
  const m = String(q).match(/^([0-9.]+)(m|Ki|Mi|Gi|Ti|k|M|G)?$/);
  if (!m) return NaN;
  const f = { m: 1e-3, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9 }[m[2]] ?? 1;
  return Number(m[1]) * f;
};

// The environment a container starts with: ConfigMaps from envFrom, then env (valueFrom as a marker).
export function containerEnvironment(container, configMaps) {
  const env = {};
  for (const from of container.envFrom ?? []) {
    const cm = from.configMapRef && configMaps[from.configMapRef.name];
    if (cm) Object.assign(env, Object.fromEntries(Object.entries(cm.data ?? {}).map(([k, v]) => [k, { value: v }])));
  }
  for (const e of container.env ?? []) env[e.name] = e.valueFrom ? { from: e.valueFrom } : { value: e.value ?? '' };
  return env;
}

const roleOf = (env) => env.POSBIAS_ROLE?.value ?? 'both';
// A store several processes can share (PostgreSQL); anything else is the embedded SQLite file.
const sharedStore = (env) => Boolean(env.POSBIAS_JOB_STORE && (env.POSBIAS_JOB_STORE.from || /^postgres(ql)?:\/\//.test(env.POSBIAS_JOB_STORE.value)));
const serverOf = (d) => (d.spec?.template?.spec?.containers ?? []).find((c) => c.name === 'posbias');

// Where a Deployment keeps POSBIAS_DATA_DIR: { dir, mount, volume, claim } (mount/volume/claim may be undefined).
export function dataVolume(d, configMaps) {
  const server = serverOf(d) ?? {};
  const dir = containerEnvironment(server, configMaps).POSBIAS_DATA_DIR?.value ?? '/data';
  const mount = (server.volumeMounts ?? []).find((m) => m.mountPath === dir);
  const volume = mount && (d.spec.template.spec.volumes ?? []).find((v) => v.name === mount.name);
  return { dir, mount, volume, claim: volume?.persistentVolumeClaim?.claimName };
}
const volumeKind = (v) => (v ? Object.keys(v).find((k) => k !== 'name') ?? 'no source' : 'no volume');

function checkDeployment(d, ctx, problems) {
  const where = id(d);
  const pod = d.spec?.template ?? {};
  const spec = pod.spec ?? {};
  const add = (m) => problems.push(`${where}: ${m}`);
  if (!matches(d.spec?.selector, pod.metadata?.labels)) add('spec.selector does not select its own pod template');
  for (const label of ['app.kubernetes.io/name', 'app.kubernetes.io/component', 'app.kubernetes.io/part-of', 'app.kubernetes.io/version']) {
    if (!pod.metadata?.labels?.[label]) add(`pod template lacks the label ${label}`);
  }
  if (spec.serviceAccountName && !ctx.byKind('ServiceAccount').some((s) => s.metadata.name === spec.serviceAccountName)) {
    add(`serviceAccountName ${spec.serviceAccountName} is not in the render`);
  }
  const podSecurity = spec.securityContext ?? {};
  const containers = spec.containers ?? [];
  const server = containers.find((c) => c.name === 'posbias');
  if (!server) { add('has no container named posbias'); return; }
  const volumes = Object.fromEntries((spec.volumes ?? []).map((v) => [v.name, v]));
  for (const v of spec.volumes ?? []) {
    if (!containers.some((c) => (c.volumeMounts ?? []).some((m) => m.name === v.name))) add(`volume ${v.name} is mounted by no container`);
    const claim = v.persistentVolumeClaim?.claimName;
    if (claim && !ctx.byKind('PersistentVolumeClaim').some((p) => p.metadata.name === claim) && !ctx.externalClaims.has(claim)) {
      add(`volume ${v.name} claims ${claim}, which is neither in the render nor a documented prerequisite`);
    }
    if (v.configMap && !ctx.configMaps[v.configMap.name]) add(`volume ${v.name} uses ConfigMap ${v.configMap.name}, not in the render`);
  }
  for (const c of containers) {
    const cw = `container ${c.name}`;
    for (const m of c.volumeMounts ?? []) if (!volumes[m.name]) add(`${cw} mounts ${m.name}, which is not a volume of the pod`);
    for (const from of c.envFrom ?? []) {
      if (from.configMapRef && !ctx.configMaps[from.configMapRef.name]) add(`${cw} envFrom ConfigMap ${from.configMapRef.name} is not in the render`);
      if (from.secretRef) add(`${cw} takes a whole Secret as environment (envFrom.secretRef): name the keys`);
    }
    for (const e of c.env ?? []) {
      const secret = e.valueFrom?.secretKeyRef;
      if (secret) {
        const inRender = ctx.byKind('Secret').find((s) => s.metadata.name === secret.name);
        const keys = inRender ? Object.keys({ ...inRender.data, ...inRender.stringData }) : ctx.externalSecrets[secret.name];
        if (!keys) add(`${cw} env ${e.name} reads Secret ${secret.name}, neither in the render nor documented (secret.example.yaml)`);
        else if (!keys.includes(secret.key)) add(`${cw} env ${e.name} reads key ${secret.key} of Secret ${secret.name}, which has ${keys.join(', ')}`);
      }
      const cmRef = e.valueFrom?.configMapKeyRef;
      if (cmRef && !ctx.configMaps[cmRef.name]?.data?.[cmRef.key]) add(`${cw} env ${e.name} reads ${cmRef.name}/${cmRef.key}, not in the render`);
    }
    for (const e of c.env ?? []) { // (ConfigMap entries are checked with the ConfigMap)
      const problem = checkEnvVar(ctx.serverEnv, e.name, e.valueFrom ? undefined : e.value ?? '');
      if (problem) add(`${cw}: ${problem}`);
    }
    const sc = c.securityContext ?? {};
    if (!(sc.runAsNonRoot ?? podSecurity.runAsNonRoot)) add(`${cw} may run as root (runAsNonRoot is not true)`);
    const uid = sc.runAsUser ?? podSecurity.runAsUser;
    if (uid !== undefined && uid !== ctx.uid) add(`${cw} runs as uid ${uid}, the image's user is ${ctx.uid}`);
    if (sc.allowPrivilegeEscalation !== false) add(`${cw} allows privilege escalation`);
    if (!(sc.capabilities?.drop ?? []).includes('ALL')) add(`${cw} does not drop all capabilities`);
    if (sc.readOnlyRootFilesystem !== true) add(`${cw} has a writable root filesystem (readOnlyRootFilesystem is not true)`);
    if ((sc.seccompProfile ?? podSecurity.seccompProfile)?.type !== 'RuntimeDefault') add(`${cw} has no seccomp profile RuntimeDefault`);
    if (sc.privileged) add(`${cw} is privileged`);
    const requests = c.resources?.requests ?? {};
    const limits = c.resources?.limits ?? {};
    if (!requests.cpu || !requests.memory) add(`${cw} lacks cpu and memory requests`);
    if (!limits.memory) add(`${cw} lacks a memory limit`);
    for (const [r, q] of Object.entries(limits)) {
      if (requests[r] !== undefined && quantity(requests[r]) > quantity(q)) add(`${cw} requests more ${r} (${requests[r]}) than its limit (${q})`);
    }
    if (requests[GPU] !== undefined && String(requests[GPU]) !== String(limits[GPU])) add(`${cw}: ${GPU} requests must equal limits`);
  }

  // The server container: ports, probes, role, store, drain, filesystem, GPU.
  const env = containerEnvironment(server, ctx.configMaps);
  const role = roleOf(env);
  const ports = Object.fromEntries((server.ports ?? []).map((p) => [p.name, p.containerPort]));
  const listen = env.POSBIAS_LISTEN?.value;
  const loopback = isLoopback(listen);
  if (loopback) {
    if (ports.grpc !== undefined) add(`container port grpc ${ports.grpc}, but POSBIAS_LISTEN ${listen} is loopback: nothing outside the pod reaches it`);
    if (role !== 'worker') add(`an API pod (role ${role}) listens on loopback (${listen}): no client can reach it`);
  } else if (ports.grpc !== GRPC_PORT) add(`container port grpc is ${ports.grpc}, expected ${GRPC_PORT}`);
  if (ports.metrics !== METRICS_PORT) add(`container port metrics is ${ports.metrics}, expected ${METRICS_PORT}`);
  if (portOf(listen) !== GRPC_PORT) add(`POSBIAS_LISTEN (${listen}) does not listen on ${GRPC_PORT}`);
  if (portOf(env.POSBIAS_METRICS_LISTEN?.value) !== METRICS_PORT) add(`POSBIAS_METRICS_LISTEN (${env.POSBIAS_METRICS_LISTEN?.value}) does not listen on ${METRICS_PORT}`);

  // Security flags (issue 12): a listener off loopback authenticates (tokens or client certificates)
  // unless told --allow-unauthenticated; API pods serve TLS; every file comes from a Secret mounted
  // read-only as a directory (a subPath mount never sees a renewed certificate or an edited tokens file).
  const { settings, unknown } = serverSettings(server, env, ctx.serverFlags);
  for (const u of unknown) add(`args: ${u} is not a flag of posbias-server (server/main.cc, or the security flags of issue 12)`);
  const tls = Boolean(settings['--tls-cert-file']);
  if (Boolean(settings['--tls-cert-file']) !== Boolean(settings['--tls-key-file'])) add('sets only one of --tls-cert-file and --tls-key-file');
  if (settings['--tls-client-ca-file'] && !tls) add('--tls-client-ca-file (mTLS) without --tls-cert-file');
  if (!loopback) {
    if (!settings['--auth-tokens-file'] && !settings['--tls-client-ca-file'] && !truthy(settings['--allow-unauthenticated'])) {
      add(`listens on ${listen} with neither --auth-tokens-file nor --tls-client-ca-file (the server refuses to start; --allow-unauthenticated only behind a mesh that authenticates)`);
    }
    if (!tls && role !== 'worker' && !truthy(settings['--allow-unauthenticated'])) add(`serves the API on ${listen} without TLS (--tls-cert-file/--tls-key-file): bearer tokens would cross the network in clear text`);
  }
  for (const flag of ['--tls-cert-file', '--tls-key-file', '--tls-client-ca-file', '--auth-tokens-file']) {
    const file = settings[flag];
    if (!file || typeof file !== 'string') continue;
    if (!file.startsWith('/')) { add(`${flag} ${file} is not an absolute path`); continue; }
    const mount = mountOf(server, file);
    const volume = mount && volumes[mount.name];
    if (!mount) { add(`${flag} ${file} is on no mounted volume (the image holds no secrets)`); continue; }
    if (!mount.readOnly) add(`${flag} ${file}: volume ${mount.name} is mounted writable at ${mount.mountPath}; mount secrets readOnly: true`);
    if (mount.subPath || mount.subPathExpr) add(`${flag} ${file}: volume ${mount.name} is mounted with a subPath, which never sees an updated Secret`);
    const secrets = secretsOfVolume(volume);
    if (secrets.length === 0) { add(`${flag} ${file}: volume ${mount.name} is a ${volumeKind(volume)}, not a Secret`); continue; }
    const key = file.slice(mount.mountPath.replace(/\/$/, '').length + 1);
    const found = secrets.some((sec) => {
      const item = (sec.items ?? []).find((it) => it.path === key);
      const secretKey = sec.items ? item?.key : key;
      if (!secretKey) return false;
      const inRender = ctx.byKind('Secret').find((x) => x.metadata.name === sec.name);
      const keys = inRender ? Object.keys({ ...inRender.data, ...inRender.stringData }) : ctx.externalSecrets[sec.name];
      const issued = ctx.byKind('Certificate').some((x) => x.spec?.secretName === sec.name) && ['tls.crt', 'tls.key', 'ca.crt'].includes(secretKey);
      if (!keys && !issued) { add(`${flag} ${file}: Secret ${sec.name} is neither in the render, nor issued by a Certificate, nor documented (secret.example.yaml)`); return true; }
      return issued || keys.includes(secretKey);
    });
    if (!found) add(`${flag} ${file}: no key ${key} in Secret(s) ${secrets.map((x) => x.name).join(', ')} of volume ${mount.name}`);
  }

  // Probes: the kubelet's native gRPC probe speaks no TLS. With TLS on, startup and readiness run
  // the bundled CLI over TLS inside the container; on a loopback listener the kubelet cannot connect
  // at all. Liveness may instead be the plain-HTTP /healthz of the metrics listener.
  for (const [probeName, probe] of [['livenessProbe', server.livenessProbe], ['readinessProbe', server.readinessProbe], ['startupProbe', server.startupProbe]]) {
    if (!probe) { if (probeName !== 'startupProbe') add(`no ${probeName}`); continue; }
    const apiReadiness = probeName === 'readinessProbe' && role !== 'worker';
    let service;
    if (probe.httpGet) {
      const port = probe.httpGet.port;
      if (probeName !== 'livenessProbe') { add(`${probeName} is an HTTP probe: /healthz says the process is up, not that gRPC serves (use gRPC health)`); continue; }
      if (port !== METRICS_PORT && port !== 'metrics') add(`livenessProbe probes HTTP port ${port}, not the metrics port ${METRICS_PORT}`);
      if (probe.httpGet.path !== '/healthz') add(`livenessProbe probes ${probe.httpGet.path}, not /healthz`);
      if ((probe.httpGet.scheme ?? 'HTTP') !== 'HTTP') add('livenessProbe: the metrics listener speaks plain HTTP');
      continue;
    } else if (probe.grpc) {
      if (tls) { add(`${probeName} is a native gRPC probe, which cannot speak TLS to a server with --tls-cert-file`); continue; }
      if (loopback) { add(`${probeName} is a native gRPC probe, but the server listens on loopback (${listen}), out of the kubelet's reach`); continue; }
      if (probe.grpc.port !== GRPC_PORT) add(`${probeName} probes port ${probe.grpc.port}, not ${GRPC_PORT}`);
      service = probe.grpc.service ?? '';
    } else if (probe.exec) {
      const cli = cliProbe(probe.exec.command);
      if (!cli || !cli.health) { add(`${probeName} runs ${JSON.stringify(probe.exec.command)}, not \`posbias ... health\``); continue; }
      if (cli.server !== `127.0.0.1:${GRPC_PORT}`) add(`${probeName} asks --server ${cli.server}, not 127.0.0.1:${GRPC_PORT}`);
      if (tls && !cli.tls) add(`${probeName} runs the CLI without --tls against a TLS server`);
      if (!tls && cli.tls) add(`${probeName} runs the CLI with --tls against a server without TLS`);
      if (tls && cli.tls) {
        if (!cli.caFile) add(`${probeName} runs the CLI with --tls but no --ca-file`);
        else if (!mountOf(server, cli.caFile) || !mountOf(server, cli.caFile).readOnly) add(`${probeName}: --ca-file ${cli.caFile} is on no read-only mount`);
        if (settings['--tls-client-ca-file'] && !(cli.certFile && cli.keyFile)) add(`${probeName}: mTLS is on (--tls-client-ca-file) but the probe presents no client certificate (--cert-file/--key-file)`);
        if (!cli.serverName) add(`${probeName} connects to 127.0.0.1 over TLS without --tls-server-name (the certificate would need the SAN 127.0.0.1)`);
      }
      if (!probe.timeoutSeconds || probe.timeoutSeconds < 3) add(`${probeName}: an exec probe starts a process; give it timeoutSeconds >= 3 (has ${probe.timeoutSeconds ?? 1})`);
      service = cli.service;
    } else { add(`${probeName} is neither a gRPC health check nor the liveness /healthz`); continue; }
    if (apiReadiness) {
      if (!API_SERVICES.includes(service)) add(`readinessProbe of an API pod (role ${role}) asks for "${service}", not one of ${API_SERVICES.join(', ')}`);
    } else if (service !== '') {
      add(`${probeName} asks for service "${service}"; a ${role === 'worker' ? 'worker' : probeName === 'livenessProbe' ? 'liveness probe' : 'startup probe'} should ask for the overall "" status`);
    }
  }
  if (!['api', 'worker', 'both'].includes(role)) add(`POSBIAS_ROLE ${role} is not api, worker or both`);
  const store = env.POSBIAS_JOB_STORE;
  const shared = sharedStore(env);
  if (store?.value && !/^postgres(ql)?:\/\//.test(store.value)) add(`POSBIAS_JOB_STORE ${store.value} is not a postgresql:// URI`);
  if (store?.value && /:\/\/[^/@]*:[^/@]+@/.test(store.value)) add('POSBIAS_JOB_STORE carries a password in the manifest: read it from a Secret');
  if (role !== 'both' && !shared) add(`role ${role} without a shared POSBIAS_JOB_STORE: ${role === 'api' ? 'no worker can see its jobs' : 'it has no jobs to run'}`);
  if (!shared) {
    if ((d.spec?.replicas ?? 1) !== 1) add('the embedded SQLite store allows one replica');
    if (ctx.byKind('HorizontalPodAutoscaler').some((h) => h.spec?.scaleTargetRef?.name === d.metadata.name)) add('autoscaled, but the embedded SQLite store allows one replica');
    const dataClaim = (spec.volumes ?? []).find((v) => v.persistentVolumeClaim && (server.volumeMounts ?? []).some((m) => m.name === v.name && m.mountPath === (env.POSBIAS_DATA_DIR?.value ?? '/data')));
    if (dataClaim && d.spec?.strategy?.type !== 'Recreate') add('one SQLite file on a ReadWriteOnce claim needs strategy Recreate (a rolling update would run two pods on it)');
  }
  const drain = Number(env.POSBIAS_DRAIN_SECONDS?.value ?? 10);
  const grace = spec.terminationGracePeriodSeconds ?? 30;
  if (!(grace > drain)) add(`terminationGracePeriodSeconds ${grace} is not longer than POSBIAS_DRAIN_SECONDS ${drain}`);
  const sc = server.securityContext ?? {};
  if (sc.readOnlyRootFilesystem) {
    const mounted = (server.volumeMounts ?? []).filter((m) => !m.readOnly).map((m) => m.mountPath);
    for (const dir of ['/tmp', env.POSBIAS_DATA_DIR?.value ?? '/data']) {
      if (!mounted.includes(dir)) add(`read-only root filesystem but no writable volume at ${dir}`);
    }
  }
  if (env.POSBIAS_MODEL_ROOT?.value && !(server.volumeMounts ?? []).some((m) => m.mountPath === env.POSBIAS_MODEL_ROOT.value)) {
    add(`POSBIAS_MODEL_ROOT ${env.POSBIAS_MODEL_ROOT.value} is not a mounted volume`);
  }
  const annotations = pod.metadata?.annotations ?? {};
  if (annotations['prometheus.io/scrape'] === 'true' && Number(annotations['prometheus.io/port']) !== METRICS_PORT) {
    add(`prometheus.io/port ${annotations['prometheus.io/port']} is not the metrics port ${METRICS_PORT}`);
  }
  const gpus = Number(server.resources?.limits?.[GPU] ?? 0);
  const cudaImage = /-cuda$/.test(server.image ?? '');
  const cpuWorker = !/^(false|0|off|no)$/i.test(env.POSBIAS_CPU_WORKER?.value ?? 'true');
  if (role !== 'api' && !cpuWorker && gpus < 1) add('runs jobs on CUDA devices only (POSBIAS_CPU_WORKER=false) but requests no GPU');
  if (gpus > 0) {
    if (!cudaImage) add(`requests ${GPU} but runs the CPU image ${server.image}`);
    if (role === 'api') add('an API pod holds a GPU it never uses');
    if (!(spec.tolerations ?? []).some((t) => t.key === GPU && (t.effect === 'NoSchedule' || !t.effect) && (t.operator === 'Exists' || t.operator === 'Equal'))) {
      add(`requests ${GPU} but does not tolerate the ${GPU}:NoSchedule taint`);
    }
    if (!spec.nodeSelector && !spec.affinity?.nodeAffinity) add('requests a GPU without a nodeSelector or node affinity for GPU nodes');
  } else if (cudaImage) {
    add('runs the CUDA image without requesting a GPU');
  }
  return role;
}

// The registry (models.json, uploads/) lives in POSBIAS_DATA_DIR, not in the job store. Pods on a
// shared store see each other's models only through one data directory: when the render runs more
// than one such pod (several Deployments, or replicas/an HPA above one), every one of them must mount
// the same ReadWriteMany claim at the same path (upload paths in models.json are absolute), writable,
// without a subPath of its own. And no embedded SQLite store may sit on a claim that is
// ReadWriteMany or mounted by another Deployment (several processes on one SQLite file).
function checkDataSharing(deployments, ctx) {
  const problems = [];
  const envOf = (d) => containerEnvironment(serverOf(d) ?? {}, ctx.configMaps);
  const maxReplicas = (d) => Math.max(d.spec?.replicas ?? 1,
    ...ctx.byKind('HorizontalPodAutoscaler').filter((h) => h.spec?.scaleTargetRef?.kind === 'Deployment' && h.spec.scaleTargetRef.name === d.metadata.name).map((h) => h.spec.maxReplicas ?? 1));
  const claimObject = (name) => ctx.byKind('PersistentVolumeClaim').find((p) => p.metadata.name === name);
  const withServer = deployments.filter((d) => serverOf(d));
  const onShared = withServer.filter((d) => sharedStore(envOf(d)));
  const pods = onShared.reduce((n, d) => n + maxReplicas(d), 0);
  if (onShared.length > 1 || pods > 1) {
    const data = onShared.map((d) => ({ d, ...dataVolume(d, ctx.configMaps) }));
    const why = `${onShared.length} Deployment(s) (up to ${pods} pods) on the shared job store`;
    for (const x of data) {
      const where = id(x.d);
      if (!x.mount) { problems.push(`${where}: nothing mounted at POSBIAS_DATA_DIR ${x.dir}; ${why} must share it through one ReadWriteMany claim`); continue; }
      if (!x.claim) {
        problems.push(`${where}: POSBIAS_DATA_DIR ${x.dir} is a per-pod ${volumeKind(x.volume)}, but ${why} must share it: a model registered through one pod would stay unknown to the others; mount the shared ReadWriteMany claim (components/shared-data)`);
        continue;
      }
      if (x.mount.readOnly || x.volume.persistentVolumeClaim.readOnly) problems.push(`${where}: mounts the shared data claim ${x.claim} read-only at ${x.dir}`);
      if (x.mount.subPath || x.mount.subPathExpr) problems.push(`${where}: mounts ${x.claim} at ${x.dir} with subPath ${x.mount.subPath ?? x.mount.subPathExpr}: every pod must see the same directory`);
      const pvc = claimObject(x.claim);
      if (!pvc) problems.push(`${where}: the shared data claim ${x.claim} is not in the render (its access mode cannot be checked)`);
      else if (!(pvc.spec?.accessModes ?? []).includes('ReadWriteMany')) {
        problems.push(`PersistentVolumeClaim/${x.claim}: access modes ${JSON.stringify(pvc.spec?.accessModes ?? [])}, but ${why} mount it at ${x.dir} from any node: it must be ReadWriteMany`);
      }
    }
    const claims = [...new Set(data.filter((x) => x.claim).map((x) => x.claim))];
    if (claims.length > 1) problems.push(`pods on the shared store mount different claims at their data directory (${data.filter((x) => x.claim).map((x) => `${id(x.d)}: ${x.claim}`).join(', ')}): registered models would not reach all of them`);
    const dirs = [...new Set(data.map((x) => x.dir))];
    if (dirs.length > 1) problems.push(`pods on the shared store use different POSBIAS_DATA_DIR (${data.map((x) => `${id(x.d)}: ${x.dir}`).join(', ')}): models.json records uploads by absolute path`);
  }
  for (const d of withServer.filter((x) => !sharedStore(envOf(x)))) {
    const { dir, claim } = dataVolume(d, ctx.configMaps);
    if (!claim) continue;
    const pvc = claimObject(claim);
    if ((pvc?.spec?.accessModes ?? []).includes('ReadWriteMany')) {
      problems.push(`${id(d)}: the embedded SQLite store (${dir}/jobs.sqlite) on the ReadWriteMany claim ${claim}: several pods could open one SQLite file, and network filesystems break its locking; use PostgreSQL (POSBIAS_JOB_STORE) there`);
    }
    for (const other of withServer.filter((x) => x !== d && (x.spec.template.spec.volumes ?? []).some((v) => v.persistentVolumeClaim?.claimName === claim))) {
      problems.push(`${id(d)}: the embedded SQLite store (${dir}/jobs.sqlite) on the claim ${claim}, which ${id(other)} mounts too`);
    }
  }
  return [...new Set(problems)];
}

// NetworkPolicies (issue 12): a default deny of all ingress in the namespace; every posbias pod
// isolated by a policy; API pods admit gRPC only from namespaces labelled posbias.io/client=true;
// every pod admits metrics only from the namespace monitoring; nothing else (workers: metrics only).
// Every rule names its sources and its ports; a Service is ClusterIP and exposes only ports the
// policies restrict.
function checkNetworkPolicies(deployments, ctx) {
  const problems = [];
  const policies = ctx.byKind('NetworkPolicy').filter((n) => !n.spec?.policyTypes || n.spec.policyTypes.includes('Ingress'));
  const emptySelector = (sel) => !sel || (Object.keys(sel.matchLabels ?? {}).length === 0 && (sel.matchExpressions ?? []).length === 0);
  const selects = (n, labels) => emptySelector(n.spec?.podSelector) || matches(n.spec.podSelector, labels);
  if (!policies.some((n) => emptySelector(n.spec?.podSelector) && !(n.spec?.ingress ?? []).length)) {
    problems.push('no default-deny NetworkPolicy (podSelector {}, policyTypes [Ingress], no ingress rules): every pod of the namespace accepts connections from the whole cluster');
  }
  const [clientKey, clientValue] = CLIENT_NAMESPACE_LABEL;
  const [monKey, monValue] = MONITORING_NAMESPACE_LABEL;
  const peerKind = (peer) => {
    if (peer.ipBlock) return `ipBlock ${peer.ipBlock.cidr}`;
    if (!peer.namespaceSelector) return 'pods of its own namespace';
    const ml = peer.namespaceSelector.matchLabels ?? {};
    if (ml[clientKey] === clientValue) return 'clients';
    if (ml[monKey] === monValue) return 'monitoring';
    return emptySelector(peer.namespaceSelector) ? 'every namespace' : `namespaces ${JSON.stringify(peer.namespaceSelector)}`;
  };
  const isolated = new Map();
  for (const d of deployments) {
    const labels = d.spec?.template?.metadata?.labels ?? {};
    const server = serverOf(d) ?? {};
    const role = roleOf(containerEnvironment(server, ctx.configMaps));
    const where = id(d);
    const selecting = policies.filter((n) => selects(n, labels));
    isolated.set(d, selecting.length > 0);
    if (selecting.length === 0) { problems.push(`${where}: no NetworkPolicy selects its pods: they accept connections from the whole cluster`); continue; }
    const named = Object.fromEntries((d.spec.template.spec.containers ?? []).flatMap((x) => x.ports ?? []).map((p) => [p.name, p.containerPort]));
    const admitted = new Map();
    for (const n of selecting) {
      for (const [i, rule] of (n.spec?.ingress ?? []).entries()) {
        const rw = `NetworkPolicy/${n.metadata.name} ingress[${i}]`;
        if (!(rule.from ?? []).length) { problems.push(`${rw}: admits every source (no from:)`); continue; }
        if (!(rule.ports ?? []).length) { problems.push(`${rw}: admits every port (no ports:)`); continue; }
        for (const port of rule.ports) {
          const number = typeof port.port === 'string' ? named[port.port] : port.port;
          if (number === undefined) { problems.push(`${rw}: port ${port.port} is no container port of ${where}`); continue; }
          if (port.endPort) problems.push(`${rw}: a port range (endPort) admits more than the server's ports`);
          for (const peer of rule.from) {
            if (!admitted.has(number)) admitted.set(number, new Set());
            admitted.get(number).add(peerKind(peer));
          }
        }
      }
    }
    const wanted = new Map([[METRICS_PORT, 'monitoring']]);
    if (role !== 'worker') wanted.set(GRPC_PORT, 'clients');
    for (const [port, kinds] of admitted) {
      const want = wanted.get(port);
      if (!want) { problems.push(`${where}: NetworkPolicies admit port ${port} (from ${[...kinds].join(', ')}); ${role === 'worker' ? 'a worker takes no ingress but metrics' : 'only gRPC and metrics are served'}`); continue; }
      for (const k of kinds) if (k !== want) problems.push(`${where}: port ${port} admitted from ${k}; only ${want === 'clients' ? `namespaces labelled ${clientKey}=${clientValue}` : `the namespace ${monValue} (${monKey})`}`);
    }
    for (const [port, want] of wanted) {
      if (!admitted.has(port)) problems.push(`${where}: no NetworkPolicy admits port ${port} from ${want === 'clients' ? `namespaces labelled ${clientKey}=${clientValue}` : `the namespace ${monValue}`}: ${want === 'clients' ? 'no client can reach the API' : 'Prometheus cannot scrape it'}`);
    }
  }
  for (const svc of ctx.byKind('Service')) {
    const type = svc.spec?.type ?? 'ClusterIP';
    if (type !== 'ClusterIP') problems.push(`${id(svc)}: type ${type} exposes posbias outside the cluster; keep it ClusterIP (expose gRPC through an ingress/gateway that you secure)`);
    for (const d of deployments.filter((x) => matchesMap(svc.spec?.selector, x.spec.template.metadata.labels))) {
      if (!isolated.get(d)) for (const p of svc.spec.ports ?? []) problems.push(`${id(svc)}: exposes port ${p.name} (${p.port}) of ${id(d)} to the whole cluster: no NetworkPolicy restricts it`);
    }
  }
  return problems;
}

export function checkRender(objects, ctx) {
  const problems = [];
  const byKind = (kind) => objects.filter((o) => o.kind === kind);
  const configMaps = Object.fromEntries(byKind('ConfigMap').map((c) => [c.metadata.name, c]));
  const c = { ...ctx, byKind, configMaps, serverFlags: ctx.serverFlags ?? serverFlags() };
  const seen = new Set();
  const namespaces = new Set(byKind('Namespace').map((n) => n.metadata.name));
  for (const o of objects) {
    const key = `${o.apiVersion?.split('/')[0]}/${id(o)}`;
    if (seen.has(key)) problems.push(`${id(o)}: defined twice`);
    seen.add(key);
    if (!o.metadata?.labels?.['app.kubernetes.io/name'] || !o.metadata?.labels?.['app.kubernetes.io/part-of']) {
      problems.push(`${id(o)}: lacks the labels app.kubernetes.io/name and app.kubernetes.io/part-of`);
    }
    if (!CLUSTER_SCOPED.has(o.kind)) {
      if (!o.metadata?.namespace) problems.push(`${id(o)}: has no namespace (the overlay must set one)`);
      else if (!namespaces.has(o.metadata.namespace)) problems.push(`${id(o)}: namespace ${o.metadata.namespace} is not created by the overlay`);
    }
  }
  for (const [name, cm] of Object.entries(configMaps)) {
    for (const [k, v] of Object.entries(cm.data ?? {})) {
      const problem = checkEnvVar(ctx.serverEnv, k, v);
      if (problem) problems.push(`ConfigMap/${name}: ${problem}`);
    }
  }
  const deployments = byKind('Deployment');
  const roles = deployments.map((d) => ({ d, role: checkDeployment(d, c, problems) }));
  if (deployments.length === 0) problems.push('renders no Deployment');
  if (roles.some((r) => r.role === 'api') && !roles.some((r) => r.role === 'worker' || r.role === 'both')) {
    problems.push('has an API tier but no worker: submitted jobs would never run');
  }
  problems.push(...checkDataSharing(deployments, c));
  problems.push(...checkNetworkPolicies(deployments, c));
  const podsOf = (selector, map = false) => deployments.filter((d) => (map ? matchesMap(selector, d.spec.template.metadata.labels) : matches(selector, d.spec.template.metadata.labels)));
  const containerPorts = (d) => (d.spec.template.spec.containers ?? []).flatMap((x) => x.ports ?? []);

  for (const s of byKind('Service')) {
    const selected = podsOf(s.spec?.selector, true);
    if (selected.length === 0) { problems.push(`${id(s)}: selects no pod in the render`); continue; }
    for (const d of selected) {
      const role = roleOf(containerEnvironment(d.spec.template.spec.containers.find((x) => x.name === 'posbias') ?? {}, configMaps));
      if (role === 'worker') problems.push(`${id(s)}: selects the worker pods of ${id(d)}, which serve no API`);
      for (const p of s.spec.ports ?? []) {
        const target = p.targetPort ?? p.port;
        if (!containerPorts(d).some((cp) => cp.name === target || cp.containerPort === target)) problems.push(`${id(s)}: port ${p.name} targets ${target}, not a port of ${id(d)}`);
      }
    }
    const ports = Object.fromEntries((s.spec.ports ?? []).map((p) => [p.name, p.port]));
    if (ports.grpc !== GRPC_PORT || ports.metrics !== METRICS_PORT) problems.push(`${id(s)}: needs ports grpc ${GRPC_PORT} and metrics ${METRICS_PORT}`);
  }
  const pdbFor = new Map();
  for (const p of byKind('PodDisruptionBudget')) {
    const selected = podsOf(p.spec?.selector);
    if (selected.length === 0) problems.push(`${id(p)}: selects no pod in the render`);
    for (const d of selected) {
      if (pdbFor.has(d.metadata.name)) problems.push(`${id(d)}: selected by both ${pdbFor.get(d.metadata.name)} and ${id(p)} (eviction fails with two budgets)`);
      pdbFor.set(d.metadata.name, id(p));
      const replicas = d.spec.replicas ?? 1;
      if (typeof p.spec.minAvailable === 'number' && p.spec.minAvailable >= replicas) problems.push(`${id(p)}: minAvailable ${p.spec.minAvailable} with ${replicas} replica(s) blocks every node drain`);
      if (p.spec.maxUnavailable === 0) problems.push(`${id(p)}: maxUnavailable 0 blocks every node drain`);
    }
  }
  for (const h of byKind('HorizontalPodAutoscaler')) {
    const ref = h.spec?.scaleTargetRef ?? {};
    const target = deployments.find((d) => ref.kind === 'Deployment' && d.metadata.name === ref.name);
    if (!target) { problems.push(`${id(h)}: scales ${ref.kind}/${ref.name}, not in the render`); continue; }
    if ((h.spec.minReplicas ?? 1) > h.spec.maxReplicas) problems.push(`${id(h)}: minReplicas above maxReplicas`);
    for (const m of h.spec.metrics ?? []) {
      if (m.type === 'Resource' && m.resource?.target?.type === 'Utilization') {
        for (const x of target.spec.template.spec.containers) {
          if (!x.resources?.requests?.[m.resource.name]) problems.push(`${id(h)}: ${m.resource.name} utilization of ${x.name}, which requests no ${m.resource.name}`);
        }
      }
      if (m.type === 'External' || m.type === 'Pods' || m.type === 'Object') {
        const spec = m.external ?? m.pods ?? m.object;
        const served = (m.type === 'External' ? ctx.adapter.external : ctx.adapter.custom).get(spec.metric.name);
        if (!served) { problems.push(`${id(h)}: ${m.type} metric ${spec.metric.name} is not served by deploy/k8s/prometheus-adapter/values.yaml`); continue; }
        const series = ctx.metrics[served.series];
        const keys = [...Object.keys(spec.metric.selector?.matchLabels ?? {}), ...(spec.metric.selector?.matchExpressions ?? []).map((e) => e.key)];
        for (const k of keys) if (series && !series.labels.has(k)) problems.push(`${id(h)}: selects ${spec.metric.name} by ${k}, a label ${served.series} does not have`);
        const values = [...Object.values(spec.metric.selector?.matchLabels ?? {}), ...(spec.metric.selector?.matchExpressions ?? []).flatMap((e) => e.values ?? [])];
        for (const v of values) {
          const known = Object.values(series?.values ?? {}).find((set) => set.has(v)) ?? null;
          if (series && Object.keys(series.values).length > 0 && !known) problems.push(`${id(h)}: selector value ${v} is no value of ${served.series}'s labels`);
        }
      }
    }
  }
  for (const sm of byKind('ServiceMonitor')) {
    const services = byKind('Service').filter((s) => matches(sm.spec?.selector, s.metadata.labels));
    if (services.length === 0) problems.push(`${id(sm)}: selects no Service in the render`);
    for (const e of sm.spec?.endpoints ?? []) {
      for (const s of services) if (!(s.spec.ports ?? []).some((p) => p.name === e.port)) problems.push(`${id(sm)}: Service ${s.metadata.name} has no port named ${e.port}`);
    }
  }
  for (const pm of byKind('PodMonitor')) {
    const selected = podsOf(pm.spec?.selector);
    if (selected.length === 0) problems.push(`${id(pm)}: selects no pod in the render`);
    for (const e of pm.spec?.podMetricsEndpoints ?? []) {
      for (const d of selected) if (!containerPorts(d).some((p) => p.name === e.port)) problems.push(`${id(pm)}: ${id(d)} has no container port named ${e.port}`);
    }
  }
  for (const r of byKind('PrometheusRule')) {
    const recorded = new Set((r.spec?.groups ?? []).flatMap((g) => g.rules.map((x) => x.record).filter(Boolean)));
    for (const g of r.spec?.groups ?? []) {
      for (const rule of g.rules ?? []) {
        for (const p of checkPromQL(rule.expr, ctx.metrics, { recorded })) problems.push(`${id(r)}: ${rule.record ?? rule.alert}: ${p}`);
      }
    }
  }
  return problems;
}
