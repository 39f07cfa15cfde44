// Checks a PromQL expression against the metrics the server exports: it must parse (Prometheus's own
// grammar, @prometheus-io/lezer-promql), every metric must exist (histograms as _bucket/_sum/_count),
// every label matched or grouped on must be one the metric carries (or one Prometheus adds to every
// target), known label values must be spelled right, rate()/increase() must not be applied to gauges,
// and histogram_quantile() needs the `le` label of a _bucket series.
import { need } from './deps.mjs';

const { parser } = need('@prometheus-io/lezer-promql');

// Labels Prometheus attaches to scraped series (target labels of Compose and Kubernetes discovery).
const TARGET_LABELS = new Set(['job', 'instance', 'namespace', 'pod', 'container', 'service', 'endpoint', 'node']);
// Series Prometheus makes itself.
const SYNTHETIC = { up: new Set(), scrape_duration_seconds: new Set(), scrape_samples_scraped: new Set(), ALERTS: new Set(['alertname', 'alertstate', 'severity']) };
const RATE_FUNCTIONS = new Set(['rate', 'irate', 'increase']);

// Grafana's interval variables stand where a duration goes.
export function substituteGrafana(expr) {
  return expr.replace(/\$__(rate_interval|interval|range)\b/g, '5m').replace(/\$\{__(rate_interval|interval|range)\}/g, '5m');
}

// Resolves a metric name to { metric, series: 'plain'|'bucket'|'sum'|'count' } or null.
function lookup(metrics, name) {
  if (metrics[name]) return { metric: metrics[name], series: 'plain' };
  const m = name.match(/^(.*)_(bucket|sum|count)$/);
  if (m && metrics[m[1]]?.type === 'histogram') return { metric: metrics[m[1]], series: m[2] };
  return null;
}

const text = (source, node) => source.slice(node.from, node.to);
const unquote = (s) => s.replace(/^(["'`])([\s\S]*)\1$/, '$2').replace(/\\(.)/g, '$1');

function* descendants(node) {
  for (let child = node.firstChild; child; child = child.nextSibling) {
    yield child;
    yield* descendants(child);
  }
}

// Returns a list of problems (strings); `recorded` holds names made by recording rules.
export function checkPromQL(expr, metrics, { recorded = new Set() } = {}) {
  const source = substituteGrafana(expr);
  const tree = parser.parse(source);
  const problems = [];
  const top = tree.topNode;
  for (const node of descendants(top)) {
    if (node.type.isError) {
      problems.push(`syntax error at ${node.from} in ${JSON.stringify(source.slice(Math.max(0, node.from - 20), node.from + 20))}`);
      return problems;
    }
  }
  // Every vector selector: its name and matchers.
  const selectors = [];
  for (const node of descendants(top)) {
    if (node.name !== 'VectorSelector') continue;
    const identifier = node.getChild('Identifier');
    const matchers = [];
    const matchersNode = node.getChild('LabelMatchers');
    if (matchersNode) {
      for (const m of descendants(matchersNode)) {
        if (m.name !== 'UnquotedLabelMatcher' && m.name !== 'QuotedLabelMatcher') continue;
        const labelNode = m.getChild('LabelName') ?? m.getChild('QuotedLabelName');
        const op = m.getChild('MatchOp')?.firstChild?.name;
        const valueNode = m.getChild('StringLiteral');
        matchers.push({ label: unquote(text(source, labelNode)), op, value: valueNode ? unquote(text(source, valueNode)) : '' });
      }
    }
    let name = identifier ? text(source, identifier) : null;
    if (!name) {
      const byName = matchers.find((m) => m.label === '__name__' && m.op === 'EqlSingle');
      name = byName ? byName.value : null;
    }
    selectors.push({ node, name, matchers });
  }
  if (selectors.length === 0) problems.push('selects no metric');

  const used = [];
  for (const s of selectors) {
    if (!s.name) { problems.push('a selector without a metric name'); continue; }
    let labels;
    let found = null;
    if (recorded.has(s.name)) {
      labels = null; // any: recording rules keep what their expression keeps
    } else if (SYNTHETIC[s.name]) {
      labels = SYNTHETIC[s.name];
    } else {
      found = lookup(metrics, s.name);
      if (!found) { problems.push(`unknown metric ${s.name}`); continue; }
      labels = new Set(found.metric.labels);
      if (found.series === 'bucket') labels.add('le');
    }
    used.push({ ...s, found, labels });
    for (const m of s.matchers) {
      if (m.label === '__name__') continue;
      if (labels && !labels.has(m.label) && !TARGET_LABELS.has(m.label)) {
        problems.push(`${s.name} has no label ${m.label}`);
        continue;
      }
      const known = found?.metric.values[m.label];
      if (!known || m.value === '' || m.value.includes('$')) continue;
      let values = [];
      if (m.op === 'EqlSingle' || m.op === 'Neq') values = [m.value];
      else if (/^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$/.test(m.value)) values = m.value.split('|');
      for (const v of values) {
        if (!known.has(v)) problems.push(`${s.name}{${m.label}} has no value ${v} (known: ${[...known].join(', ')})`);
      }
    }
  }

  // Grouping labels (by/without/on/ignoring/group_left/group_right) must exist on some metric used.
  const allLabels = new Set(TARGET_LABELS);
  let anyOpen = false;
  for (const u of used) {
    if (!u.labels) anyOpen = true;
    else for (const l of u.labels) allLabels.add(l);
  }
  if (!anyOpen) {
    for (const node of descendants(top)) {
      if (node.name !== 'GroupingLabels') continue;
      for (const label of node.getChildren('LabelName')) {
        const l = text(source, label);
        if (!allLabels.has(l)) problems.push(`groups by ${l}, which no metric in the expression has`);
      }
    }
  }

  // rate()/irate()/increase() of a gauge; histogram_quantile() without _bucket and le.
  for (const node of descendants(top)) {
    if (node.name !== 'FunctionCall') continue;
    const fn = text(source, node.getChild('FunctionIdentifier'));
    const inner = used.filter((u) => u.node.from >= node.from && u.node.to <= node.to && u.found);
    if (RATE_FUNCTIONS.has(fn)) {
      for (const u of inner) {
        if (u.found.metric.type === 'gauge') problems.push(`${fn}() of the gauge ${u.name}`);
      }
    }
    if (fn === 'histogram_quantile') {
      if (!inner.some((u) => u.found.series === 'bucket')) problems.push('histogram_quantile() of no _bucket series');
      for (const agg of descendants(node)) {
        if (agg.name !== 'AggregateExpr') continue;
        const modifier = agg.getChild('AggregateModifier');
        const grouped = modifier?.getChild('GroupingLabels')?.getChildren('LabelName').map((l) => text(source, l)) ?? [];
        const keepsLe = modifier?.getChild('By') ? grouped.includes('le') : modifier?.getChild('Without') ? !grouped.includes('le') : false;
        if (!keepsLe) problems.push('histogram_quantile() over an aggregation that drops le');
      }
    }
  }
  return problems;
}

// Metric names a PromQL expression selects (for cross-checks such as "the HPA's metric exists").
export function metricNames(expr) {
  const source = substituteGrafana(expr);
  const names = [];
  for (const node of descendants(parser.parse(source).topNode)) {
    if (node.name === 'VectorSelector' && node.getChild('Identifier')) names.push(text(source, node.getChild('Identifier')));
  }
  return names;
}
