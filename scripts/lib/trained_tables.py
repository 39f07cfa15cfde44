#!/usr/bin/python3
"""The tables and plots of scripts/reproduce_trained.sh, from the JSON results it writes.

    trained_tables.py OUT --families "gpt2 llama" --seeds "1 2 3" --cures "baseline ..." --long-factors "4 16"

Every statistic is first computed per seed (from that seed's comparison job, whose own error bars
are over its samples or probes); across seeds the tables give the mean, the between-seed standard
error (sample standard deviation / sqrt(seeds)) and each seed's value. A difference (a log ratio
against step0, or a cure against the baseline, paired by seed) is said to **hold** only where every
seed gives it the same sign and the between-seed 95 % t interval, mean +- t(0.975, seeds-1) x se,
excludes 0; with one seed nothing holds (no interval). The Markdown goes to stdout; the plots to
OUT/trained-<family>-{recall,scatter,cures,long}.svg.
"""

import argparse
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402


def load(path):
    with open(path) as f:
        return json.load(f)


class Across:
    """Values of one statistic over seeds."""

    def __init__(self, values):
        self.values = [v for v in values if v is not None and math.isfinite(v)]

    @property
    def n(self):
        return len(self.values)

    @property
    def mean(self):
        return float(np.mean(self.values)) if self.values else math.nan

    @property
    def se(self):
        return float(np.std(self.values, ddof=1) / math.sqrt(self.n)) if self.n >= 2 else math.nan

    def interval(self):
        if self.n < 2:
            return (math.nan, math.nan)
        half = stats.t.ppf(0.975, self.n - 1) * self.se
        return (self.mean - half, self.mean + half)

    def holds(self):
        """'+' or '-' when every seed has that sign and the t interval excludes 0, else 'no'."""
        if self.n < 2:
            return "no (1 seed)"
        low, high = self.interval()
        if all(v > 0 for v in self.values) and low > 0:
            return "yes, +"
        if all(v < 0 for v in self.values) and high < 0:
            return "yes, −"
        return "no"

    def text(self, digits=3, signed=False):
        if not self.values:
            return "—"
        f = f"{{:{'+' if signed else ''}.{digits}f}}"
        head = f.format(self.mean)
        if self.n >= 2:
            head += " ± " + f"{self.se:.{digits}f}"
        return head + " (" + ", ".join(f.format(v) for v in self.values) + ")"


def checkpoints(result):
    return [m["model"] for m in result["comparison"]]


def label(model, family, seed):
    name = model[len(f"{family}-s{seed}-"):]
    return name


class Study:
    def __init__(self, out, families, seeds, cures, long_factors):
        self.out, self.families, self.seeds, self.cures = out, families, seeds, cures
        self.long_factors = long_factors
        self.models = ["step0"] + cures

    def path(self, name):
        return os.path.join(self.out, name)

    def result(self, family, seed, kind):
        path = self.path(f"trained-{family}-s{seed}-{kind}.json")
        return load(path) if os.path.exists(path) else None

    def by_model(self, family, seed, kind):
        r = self.result(family, seed, kind)
        if r is None:
            return None
        return {label(m["model"], family, seed): m for m in r["comparison"]}

    def loss(self, family, cure, seed):
        return load(self.path(f"trained-{family}-{cure}-s{seed}-loss.json"))

    def across(self, family, kind, pick):
        """pick(model_name -> ComparedModel dict) per seed -> Across per model name."""
        out = {}
        for name in self.models:
            values = []
            for seed in self.seeds:
                models = self.by_model(family, seed, kind)
                values.append(pick(models[name]) if models and name in models else None)
            out[name] = Across(values)
        return out


def get(d, *keys):
    for k in keys:
        if d is None or k not in d:
            return None
        d = d[k]
    return d


def recall_mean_accuracy(model):
    depths = get(model, "recall", "depths") or []
    return float(np.mean([d["accuracy"] for d in depths])) if depths else None


def recall_at(model, depth):
    for d in get(model, "recall", "depths") or []:
        if abs(d["depth"] - depth) < 1e-9:
            return d
    return None


def loss_tables(study, family, w):
    w(f"\n### {family}: held-out loss (nats/byte) at the last step, overall and by target position decile\n")
    w("Mean over seeds ± between-seed standard error (each seed's value). Deciles d1 … d10 of positions 1..L.\n")
    w("| cure | overall | d1 | d2–d9 (middle) | d10 | unigram entropy |")
    w("|---|---|---|---|---|---|")
    for cure in study.cures:
        finals = [study.loss(family, cure, s)["eval"][-1] for s in study.seeds]
        entropy = study.loss(family, cure, study.seeds[0])["unigram_entropy_nats"]
        overall = Across([f["loss"] for f in finals])
        d1 = Across([f["by_decile"][0] for f in finals])
        middle = Across([float(np.mean(f["by_decile"][1:9])) for f in finals])
        d10 = Across([f["by_decile"][9] for f in finals])
        w(f"| {cure} | {overall.text()} | {d1.text()} | {middle.text()} | {d10.text()} | {entropy:.3f} |")
    birth = Across([study.loss(family, study.cures[0], s)["eval"][0]["loss"] for s in study.seeds])
    w(f"\nAt step 0 (every cure's birth): {birth.text()}.")


def profile_tables(study, family, kind, what, w):
    if study.result(family, study.seeds[0], kind) is None:
        return
    r0 = study.result(family, study.seeds[0], kind)
    length = r0["measurement"]["length"]
    w(f"\n### {family}: {what} (L = {length}, {r0['measurement']['samples']} samples per seed)\n")
    w("Per seed the job's mean over samples; here the mean over seeds ± between-seed standard error (each "
      "seed's value). Log ratios are paired per sample against step0 within a seed. *Holds*: every seed has the "
      "sign and the between-seed 95 % t interval excludes 0.\n")
    w("| checkpoint | middle 80 % share, all 1..L | log middle / step0 | holds | target's own weight (L) "
      "| context: leading 10 % | context: middle 80 % | context: trailing 10 % | context: log middle / step0 | holds |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    cols = {
        "middle": study.across(family, kind, lambda m: get(m, "middle", "mean")),
        "ratio": study.across(family, kind, lambda m: get(m, "middle_log_ratio", "mean")),
        "last": study.across(family, kind, lambda m: get(m, "last", "mean")),
        "lead": study.across(family, kind, lambda m: get(m, "context", "leading", "mean")),
        "cmid": study.across(family, kind, lambda m: get(m, "context", "middle", "mean")),
        "trail": study.across(family, kind, lambda m: get(m, "context", "trailing", "mean")),
        "cratio": study.across(family, kind, lambda m: get(m, "context", "middle_log_ratio", "mean")),
    }
    for name in study.models:
        ref = name == "step0"
        w(f"| {name} | {cols['middle'][name].text()} | {'reference' if ref else cols['ratio'][name].text(2, True)} "
          f"| {'' if ref else cols['ratio'][name].holds()} | {cols['last'][name].text()} | {cols['lead'][name].text()} "
          f"| {cols['cmid'][name].text()} | {cols['trail'][name].text()} "
          f"| {'reference' if ref else cols['cratio'][name].text(2, True)} | {'' if ref else cols['cratio'][name].holds()} |")


def recall_tables(study, family, kind, title, w):
    if study.result(family, study.seeds[0], kind) is None:
        return None
    r0 = study.result(family, study.seeds[0], kind)
    chance = r0["comparison"][0]["recall"]["chance"]
    depths = [d["depth"] for d in r0["comparison"][0]["recall"]["depths"]]
    probes = r0["comparison"][0]["recall"]["depths"][0]["probes"]
    w(f"\n### {family}: {title} (L = {r0['measurement']['length']}, {probes} probes per depth per seed, "
      f"chance {chance:.3f})\n")
    w("Accuracy (the answer strictly the top next token at L) by the queried pair's depth: mean over seeds ± "
      "between-seed standard error (each seed's value; each seed's own 95 % Clopper–Pearson interval is in its JSON). "
      "Last column: the queried pair's mean share of the context's Jacobian weight (1..L−1), averaged over depths.\n")
    w("| checkpoint | " + " | ".join(f"depth {d:g}" for d in depths) + " | pair's context share |")
    w("|---|" + "---|" * (len(depths) + 1))
    table = {}
    present = [name for name in study.models
               if any(name in (study.by_model(family, seed, kind) or {}) for seed in study.seeds)]
    for name in present:
        cells = []
        row = []
        for d in depths:
            a = study.across(family, kind, lambda m, d=d: get(recall_at(m, d), "accuracy"))[name]
            cells.append(a)
            row.append(a.text(2))
        share = study.across(family, kind, lambda m: float(np.mean(
            [x["pair_context_share_mean"] for x in get(m, "recall", "depths")])) if get(m, "recall") else None)[name]
        table[name] = cells
        w(f"| {name} | " + " | ".join(row) + f" | {share.text(3)} |")
    w("\nMechanism against behaviour: Pearson's r between the cells' mean pair context share and accuracy, "
      "per seed over its checkpoints × depths (95 % Fisher-z interval):\n")
    for seed in study.seeds:
        r = study.result(family, seed, kind)
        c = r.get("recall_correlation") if r else None
        if c:
            w(f"- seed {seed}: r = {c['r']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}] over {c['cells']} cells")
        else:
            w(f"- seed {seed}: undefined (fewer than 4 cells, or no spread in accuracy or share)")
    pooled = pooled_correlation(study, family, kind)
    if pooled:
        w(f"- all seeds pooled: r = {pooled[0]:+.2f} [{pooled[1]:+.2f}, {pooled[2]:+.2f}] over {pooled[3]} cells "
          "(cells of one seed share its step0, so the pooled interval is optimistic)")
    return depths, table, chance


def recall_cells(study, family, kind):
    xs, ys, names = [], [], []
    for seed in study.seeds:
        models = study.by_model(family, seed, kind)
        if not models:
            continue
        for name, m in models.items():
            for d in get(m, "recall", "depths") or []:
                xs.append(d["pair_context_share_mean"])
                ys.append(d["accuracy"])
                names.append(name)
    return xs, ys, names


def pooled_correlation(study, family, kind):
    xs, ys, _ = recall_cells(study, family, kind)
    if len(xs) < 4 or np.std(xs) == 0 or np.std(ys) == 0:
        return None
    r = float(np.corrcoef(xs, ys)[0, 1])
    z, half = math.atanh(max(min(r, 1 - 1e-15), -1 + 1e-15)), 1.959963984540054 / math.sqrt(len(xs) - 3)
    return r, math.tanh(z - half), math.tanh(z + half), len(xs)


def cure_table(study, family, w):
    cures = [c for c in study.cures if c != "baseline"]
    if "baseline" not in study.cures or not cures:
        return
    w(f"\n### {family}: each cure against the baseline, paired by seed (cure − baseline)\n")
    w("Mean over seeds ± between-seed standard error (each seed's difference); *holds* as above.\n")
    w("| measure | " + " | ".join(f"{c} | holds" for c in cures) + " |")
    w("|---|" + "---|---|" * len(cures))

    def loss_pick(fn):
        return lambda cure, seed: fn(study.loss(family, cure, seed)["eval"][-1])

    def job_pick(kind, fn):
        def pick(cure, seed):
            models = study.by_model(family, seed, kind)
            return fn(models[cure]) if models and cure in models else None
        return pick

    rows = [
        ("held-out loss, overall", loss_pick(lambda e: e["loss"])),
        ("held-out loss, middle deciles d2–d9", loss_pick(lambda e: float(np.mean(e["by_decile"][1:9])))),
        ("held-out loss, d1", loss_pick(lambda e: e["by_decile"][0])),
        ("middle share, all, random tokens", job_pick("random", lambda m: get(m, "middle", "mean"))),
        ("middle share, context, random tokens", job_pick("random", lambda m: get(m, "context", "middle", "mean"))),
        ("middle share, context, Brown text", job_pick("text", lambda m: get(m, "context", "middle", "mean"))),
        ("recall accuracy, mean over depths", job_pick("recall", recall_mean_accuracy)),
        ("recall accuracy, depth 0.5", job_pick("recall", lambda m: get(recall_at(m, 0.5), "accuracy"))),
    ]
    for title, pick in rows:
        cells = []
        for cure in cures:
            diffs = []
            for seed in study.seeds:
                a, b = pick(cure, seed), pick("baseline", seed)
                diffs.append(None if a is None or b is None else a - b)
            d = Across(diffs)
            cells.append(f"{d.text(3, True)} | {d.holds()}")
        w(f"| {title} | " + " | ".join(cells) + " |")


def plot_recall(study, family, recall, path, title):
    depths, table, chance = recall
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, (name, cells) in enumerate(table.items()):
        means = [c.mean for c in cells]
        errs = [0 if math.isnan(c.se) else c.se for c in cells]
        ax.errorbar(np.array(depths) + (i - len(table) / 2) * 0.008, means, yerr=errs, marker="o", capsize=3,
                    label=name)
    ax.axhline(chance, color="grey", linestyle=":", label="chance")
    ax.set_xlabel("depth of the queried pair (0 = context start, 1 = just before the query)")
    ax.set_ylabel("recall accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_scatter(study, family, path):
    xs, ys, names = recall_cells(study, family, "recall")
    if not xs:
        return
    fig, ax = plt.subplots(figsize=(5.2, 4.0))
    for name in study.models:
        pts = [(x, y) for x, y, n in zip(xs, ys, names) if n == name]
        if pts:
            ax.scatter(*zip(*pts), label=name, s=18)
    ax.set_xscale("log")
    ax.set_xlabel("queried pair's share of the context's ||dh_L/de_j||^2")
    ax.set_ylabel("recall accuracy")
    ax.set_title(f"{family}: mechanism against behaviour (one point per seed × checkpoint × depth)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_cures(study, family, path):
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    for cure in study.cures:
        curves = np.array([study.loss(family, cure, s)["eval"][-1]["by_decile"] for s in study.seeds])
        se = curves.std(axis=0, ddof=1) / math.sqrt(len(curves)) if len(curves) > 1 else np.zeros(curves.shape[1])
        axes[0].errorbar(np.arange(1, curves.shape[1] + 1), curves.mean(axis=0), yerr=se, marker="o", capsize=2,
                         label=cure)
    axes[0].set_xlabel("target position decile")
    axes[0].set_ylabel("held-out loss (nats/byte)")
    axes[0].legend(fontsize=8)
    for k, (kind, title) in enumerate((("random", "context middle share, random tokens"),
                                       ("recall", "recall accuracy, mean over depths"))):
        ax = axes[k + 1]
        pick = (lambda m: get(m, "context", "middle", "mean")) if kind == "random" else recall_mean_accuracy
        a = study.across(family, kind, pick)
        names = study.models
        ax.bar(range(len(names)), [a[n].mean for n in names],
               yerr=[0 if math.isnan(a[n].se) else a[n].se for n in names], capsize=3)
        for i, n in enumerate(names):
            ax.scatter([i] * a[n].n, a[n].values, color="black", s=8, zorder=3)
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_title(title, fontsize=9)
    fig.suptitle(f"{family}: the cures side by side (bars: mean over seeds ± se; dots: seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--families", default="gpt2 llama")
    parser.add_argument("--seeds", default="1 2 3")
    parser.add_argument("--cures", default="baseline inverse-rho oversample")
    parser.add_argument("--long-factors", default="4 16")
    a = parser.parse_args()
    study = Study(a.out, a.families.split(), [int(s) for s in a.seeds.split()], a.cures.split(),
                  [int(f) for f in a.long_factors.split()])
    lines = []
    w = lines.append
    w("# The trained half: results\n")
    w(f"Written by `scripts/reproduce_trained.sh` (seeds {' '.join(map(str, study.seeds))}; cures "
      f"{', '.join(study.cures)}). How to read it: [the user guide](../user-guide/reproducing.md).")
    for family in study.families:
        w(f"\n## {family}")
        loss_tables(study, family, w)
        profile_tables(study, family, "random", "||dh_L/de_j||^2, random tokens", w)
        profile_tables(study, family, "text", "||dh_L/de_j||^2, Brown text", w)
        profile_tables(study, family, "signal", "the training signal ||dLoss/de_j||^2, Brown text", w)
        recall = recall_tables(study, family, "recall", "recall by depth at the training length", w)
        if recall:
            plot_recall(study, family, recall, study.path(f"trained-{family}-recall.svg"),
                        f"{family}: recall accuracy by depth (mean over seeds ± se)")
            plot_scatter(study, family, study.path(f"trained-{family}-scatter.svg"))
        cure_table(study, family, w)
        if len(study.cures) > 0:
            plot_cures(study, family, study.path(f"trained-{family}-cures.svg"))
        for factor in study.long_factors:
            kind = f"recall-x{factor}"
            long = recall_tables(study, family, kind, f"recall by depth at {factor} × the training length", w)
            if long:
                plot_recall(study, family, long, study.path(f"trained-{family}-recall-x{factor}.svg"),
                            f"{family}: recall accuracy by depth at {factor} × the training length")
                continue
            refusal = study.path(f"trained-{family}-s{study.seeds[0]}-{kind}.txt")
            if os.path.exists(refusal):
                with open(refusal) as f:
                    text = " ".join(f.read().split())
                w(f"\n### {family} at {factor} × the training length\n\nRefused at submission: `{text}`")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
