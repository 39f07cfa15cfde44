// deploy.dockerfile_lint: lints the repository's Dockerfile and every Dockerfile.* with dockerfilelint
// (offline), and checks what deploy/ relies on in each image's final stage: the non-root user 10001
// (Kubernetes runAsUser), ports 50051 and 9464, a HEALTHCHECK, an ENTRYPOINT, POSBIAS_* settings the
// server reads, and the `runtime` stage that deploy/compose.yaml builds.
// dockerfilelint 1.8 has two bugs worked around here, without hiding real findings:
//   - `FROM ${ARG}` is reported as a missing tag: the ARG's default is substituted before linting
//     (an ARG without a default fails here instead);
//   - HEALTHCHECK: it crashes on a HEALTHCHECK without options and rejects --start-period: the
//     options are checked here, and dockerfilelint sees a neutral HEALTHCHECK in its place.
import fs from 'node:fs';
import path from 'node:path';
import { need, repoRoot, Problems } from './lib/deps.mjs';
import { serverEnvironment, checkEnvVar } from './lib/server_contract.mjs';
import { pathToFileURL } from 'node:url';

const dockerfilelint = need('dockerfilelint');
const IMAGE_UID = '10001';
const HEALTHCHECK_OPTIONS = new Set(['--interval', '--timeout', '--start-period', '--start-interval', '--retries']);

// Logical instructions: { line (1-based), lines: [indices], keyword, args }.
export function instructions(text) {
  const lines = text.split('\n');
  const out = [];
  let current = null;
  lines.forEach((raw, i) => {
    const line = raw.replace(/\r$/, '');
    if (!current) {
      if (/^\s*(#|$)/.test(line)) return;
      const m = line.match(/^\s*(\w+)\s*(.*)$/);
      current = { line: i + 1, lines: [i], keyword: m[1].toUpperCase(), args: '' };
      current.args = m[2];
    } else {
      current.lines.push(i);
      if (/^\s*#/.test(line)) return;
      current.args += ` ${line.trim()}`;
    }
    if (/\\\s*$/.test(current.args)) current.args = current.args.replace(/\\\s*$/, '');
    else { current.args = current.args.trim(); out.push(current); current = null; }
  });
  if (current) out.push(current);
  return out;
}

// { login: uid } of the `useradd` commands in a stage's RUN instructions.
function usersCreated(text) {
  const users = {};
  for (const m of text.matchAll(/\buseradd\b([^;&|\n]*)/g)) {
    const tokens = m[1].trim().split(/\s+/);
    let uid = null;
    tokens.forEach((t, i) => {
      if (t === '--uid' || t === '-u') uid = tokens[i + 1];
      else if (t.startsWith('--uid=')) uid = t.slice(6);
    });
    users[tokens[tokens.length - 1]] = uid;
  }
  return users;
}

export function lintDockerfile(file, text, problems, { serverEnv, requiredStage }) {
  const where = path.relative(repoRoot, file);
  const list = instructions(text);
  const lines = text.split('\n');
  const argDefaults = {};
  const stages = [];
  for (const ins of list) {
    if (ins.keyword === 'ARG' && stages.length === 0) {
      const m = ins.args.match(/^(\w+)(?:=(.*))?$/);
      if (m) argDefaults[m[1]] = m[2]?.replace(/^"(.*)"$/, '$1');
    }
    if (ins.keyword === 'FROM') {
      const m = ins.args.match(/^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i);
      const image = m?.[1] ?? '';
      const resolved = image.replace(/\$\{?(\w+)\}?/g, (all, name) => {
        if (argDefaults[name] === undefined) { problems.add(`${where}:${ins.line}`, `FROM uses \${${name}}, an ARG without a default before the first FROM`); return all; }
        return argDefaults[name];
      });
      stages.push({ name: m?.[2]?.toLowerCase(), image: resolved, from: ins.line, instructions: [] });
      if (resolved !== image) lines[ins.line - 1] = `FROM ${resolved}${m[2] ? ` AS ${m[2]}` : ''}`;
    } else if (stages.length) stages[stages.length - 1].instructions.push(ins);
    if (ins.keyword === 'HEALTHCHECK') {
      const m = ins.args.match(/^((?:--[\w-]+=\S+\s+)*)(CMD\s+.+|NONE)$/);
      if (!m) problems.add(`${where}:${ins.line}`, `HEALTHCHECK ${ins.args}: expected [--option=value ...] CMD command | NONE`);
      else {
        for (const opt of m[1].trim().split(/\s+/).filter(Boolean)) {
          const [name, value] = opt.split('=');
          if (!HEALTHCHECK_OPTIONS.has(name)) problems.add(`${where}:${ins.line}`, `HEALTHCHECK option ${name} is not one of ${[...HEALTHCHECK_OPTIONS].join(', ')}`);
          else if (name === '--retries' ? !/^\d+$/.test(value) : !/^\d+(ms|s|m|h)$/.test(value)) problems.add(`${where}:${ins.line}`, `HEALTHCHECK ${name}=${value} is not a valid value`);
        }
      }
      ins.lines.forEach((i, k) => { lines[i] = k === 0 ? 'HEALTHCHECK --interval=30s CMD ["true"]' : '# (HEALTHCHECK continued: checked by lint_dockerfile.mjs)'; });
    }
  }
  // dockerfilelint, on the text with the workarounds above; `FROM <earlier stage>` has no tag by design.
  for (const issue of dockerfilelint.run(path.dirname(file), lines.join('\n'))) {
    if (issue.rule === 'missing_tag') {
      const index = stages.findIndex((s) => s.from === issue.line);
      if (index > 0 && stages.slice(0, index).some((s) => s.name && s.name === stages[index].image.toLowerCase())) continue;
    }
    problems.add(`${where}:${issue.line}`, `${issue.title} [${issue.rule}]: ${issue.description}`);
  }

  // What deploy/ relies on, in the final stage.
  if (stages.length === 0) { problems.add(where, 'no FROM'); return; }
  if (requiredStage && !stages.some((s) => s.name === requiredStage)) problems.add(where, `no stage named ${requiredStage} (deploy/compose.yaml builds target ${requiredStage})`);
  const last = stages[stages.length - 1];
  const get = (kw) => last.instructions.filter((i) => i.keyword === kw);
  const users = get('USER');
  const user = users.length ? users[users.length - 1].args.split(':')[0] : null;
  const stageText = last.instructions.map((i) => i.args).join('\n');
  if (!user) problems.add(where, 'the final stage runs as root (no USER)');
  else if (user !== IMAGE_UID && usersCreated(stageText)[user] !== IMAGE_UID) {
    problems.add(where, `USER ${user} is not uid ${IMAGE_UID}, which the Kubernetes manifests run as (runAsUser)`);
  }
  const exposed = get('EXPOSE').flatMap((i) => i.args.split(/\s+/)).map((p) => p.split('/')[0]);
  for (const port of ['50051', '9464']) if (!exposed.includes(port)) problems.add(where, `the final stage does not EXPOSE ${port}`);
  if (get('HEALTHCHECK').length === 0) problems.add(where, 'the final stage has no HEALTHCHECK');
  if (get('ENTRYPOINT').length === 0 && get('CMD').length === 0) problems.add(where, 'the final stage has no ENTRYPOINT or CMD');
  for (const s of get('STOPSIGNAL')) if (s.args !== 'SIGTERM') problems.add(where, `STOPSIGNAL ${s.args}: the server drains on SIGTERM`);
  const imageEnv = {};
  for (const e of get('ENV')) {
    for (const m of e.args.matchAll(/(\w+)=("[^"]*"|\S*)/g)) {
      if (!m[1].startsWith('POSBIAS_')) continue;
      imageEnv[m[1]] = m[2].replace(/^"(.*)"$/, '$1');
      const problem = checkEnvVar(serverEnv, m[1], imageEnv[m[1]]);
      if (problem) problems.add(`${where}:${e.line}`, problem);
    }
  }
  // Issue 12: the image's defaults listen securely. Off loopback they name the TLS and tokens files
  // (mounted at run time), and the HEALTHCHECK then speaks TLS when POSBIAS_TLS_CERT_FILE is set.
  const listen = imageEnv.POSBIAS_LISTEN ?? '127.0.0.1:50051';
  if (!/^(127\.\d+\.\d+\.\d+|\[::1\]|localhost):\d+$/.test(listen)) {
    if (!imageEnv.POSBIAS_AUTH_TOKENS_FILE && !imageEnv.POSBIAS_TLS_CLIENT_CA_FILE) problems.add(where, `POSBIAS_LISTEN ${listen} with neither POSBIAS_AUTH_TOKENS_FILE nor POSBIAS_TLS_CLIENT_CA_FILE: the image would listen unauthenticated (the server refuses to)`);
    if (!imageEnv.POSBIAS_TLS_CERT_FILE || !imageEnv.POSBIAS_TLS_KEY_FILE) problems.add(where, `POSBIAS_LISTEN ${listen} without POSBIAS_TLS_CERT_FILE and POSBIAS_TLS_KEY_FILE: tokens would cross the network in clear text`);
  }
  for (const file of ['POSBIAS_TLS_CERT_FILE', 'POSBIAS_TLS_KEY_FILE', 'POSBIAS_AUTH_TOKENS_FILE']) {
    if (imageEnv[file] && !imageEnv[file].startsWith('/etc/posbias/')) problems.add(where, `${file} ${imageEnv[file]} is not under /etc/posbias/, where deploy/ mounts the secrets`);
  }
  const healthText = get('HEALTHCHECK').map((h) => h.args).join(' ');
  if (imageEnv.POSBIAS_TLS_CERT_FILE && !/POSBIAS_TLS_CERT_FILE:\+--tls\b/.test(healthText)) problems.add(where, 'TLS is on by default but the HEALTHCHECK does not switch to --tls with POSBIAS_TLS_CERT_FILE');
}

function main() {
  const problems = new Problems();
  const serverEnv = serverEnvironment();
  const files = fs.readdirSync(repoRoot).filter((f) => f === 'Dockerfile' || /^Dockerfile\.[\w.-]+$/.test(f)).sort();
  if (!files.includes('Dockerfile')) {
    problems.add('Dockerfile', `missing at the repository root (${repoRoot}): deploy/compose.yaml builds it`);
  }
  for (const f of files) {
    const file = path.join(repoRoot, f);
    lintDockerfile(file, fs.readFileSync(file, 'utf8'), problems, { serverEnv, requiredStage: f === 'Dockerfile' ? 'runtime' : null });
  }
  return problems.report(`dockerfilelint OK: ${files.join(', ')}`);
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) main();
