"""The report's neural section: is mentored decoding faster, and can it beat the target, on neural models?

Every figure is measured on the committed pair (``workloads.neural``) and its held-out
tokens, by ``workloads.neural_decoding``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from mdverify.report.sections import _axes, _table, _write

DIVERGENCES = ("kl", "reverse_kl", "hellinger", "jensen_shannon", "tv")
BUDGETS = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0)
DRAFTS = (2, 4, 8)
TEMPERATURES = (0.7, 1.0)
#: The (temperature, k) of the detailed tables, the continuations and the rules.
MAIN = (1.0, 4)
LENIENCE = (0.1, 0.3, 0.5, 0.7, 0.9)  # alpha of accept iff p / ((1 - alpha) q) >= u
ENSEMBLE = (0.9, 0.7, 0.5, 0.3, 0.1)  # w of the mixture w p + (1 - w) q


def _grid(quick: bool) -> dict:
    if quick:
        return {"divergences": ("kl",), "budgets": (0.0, 0.1, 1.0), "drafts": (4,), "temperatures": (1.0,),
                "prompts": 4, "prompt_length": 48, "new_tokens": 32, "positions": 1024, "chains": 64}
    return {"divergences": DIVERGENCES, "budgets": BUDGETS, "drafts": DRAFTS, "temperatures": TEMPERATURES,
            "prompts": 8, "prompt_length": 64, "new_tokens": 64, "positions": 4096, "chains": 256}


def neural_pair(out_dir: Path, quick: bool, rng) -> str:
    """Section: the pair, decoding speed, teacher-forced quality, shipped rules, samples."""
    import torch

    from mdverify.workloads import neural

    grid = _grid(quick)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small models: one thread times them without contention, as trained
    try:
        tokenizer, target, drafter = neural.load_pair("final")
        _, early, _ = neural.load_pair("early")
        tokens = neural.held_out_tokens()
        log = json.loads(neural.checked_path("training_log.json").read_text())
        shutil.copyfile(neural.checked_path("loss.png"), out_dir / "neural_loss.png")
        from mdverify.workloads import neural_decoding as nd

        prompts = nd.prompts(tokens, grid["prompts"], grid["prompt_length"], seed=int(rng.integers(1 << 31)))
        runs, speed_text = _speed(out_dir, target, drafter, prompts, grid)
        quality, quality_text, best = _quality(out_dir, target, early, drafter, tokens, grid)
        points, rules_text = _rules(out_dir, target, drafter, tokens, grid, int(rng.integers(1 << 31)))
        samples = _samples(tokenizer, target, drafter, prompts, best, grid)
    finally:
        torch.set_num_threads(threads)
    (out_dir / "neural.json").write_text(json.dumps({"speed": runs, "quality": quality, "rules": points}, indent=1) + "\n")
    return "\n\n".join([_pair_text(log), speed_text, quality_text, rules_text, samples])


def _pair_text(log: dict) -> str:
    recipe = log["recipe"]
    held = {name: log[name]["held_out"][-1][1] for name in ("target", "drafter")}
    early = next(loss for step, loss in log["target"]["held_out"] if step == recipe["early_step"])
    return (
        f"A target of {log['target']['parameters'] / 1e6:.2f}M parameters and a drafter of "
        f"{log['drafter']['parameters'] / 1e6:.2f}M (transformers' GPT-2 class, byte-level BPE of "
        f"{recipe['vocab_size']} tokens), trained by `python -m mdverify.workloads.neural` from seed {recipe['seed']} "
        f"on the source of {len(log['training_modules'])} standard-library modules ({log['training_tokens']} tokens, "
        f"Python {log['python']}, {log['seconds'] / 60:.0f} minutes on one CPU thread) and committed with sha256 sums. "
        f"Held out: {', '.join(log['held_out_modules'])} ({log['held_out_tokens']} tokens, committed as tokens, so "
        "nothing below depends on the Python version that runs it). Held-out cross-entropy at the end of training "
        f"(nats per token): target {held['target']:.3f}, early target (step {recipe['early_step']}) {early:.3f}, "
        f"drafter {held['drafter']:.3f}.\n\n![training](neural_loss.png)"
    )


def _speed(out_dir: Path, target, drafter, prompts, grid) -> tuple[list, str]:
    """``hf.generate`` over the grid, beside plain target sampling at each temperature."""
    import matplotlib.pyplot as plt
    from tqdm import tqdm

    from mdverify.workloads import neural_decoding as nd

    plain = {t: nd.plain_sampling(target, target, prompts, t, grid["new_tokens"]) for t in grid["temperatures"]}
    lossless_name = grid["divergences"][0]  # eps = 0 is lossless for every divergence: one run stands for all
    cases = [(t, k, d, e) for t in grid["temperatures"] for k in grid["drafts"] for d in grid["divergences"]
             for e in grid["budgets"] if e > 0 or d == lossless_name]
    runs = []
    for temperature, k, divergence, eps in tqdm(cases, desc="neural decoding", leave=False):
        res = nd.decode(target, drafter, target, prompts, k, eps, divergence, temperature, grid["new_tokens"])
        runs.append({"temperature": temperature, "k": k, "divergence": divergence, "eps": eps,
                     "tokens_per_call": res.tokens_per_call, "acceptance": res.acceptance.tolist(),
                     "tokens_per_second": res.tokens_per_second,
                     "speedup": res.tokens_per_second / plain[temperature].tokens_per_second,
                     "spent_per_token": res.spent_per_sequence / grid["new_tokens"],
                     "log_likelihood": res.log_likelihood})

    def run(temperature, k, divergence, eps):
        key = (temperature, k, lossless_name if eps == 0 else divergence, eps)
        return next(r for r in runs if (r["temperature"], r["k"], r["divergence"], r["eps"]) == key)

    budgets = [e for e in grid["budgets"] if e > 0]
    fig, axes = plt.subplots(len(grid["temperatures"]), len(grid["drafts"]), squeeze=False, sharey=True,
                             figsize=(4.2 * len(grid["drafts"]), 3.4 * len(grid["temperatures"])))
    for row, temperature in enumerate(grid["temperatures"]):
        for col, k in enumerate(grid["drafts"]):
            ax = axes[row, col]
            for i, divergence in enumerate(grid["divergences"]):
                ax.plot(budgets, [run(temperature, k, divergence, e)["tokens_per_call"] for e in budgets], "o-",
                        color=f"C{i}", label=divergence)
            ax.axhline(run(temperature, k, None, 0.0)["tokens_per_call"], color="k", ls=":", label="eps = 0")
            ax.set_xscale("log")
            ax.set_title(f"T = {temperature}, k = {k}", fontsize=9)
            ax.set_xlabel("budget eps (per position)")
            ax.grid(alpha=0.3)
        axes[row, 0].set_ylabel("tokens per target call")
    axes[0, 0].legend(fontsize=7)
    _write(fig, out_dir / "neural_speed.png")

    temperature, k = _main(grid)
    detail = []
    for divergence in [None] + list(grid["divergences"]):
        for eps in ([0.0] if divergence is None else budgets):
            r = run(temperature, k, divergence, eps)
            detail.append(["lossless (eps = 0)" if divergence is None else divergence, f"{eps:g}",
                           f"{r['tokens_per_call']:.2f}", " / ".join(f"{a:.2f}" for a in r["acceptance"]),
                           f"{r['tokens_per_second']:.0f}", f"{r['speedup']:.2f}x", f"{r['spent_per_token']:.4f}",
                           f"{r['log_likelihood']:.3f}"])
    summary = []
    for t in grid["temperatures"]:
        for kk in grid["drafts"]:
            lossless, top = run(t, kk, None, 0.0), run(t, kk, lossless_name, max(budgets))
            summary.append([f"{t:g}", str(kk), f"{plain[t].tokens_per_second:.0f}", f"{lossless['tokens_per_call']:.2f}",
                            f"{lossless['speedup']:.2f}x", f"{top['tokens_per_call']:.2f}", f"{top['speedup']:.2f}x"])
    plain_main = plain[temperature]
    return runs, (
        f"**Speed.** `mdverify.hf.generate` from {grid['prompts']} held-out prompts of {grid['prompt_length']} tokens, "
        f"{grid['new_tokens']} new tokens each, batched, no top-k or top-p; the baseline is transformers' own "
        "`generate` sampling the target alone, timed in the same run on the same prompts (one CPU thread for both). "
        "Tokens per second is wall-clock new tokens over the decoding's time (the divergence accounting of "
        "`track_divergence` is timed apart and excluded).\n\n![tokens per call](neural_speed.png)\n\n"
        f"At T = {temperature:g}, k = {k} (plain sampling: {plain_main.tokens_per_second:.0f} tokens/s, log-likelihood "
        f"{plain_main.log_likelihood:.3f} per token). 'Spent' is the divergence actually spent, sum over the "
        "generated positions of D_f(r_t || p_t) per token (for kl, the sequence-level KL(R || P) per token by the "
        "chain rule); the last column is the continuations' mean log-likelihood under the finished target.\n\n"
        + _table(["rule", "eps", "tokens per call", "acceptance at draft positions 1..k", "tokens/s",
                  "vs plain sampling", "spent per token", "log-likelihood per token"], detail)
        + f"\n\nEvery temperature and k, lossless and at {lossless_name} eps = {max(budgets):g}:\n\n"
        + _table(["T", "k", "plain tokens/s", "lossless tokens per call", "lossless vs plain",
                  f"eps {max(budgets):g} tokens per call", f"eps {max(budgets):g} vs plain"], summary)
    )


def _main(grid) -> tuple[float, int]:
    temperature = MAIN[0] if MAIN[0] in grid["temperatures"] else grid["temperatures"][-1]
    return temperature, MAIN[1] if MAIN[1] in grid["drafts"] else grid["drafts"][0]


def _quality(out_dir: Path, target, early, drafter, tokens, grid) -> tuple[list, str, float]:
    """Teacher-forced held-out cross-entropy of r against p and q, for both target checkpoints."""
    import matplotlib.pyplot as plt

    from mdverify.workloads import neural_decoding as nd

    (final_rows, early_rows, Q), truth = nd.teacher_forced_rows([target, early, drafter], tokens, grid["positions"])
    budgets = [e for e in grid["budgets"] if e > 0]
    rows, table = [], []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    best_kl = 0.0
    for ax, (label, P) in zip(axes, (("finished target", final_rows), ("early target", early_rows))):
        for i, divergence in enumerate(grid["divergences"]):
            measured = [nd.quality(P, Q, truth, eps, divergence) for eps in budgets]
            rows += [{"target": label, **m.__dict__} for m in measured]
            changes = [m.ce_r - m.ce_p for m in measured]
            ax.plot(budgets, changes, "o-", color=f"C{i}", label=divergence)
            best = int(np.argmin(changes))
            m = measured[best]
            beats = changes[best] < 0 and m.mean_h > 2 * m.stderr
            if label == "finished target" and divergence == "kl" and changes[best] < 0:
                best_kl = budgets[best]
            table.append([label, divergence, f"{m.ce_p:.3f}", f"{m.ce_q:.3f}", f"{budgets[best]:g}", f"{m.ce_r:.3f}",
                          f"{changes[best]:+.4f}", f"{m.mean_h:+.4f} ± {m.stderr:.4f}", f"{m.won:.2f}",
                          "yes" if beats else "no", f"{changes[-1]:+.4f}"])
        _axes(ax, "budget eps", "held-out CE(r) - CE(p) (nats per token; < 0: r beats p)",
              f"{label}: {truth.size} held-out positions", zero=True, fontsize=7)
    _write(fig, out_dir / "neural_quality.png")
    agree = max(abs((r["ce_p"] - r["ce_r"]) - r["mean_h"]) for r in rows)
    verdicts = []
    for label in ("finished target", "early target"):
        won = [row[1] for row in table if row[0] == label and row[9] == "yes"]
        verdicts.append(f"r beats the {label} for {', '.join(won)}" if won else f"no budget beats the {label}")
    return rows, (
        f"**Quality, teacher-forced.** At {truth.size} held-out positions (windows of 128 tokens, each predicted "
        "from its true prefix), T = 1: the cross-entropy of the mentored r against that of p (the target) and q "
        "(the drafter). C7 says CE(p) - CE(r) = E[h] with h = log(r / p) at the observed tokens; the column gives "
        "its mean with the standard error over positions, and the difference of the measured cross-entropies "
        f"matches it to {agree:.1e}. 'Beats p' needs the best CE(r) below CE(p) by more than two standard errors. "
        f"Plainly: {'; '.join(verdicts)}.\n\n![quality](neural_quality.png)\n\n"
        + _table(["target", "divergence", "CE(p)", "CE(q)", "best eps", "CE(r) at best", "CE(r) - CE(p)",
                  "E[h] (C7) ± s.e.", "positions won", "beats p", f"CE(r) - CE(p) at eps {budgets[-1]:g}"], table)
    ), best_kl


def _rules(out_dir: Path, target, drafter, tokens, grid, seed: int) -> tuple[list, str]:
    """Lenience and the static ensemble against the exact mentored rule at the same spent KL."""
    import matplotlib.pyplot as plt

    from mdverify.workloads import neural_decoding as nd

    temperature, k = _main(grid)
    chains = nd.drafted_chains(target, drafter, nd.prompts(tokens, grid["chains"], 64, seed), k, temperature, seed)
    sweeps = {"mentored": np.geomspace(1e-3, 3.0, 14), "flat_price": np.geomspace(0.3, 300.0, 16),
              "chain_price": np.geomspace(0.3, 300.0, 16)}
    points = [{"rule": rule, "parameter": float(v), **dict(zip(("tokens_per_call", "kl_per_call"),
                                                               nd.rule_on_chains(chains, rule, v)))}
              for rule, values in sweeps.items() for v in values]

    def optimum(rule, spent):  # tokens per call of a mentored sweep at the same spent KL (log-linear)
        mine = sorted((pt["kl_per_call"], pt["tokens_per_call"]) for pt in points if pt["rule"] == rule)
        return float(np.interp(np.log(spent), np.log([d for d, _ in mine]), [t for _, t in mine]))

    table = []
    for rule, values in (("lenience", LENIENCE), ("static_ensemble", ENSEMBLE)):
        for value in values:
            tokens_per_call, spent = nd.rule_on_chains(chains, rule, value)
            points.append({"rule": rule, "parameter": value, "tokens_per_call": tokens_per_call, "kl_per_call": spent})
            same_eps, priced = optimum("mentored", spent), optimum("chain_price", spent)
            table.append([rule, f"{'alpha' if rule == 'lenience' else 'w'} = {value:g}", f"{spent:.4f}",
                          f"{tokens_per_call:.3f}", f"{same_eps:.3f}", f"{priced:.3f}",
                          f"{max(same_eps, priced) - tokens_per_call:+.3f}"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = {"mentored": "mentored, one eps per position", "flat_price": "mentored, one price per position",
              "chain_price": "mentored, chain price (md.plan_chain)", "lenience": "lenience (vLLM 'mentored' patch)",
              "static_ensemble": "static ensemble (transformers)"}
    for i, (rule, label) in enumerate(labels.items()):
        mine = sorted((pt["kl_per_call"], pt["tokens_per_call"]) for pt in points if pt["rule"] == rule)
        ax.plot([d for d, _ in mine], [t for _, t in mine], "-" if rule in sweeps else "o--", color=f"C{i}", label=label)
    _axes(ax, "expected KL spent per target call (nats)", "expected tokens per target call",
          f"Rules shipped in decoders against the optimum, T = {temperature:g}, k = {k}")
    _write(fig, out_dir / "neural_rules.png")
    return points, (
        f"**The rules that ship in real decoders.** On {grid['chains']} drafted chains (the drafter proposes {k} tokens "
        f"after a held-out prompt, the target scores the {k + 1} positions, T = {temperature:g}), each rule's expected "
        "tokens per call and expected KL spent per call, computed exactly from its acceptance probabilities at the "
        "drafted tokens (position j counts only when every earlier draft was kept): transformers' "
        "`assistant_ensemble_weight` (speculative sampling towards w p + (1 - w) q) and the rule public vLLM patches "
        "call 'mentored' (lenience: accept iff p / ((1 - alpha) q) >= u, residual unchanged), against the exact "
        "mentored rule for kl at the same spent KL (interpolated in log KL), with one budget at every position and "
        "with the budgets of one chain price (`md.plan_chain`, which maximises tokens minus price times KL); the "
        "plot adds one price per position that ignores the chain (SPEC section 10's three curves). "
        "The gain is the better of the two columns minus the rule.\n\n![rules](neural_rules.png)\n\n"
        + _table(["rule", "parameter", "KL per call", "tokens per call", "mentored, one eps", "mentored, chain price",
                  "mentored gain"], table)
    )


def _samples(tokenizer, target, drafter, prompts, best_eps: float, grid) -> str:
    """Continuations of two prompts at eps = 0 and at the best kl budget (or the largest, if none beats p)."""
    from mdverify.hf import generate

    temperature, k = _main(grid)
    budgets = [e for e in grid["budgets"] if e > 0]
    chosen = best_eps if best_eps > 0 else max(budgets)
    why = "the kl budget with the lowest held-out cross-entropy" if best_eps > 0 else \
        "the largest budget (no budget beat the finished target)"
    blocks = []
    for b in range(min(2, prompts.shape[0])):
        prompt = _fenced(tokenizer.decode(prompts[b].tolist()))
        blocks.append(f"Prompt {b + 1} (held-out source):\n\n```python\n{prompt}\n```")
        for eps in (0.0, chosen):
            out = generate(target, drafter, prompts[b:b + 1], k=k, eps=eps, divergence="kl", temperature=temperature,
                           max_new_tokens=grid["new_tokens"], seed=b)
            text = _fenced(tokenizer.decode(out.sequences[0, prompts.shape[1]:].tolist()))
            blocks.append(f"eps = {eps:g} ({out.stats.tokens_per_call:.2f} tokens per call):\n\n```python\n{text}\n```")
    return (f"**Samples.** Continuations at T = {temperature:g}, k = {k}, kl, at eps = 0 and at eps = {chosen:g}, "
            f"{why}.\n\n" + "\n\n".join(blocks))


def _fenced(text: str) -> str:
    """Text that cannot close the Markdown code block it is shown in."""
    return text.replace("`" * 3, "'" * 3)
