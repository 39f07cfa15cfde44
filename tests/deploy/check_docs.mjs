// deploy.docs: the metrics reference table in deploy/README.md lists exactly the metrics that
// server/metrics/metrics.cc exports, with their types and label names, and the README names every
// overlay and component.
import fs from 'node:fs';
import path from 'node:path';
import { deployDir, Problems } from './lib/deps.mjs';
import { serverMetrics } from './lib/server_contract.mjs';
import { pathToFileURL } from 'node:url';

export function metricsTable(markdown) {
  const rows = {};
  for (const line of markdown.split('\n')) {
    const m = line.match(/^\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|\s*(counter|gauge|histogram|summary)\s*\|([^|]*)\|([^|]*)\|\s*$/);
    if (!m) continue;
    rows[m[1]] = { type: m[2], labels: [...m[3].matchAll(/`(\w+)`/g)].map((x) => x[1]), meaning: m[4].trim() };
  }
  return rows;
}

export function checkDocs(markdown, metrics, problems, { overlays = [], components = [] } = {}) {
  const table = metricsTable(markdown);
  for (const [name, metric] of Object.entries(metrics)) {
    const row = table[name];
    if (!row) { problems.add('README.md', `metrics table lacks ${name}`); continue; }
    if (row.type !== metric.type) problems.add('README.md', `${name} is a ${metric.type}, the table says ${row.type}`);
    const want = [...metric.labels].sort().join(', ');
    const have = [...row.labels].sort().join(', ');
    if (want !== have) problems.add('README.md', `${name} has labels [${want}], the table says [${have}]`);
    if (!row.meaning) problems.add('README.md', `${name} has no meaning`);
  }
  for (const name of Object.keys(table)) if (!metrics[name]) problems.add('README.md', `metrics table lists ${name}, which the server does not export`);
  for (const o of overlays) if (!markdown.includes(`\`${o}\``)) problems.add('README.md', `does not describe overlay ${o}`);
  for (const c of components) if (!markdown.includes(`components/${c}`)) problems.add('README.md', `does not mention components/${c}`);
}

function main() {
  const problems = new Problems();
  const readme = path.join(deployDir, 'README.md');
  if (!fs.existsSync(readme)) { problems.add('README.md', 'missing'); return problems.report(''); }
  const list = (dir) => fs.readdirSync(path.join(deployDir, 'k8s', dir)).filter((d) => fs.existsSync(path.join(deployDir, 'k8s', dir, d, 'kustomization.yaml')));
  checkDocs(fs.readFileSync(readme, 'utf8'), serverMetrics(), problems, { overlays: list('overlays'), components: list('components') });
  return problems.report('deploy/README.md metrics table matches server/metrics/metrics.cc');
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) main();
