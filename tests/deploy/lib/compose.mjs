// Reading a Compose file the way `docker compose` / podman-compose would, without an engine:
// YAML with merge keys, ${VAR:-default} interpolation (with the variables unset), short and long
// volume syntax resolved against the Compose file's folder.
import path from 'node:path';
import { need } from './deps.mjs';

const YAML = need('yaml');

// Service keys of the Compose specification (a misspelt key is ignored by some engines).
export const SERVICE_KEYS = new Set(['annotations', 'attach', 'blkio_config', 'build', 'cap_add', 'cap_drop', 'cgroup', 'cgroup_parent',
  'command', 'configs', 'container_name', 'cpu_count', 'cpu_percent', 'cpu_period', 'cpu_quota', 'cpu_rt_period', 'cpu_rt_runtime',
  'cpu_shares', 'cpus', 'cpuset', 'credential_spec', 'depends_on', 'deploy', 'develop', 'device_cgroup_rules', 'devices', 'dns',
  'dns_opt', 'dns_search', 'domainname', 'entrypoint', 'env_file', 'environment', 'expose', 'extends', 'external_links', 'extra_hosts',
  'gpus', 'group_add', 'healthcheck', 'hostname', 'image', 'init', 'ipc', 'isolation', 'labels', 'links', 'logging', 'mac_address',
  'mem_limit', 'mem_reservation', 'mem_swappiness', 'memswap_limit', 'network_mode', 'networks', 'oom_kill_disable', 'oom_score_adj',
  'pid', 'pids_limit', 'platform', 'ports', 'post_start', 'pre_stop', 'privileged', 'profiles', 'pull_policy', 'read_only', 'restart',
  'runtime', 'scale', 'secrets', 'security_opt', 'shm_size', 'stdin_open', 'stop_grace_period', 'stop_signal', 'storage_opt', 'sysctls',
  'tmpfs', 'tty', 'ulimits', 'user', 'userns_mode', 'uts', 'volumes', 'volumes_from', 'working_dir']);
export const TOP_KEYS = new Set(['name', 'services', 'volumes', 'networks', 'secrets', 'configs', 'include']);

// "${A:-x}" -> "x" with A unset; returns { value, unset: [names without a default] }.
export function interpolate(text) {
  const unset = [];
  const value = String(text).replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (all, name, op, arg, bare) => {
      if (all === '$$') return '$';
      if (bare) { unset.push(bare); return ''; }
      if (op === ':-' || op === '-') return arg;
      unset.push(name);
      return '';
    });
  return { value, unset };
}

export function loadCompose(file, text) {
  const doc = YAML.parseDocument(text, { merge: true });
  if (doc.errors.length) throw new Error(`${file}: ${doc.errors[0].message}`);
  return doc.toJS({ maxAliasCount: 100 });
}

// environment: as a mapping or a list of NAME=value.
export function environmentOf(service) {
  const env = service.environment ?? {};
  if (Array.isArray(env)) return Object.fromEntries(env.map((e) => { const i = e.indexOf('='); return i < 0 ? [e, null] : [e.slice(0, i), e.slice(i + 1)]; }));
  return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v === null ? null : String(v)]));
}

// volumes: [{ type: 'bind'|'volume', source, target, readOnly }] with bind sources made absolute.
export function mountsOf(service, composeDir) {
  return (service.volumes ?? []).map((v) => {
    let m;
    if (typeof v === 'string') {
      const parts = interpolate(v).value.split(':');
      if (parts.length === 1) m = { type: 'volume', source: null, target: parts[0], readOnly: false };
      else m = { source: parts[0], target: parts[1], readOnly: (parts[2] ?? '').split(',').includes('ro') };
    } else {
      m = { type: v.type, source: v.source && interpolate(v.source).value, target: v.target, readOnly: Boolean(v.read_only) };
    }
    if (!m.type) m.type = /^[./~]/.test(m.source) ? 'bind' : 'volume';
    if (m.type === 'bind') m.hostPath = path.resolve(composeDir, m.source);
    return m;
  });
}

// The host file a container path of `service` comes from, through its bind mounts (null if none).
export function hostPathOf(service, composeDir, containerPath) {
  let best = null;
  for (const m of mountsOf(service, composeDir)) {
    if (m.type !== 'bind') continue;
    if (containerPath === m.target || containerPath.startsWith(`${m.target}/`)) {
      if (!best || m.target.length > best.target.length) best = m;
    }
  }
  return best ? path.join(best.hostPath, path.relative(best.target, containerPath)) : null;
}

// "50051:50051", "127.0.0.1:9464:9464", {target, published} -> container ports published.
export function publishedContainerPorts(service) {
  return (service.ports ?? []).map((p) => (typeof p === 'object' ? Number(p.target) : Number(String(interpolate(p).value).split(':').pop().split('/')[0])));
}
