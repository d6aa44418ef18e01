"""``diagnose``: all magnitude diagnostics of one model on local BEIR folders, as a markdown + PNG report.

Steps (paper 000 §4–5; choices in docs/diagnostics.md):

1. κ rule: sample ``n_pairs`` (default 8n) (query, relevant document) pairs from the ``pairs_split`` qrels of all
   folders (seeded), encode them *raw* with their roles, :func:`~st_magnitude.diagnostics.fim.recommend_normalization`
   (verdict "inconclusive" below 8n pairs or when the half-sampling interval contains 0).
2. Per dataset (evaluation ``split``, optional NanoBEIR-style subsample): raw norms by role, Cohen's d of document
   norms (labelled, and label-free with cosine-ranked pseudo-labels), query-norm CV, the single-model component-FIM
   profile on the judged pairs (every similarity's formula at this model's embeddings), pooled ROC-AUC of
   the model's own similarity, the cross-evaluation row (this model × cosine/dot/qnorm/dnorm).
3. Report: ``report.md`` plus ``norms_<dataset>.png`` (document-norm histograms, relevant vs irrelevant) and
   ``roc_<dataset>.png``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from st_magnitude.data.beir import BEIRData, doc_text, load_beir, missing_folder, subsample
from st_magnitude.diagnostics.cross_eval import EVAL_SIMILARITIES, cross_evaluation_from_embeddings, format_matrix
from st_magnitude.diagnostics.fim import (
    ConditionNumberResult,
    component_fim_table,
)
from st_magnitude.diagnostics.kappa_rule import run_kappa
from st_magnitude.diagnostics.norms import (
    doc_norm_cohens_d,
    effect_size_band,
    label_free_doc_norm_cohens_d,
    norm_stats,
)
from st_magnitude.evaluation.auc import per_query_auc, plot_roc, pooled_auc_pools, pooled_auc_score
from st_magnitude.evaluation.ir import encode_roles
from st_magnitude.model.info import model_gammas, model_similarity
from st_magnitude.model.load import describe_similarity, load_model, raw_model
from st_magnitude.model.seq_length import backbone_limit, set_max_seq_length

logger = logging.getLogger(__name__)

__all__ = ["DatasetDiagnosis", "Diagnosis", "diagnose"]


@dataclass
class DatasetDiagnosis:
    name: str
    note: str
    query_norms: dict[str, float]
    doc_norms: dict[str, float]
    cohens_d: float | None  # None: undefined (fewer than two relevant or irrelevant documents)
    cohens_d_band: str
    n_relevant: int
    n_irrelevant: int
    cohens_d_label_free: float | None
    label_free_k: int
    fim_table: dict[str, dict[str, float]]
    pooled_auc: float
    per_query_auc: float
    cross_eval: dict[str, dict[str, float]]
    plots: dict[str, str] = field(default_factory=dict)


@dataclass
class Diagnosis:
    model: str
    serves: str
    kappa: ConditionNumberResult | None
    kappa_seconds: float | None
    kappa_source: str
    datasets: list[DatasetDiagnosis]
    report_path: str | None = None

    def to_markdown(self) -> str:
        lines = [f"# Magnitude diagnostics: `{self.model}`", "", f"Model serves: {self.serves}.", ""]
        lines += ["## Which side to normalise: κ(F_qnorm) vs κ(F_dnorm) (paper 000 §4.5, eq. 26)", ""]
        if self.kappa is None:
            lines += ["Not computed.", ""]
        else:
            k = self.kappa
            interval = (
                f"{int(k.confidence * 100)}% half-sampling CI [{k.ci_low:+.4f}, {k.ci_high:+.4f}] "
                f"({k.n_resamples} replicates of {k.subsample_size} distinct pairs, without replacement)"
                if k.ci_low is not None
                else "no interval"
            )
            verdict = (
                f"**recommendation: {k.recommendation}** (confident: the interval excludes 0)"
                if k.confident
                else f"**inconclusive: no recommendation** ({k.reason}; Δ's sign alone is not evidence)"
            )
            lines += [
                f"- pairs: {k.n_pairs} from {self.kappa_source}; embedding dim n = {k.dim}; minimum for a verdict "
                f"{k.min_pairs} (8n); eigenvalues kept: {k.rank_qnorm} (qnorm), {k.rank_dnorm} (dnorm); "
                f"damping {k.damping:g}",
                f"- log10 κ(qnorm) = {k.log10_kappa_qnorm:.4f}, log10 κ(dnorm) = {k.log10_kappa_dnorm:.4f}",
                f"- Δ = log10 κ(qnorm) − log10 κ(dnorm) = {k.delta:+.4f}, {interval}",
                f"- {verdict}",
                f"- time: {self.kappa_seconds:.1f} s (encoding + κ + replicates)",
                "",
                "The rule predicts optimisation ease, not final quality (paper 000 App. M.4); paper margins are "
                "0.01–0.09 in log10.",
                "",
            ]
        for ds in self.datasets:
            lines += [f"## {ds.name}", ""]
            if ds.note:
                lines += [f"_{ds.note}_", ""]
            qn, dn = ds.query_norms, ds.doc_norms
            lines += [
                "| role | n | mean ‖·‖ | std | min | max | CV % |",
                "|---|---|---|---|---|---|---|",
                f"| query | {qn['n']} | {qn['mean']:.4f} | {qn['std']:.4f} | {qn['min']:.4f} | {qn['max']:.4f} | "
                f"{qn['cv_percent']:.2f} |",
                f"| document | {dn['n']} | {dn['mean']:.4f} | {dn['std']:.4f} | {dn['min']:.4f} | {dn['max']:.4f} | "
                f"{dn['cv_percent']:.2f} |",
                "",
                f"- Cohen's d of document norms, relevant ({ds.n_relevant}) vs irrelevant ({ds.n_irrelevant}): "
                f"**{_fmt_d(ds.cohens_d)}** ({ds.cohens_d_band}; > 0 favours qnorm, < 0 dnorm)",
                f"- label-free Cohen's d of document norms, pseudo-relevant = top-{ds.label_free_k} per query by "
                f"cosine (norm-blind, so the ranking cannot favour large norms): {_fmt_d(ds.cohens_d_label_free)}",
                f"- pooled ROC-AUC (model's similarity, 500 hard negatives/query): {ds.pooled_auc:.4f}; "
                f"per-query mean AUC: {ds.per_query_auc:.4f}",
                "",
                "Component FIM of each similarity's formula evaluated on *this one model's* raw embeddings "
                "(log10 E[(∂s/∂·)²] over the judged pairs, paper 000 eqs. 11–25; −20 = exact 0). This is a "
                "single-model sensitivity profile, not a reproduction of paper 000 Table 2: there each column comes "
                "from a different model, fine-tuned with that column's similarity, so only the column of the "
                "similarity this model was trained with corresponds to a Table 2 cell.",
                "",
                "| component | " + " | ".join(ds.fim_table) + " |",
                "|---" * (len(ds.fim_table) + 1) + "|",
            ]
            for comp in ("doc_mag", "query_mag", "angular"):
                lines.append(f"| {comp} | " + " | ".join(f"{ds.fim_table[v][comp]:.2f}" for v in ds.fim_table) + " |")
            lines += ["", "Cross-evaluation (raw embeddings of this model scored with each similarity):", ""]
            lines += [format_matrix(ds.cross_eval), ""]
            for label, p in ds.plots.items():
                lines.append(f"![{label}]({os.path.basename(p)})")
            lines.append("")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.kappa is not None:
            d["kappa"].pop("replicate_deltas", None)
        return d


def _fmt_d(d: float | None) -> str:
    if d is None:
        return "undefined (fewer than 2 relevant or 2 irrelevant documents; use a larger --max-corpus)"
    return f"{d:+.3f}"


def _plot_norms(rel: list[float], irrel: list[float], path: str, title: str, queries: list[float] = ()) -> str:
    """Raw norms of the irrelevant and relevant documents and of the queries, overlaid on one set of bins."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
    bins = np.histogram_bin_edges(np.r_[rel, irrel, list(queries)], bins=40)
    for values, label in ((irrel, "irrelevant docs"), (rel, "relevant docs"), (list(queries), "queries")):
        if values:  # an empty group (every document judged) has no density
            ax.hist(values, bins=bins, alpha=0.55, density=True, label=f"{label} (n={len(values)})")
    ax.set(xlabel="raw norm ‖v‖ (before any normalisation)", ylabel="density", title=title)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _diagnose_dataset(model, raw, data: BEIRData, out_dir: str | None, label_free_k: int, batch_size: int):
    qids, cids = list(data.queries), list(data.corpus)
    q, d = encode_roles(
        raw, [data.queries[i] for i in qids], [doc_text(data.corpus[i]) for i in cids], batch_size=batch_size
    )
    qn = torch.linalg.vector_norm(q, dim=-1).numpy()
    dn = torch.linalg.vector_norm(d, dim=-1).numpy()
    doc_norms = dict(zip(cids, dn.tolist()))
    relevant = {doc for rel in data.qrels.values() for doc, g in rel.items() if g > 0}
    n_rel = len(relevant & set(doc_norms))
    n_irr = len(doc_norms) - n_rel
    try:
        cd = doc_norm_cohens_d(doc_norms, relevant)[0]
    except ValueError as exc:  # e.g. a subsample where every kept document is judged relevant
        logger.warning("%s: labelled Cohen's d undefined: %s", data.name, exc)
        cd = None
    served = model_similarity(model)
    if served is None:  # unrecognised structure: score the model's own outputs
        sq, sd = encode_roles(
            model, [data.queries[i] for i in qids], [doc_text(data.corpus[i]) for i in cids], batch_size=batch_size
        )
        score_fn, sq_, sd_ = model.similarity, sq, sd
    else:
        score_fn, sq_, sd_ = served, q, d
    try:  # pseudo-labels from a norm-blind (cosine) ranking of the raw embeddings: never circular (norms.py)
        cd_free = label_free_doc_norm_cohens_d(q, d, label_free_k)[0]
    except ValueError as exc:
        logger.warning("%s: label-free Cohen's d undefined: %s", data.name, exc)
        cd_free = None
    pools = pooled_auc_pools(sq_, sd_, qids, cids, data.qrels, score_fn)
    # component FIM on the judged pairs (raw embeddings)
    pi = {c: i for i, c in enumerate(cids)}
    qi = {c: i for i, c in enumerate(qids)}
    pairs = [(qi[qq], pi[dd]) for qq, rel in data.qrels.items() for dd, g in rel.items() if g > 0]
    pq = q[[a for a, _ in pairs]]
    pd = d[[b for _, b in pairs]]
    gammas = model_gammas(model)
    learn = gammas if gammas is not None and 0 < gammas[0] < 1 else (0.5, 0.5)
    fim = component_fim_table(pq, pd, learnable_gammas=learn)
    cross = cross_evaluation_from_embeddings({"this model": (q, d)}, data, EVAL_SIMILARITIES)
    plots = {}
    if out_dir:
        rel_n = [doc_norms[c] for c in cids if c in relevant]
        irr_n = [doc_norms[c] for c in cids if c not in relevant]
        plots["document norms"] = _plot_norms(
            rel_n,
            irr_n,
            os.path.join(out_dir, f"norms_{data.name}.png"),
            f"{data.name}: raw document and query norms",
            queries=qn.tolist(),
        )
        plots["pooled ROC"] = plot_roc({data.name: pools}, os.path.join(out_dir, f"roc_{data.name}.png"))
    return DatasetDiagnosis(
        name=data.name,
        note=data.note,
        query_norms=dict(norm_stats(qn)),
        doc_norms=dict(norm_stats(dn)),
        cohens_d=cd,
        cohens_d_band=effect_size_band(cd) if cd is not None else "undefined",
        n_relevant=n_rel,
        n_irrelevant=n_irr,
        cohens_d_label_free=cd_free,
        label_free_k=label_free_k,
        fim_table=fim,
        pooled_auc=pooled_auc_score(pools.positives, pools.negatives),
        per_query_auc=per_query_auc(pools),
        cross_eval=cross,
        plots=plots,
    )


#: the token cap of the norms and AUC by default (lowered to the backbone's limit when that is smaller; a value given
#: beyond the limit is refused)
DEFAULT_MAX_SEQ_LENGTH = 128


def diagnose(
    model,
    data: Sequence[str | os.PathLike],
    *,
    split: str = "test",
    pairs_split: str = "train",
    n_pairs: int | None = None,
    n_bootstrap: int = 100,
    max_seq_length: int | None = DEFAULT_MAX_SEQ_LENGTH,
    max_corpus: int | None = None,
    max_queries: int | None = None,
    label_free_k: int = 10,
    kappa: bool = True,
    kappa_max_seq_length: int | None = 64,
    output_dir: str | os.PathLike | None = None,
    seed: int = 42,
    batch_size: int = 32,
) -> Diagnosis:
    """Run every diagnostic (module docs) and write ``report.md`` + PNGs + ``diagnosis.json`` to ``output_dir``."""
    if not data:
        raise ValueError("diagnose needs at least one BEIR folder (--data)")
    for f in data:
        if not Path(f).is_dir():
            raise missing_folder(f)
    model_name = str(model) if isinstance(model, (str, os.PathLike)) else type(model).__name__
    model = load_model(model)
    if max_seq_length is not None:
        limit = backbone_limit(model)
        if max_seq_length == DEFAULT_MAX_SEQ_LENGTH and limit is not None and limit[0] < max_seq_length:
            max_seq_length = limit[0]  # the default cap, lowered to what the backbone takes; other values are checked
        set_max_seq_length(model, max_seq_length)
    raw = raw_model(model)
    out_dir = None
    if output_dir is not None:
        out_dir = str(output_dir)
        os.makedirs(out_dir, exist_ok=True)
    k_res, k_sec, k_src = (None, None, "")
    if kappa:
        k_res, k_sec, k_src = run_kappa(
            model,
            data,
            split=pairs_split,
            n_pairs=n_pairs,
            n_bootstrap=n_bootstrap,
            seed=seed,
            batch_size=batch_size,
            raw=raw,
            max_seq_length=kappa_max_seq_length,
        )
        logger.info("κ rule: %s (%.1f s)", k_res.summary(), k_sec)
    datasets = []
    for f in data:
        ds = load_beir(f, split)
        if max_corpus or max_queries:
            ds = subsample(ds, max_corpus=max_corpus, max_queries=max_queries, seed=seed)
        datasets.append(_diagnose_dataset(model, raw, ds, out_dir, label_free_k, batch_size))
    diag = Diagnosis(model_name, describe_similarity(model), k_res, k_sec, k_src, datasets)
    if out_dir:
        path = os.path.join(out_dir, "report.md")
        Path(path).write_text(diag.to_markdown(), encoding="utf-8")
        Path(out_dir, "diagnosis.json").write_text(json.dumps(diag.to_dict(), indent=2, default=str))
        diag.report_path = path
    return diag
