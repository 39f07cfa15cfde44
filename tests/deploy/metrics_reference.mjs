// The metrics reference page, made from what the server exports (server/metrics/metrics.cc, read
// by lib/server_contract.mjs as the deploy checks read it): every metric's name, type, labels with
// their known values, and its help text. Prints the page, or writes it with --write PAGE; the test
// docs.metrics_reference fails when docs/reference/metrics.md differs from it.
import fs from 'node:fs';
import { pathToFileURL } from 'node:url';
import { serverMetrics } from './lib/server_contract.mjs';

export function metricsPage(metrics) {
  const lines = [
    '# Metrics reference',
    '',
    'Generated from `server/metrics/metrics.cc` by `tests/deploy/metrics_reference.mjs` (the test',
    '`docs.metrics_reference` fails when this page differs). Served at `/metrics` on',
    '`--metrics-listen` in the Prometheus text format; how to scrape and alert on them is in',
    '[Metrics](../operations/metrics.md).',
    '',
    '| metric | type | labels (known values) | meaning |',
    '|---|---|---|---|',
  ];
  for (const name of Object.keys(metrics).sort()) {
    const metric = metrics[name];
    const labels = [...metric.labels].sort().map((label) => {
      const values = metric.values[label] ? [...metric.values[label]].sort() : [];
      return values.length > 0 && values.length <= 12 ? `\`${label}\` (${values.join(', ')})` : `\`${label}\``;
    });
    const help = metric.help.replace(/\\"/g, '"').replace(/\|/g, '\\|');
    lines.push(`| \`${name}\` | ${metric.type} | ${labels.join(', ') || '—'} | ${help} |`);
  }
  return lines.join('\n') + '\n';
}

function main() {
  const page = metricsPage(serverMetrics());
  const at = process.argv.indexOf('--write');
  if (at >= 0) fs.writeFileSync(process.argv[at + 1], page);
  else process.stdout.write(page);
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) main();
