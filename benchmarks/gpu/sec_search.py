"""The GPU benchmark's ``search`` section: exact top-100 over random documents, ours against plain torch doing the
same work (the same ``{qid: {docid: score}}`` dicts out, scores in the corpus's dtype with float32 accumulation)."""

from __future__ import annotations

import statistics
import time

import torch

TOP_K = 100


def plain_topk(q: torch.Tensor, d: torch.Tensor, k: int, chunk: int = 50_000) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain torch: matmul + ``topk`` per chunk, then ``topk`` over the chunks' candidates."""
    vals, idx = [], []
    for s in range(0, d.shape[0], chunk):
        v, i = torch.topk(q @ d[s : s + chunk].T, min(k, min(chunk, d.shape[0] - s)), dim=1)
        vals.append(v)
        idx.append(i + s)
    v, i = torch.cat(vals, 1), torch.cat(idx, 1)
    top, pos = torch.topk(v, k, dim=1)
    return top, i.gather(1, pos)


def as_dicts(values: torch.Tensor, indices: torch.Tensor, qids: list[str], cids: list[str]) -> dict:
    """``{qid: {docid: score}}``, the output of ``exact_search``, built the plain way."""
    vals, idx = values.float().cpu().tolist(), indices.cpu().tolist()
    return {qid: {cids[j]: s for j, s in zip(idx[r], vals[r])} for r, qid in enumerate(qids)}


def same_up_to_ties(ours: dict, plain: dict, rel_tol: float) -> tuple[bool, int]:
    """Whether every query's two top-k sets differ only in documents that score the k-th score (within
    ``rel_tol`` of it: two kernels may round a score differently); also how many queries differ at all."""
    differing, ok = 0, True
    for qid, ref in plain.items():
        got = ours.get(qid, {})
        if set(got) == set(ref):
            continue
        differing += 1
        kth = min(min(ref.values()), min(got.values()))
        tol = rel_tol * max(1.0, abs(kth))
        extra = [got[c] for c in set(got) - set(ref)] + [ref[c] for c in set(ref) - set(got)]
        ok = ok and all(abs(s - kth) <= tol for s in extra)
    return ok, differing


def section_search(args, ctx, sync, free, log) -> dict:
    from st_magnitude.evaluation import exact_search
    from st_magnitude.evaluation._device_search import fp32_accumulation

    device, sizes = ctx["device"], ctx["sizes"]
    n, nq, dim, k = sizes["search_docs"], sizes["search_queries"], sizes["search_dim"], TOP_K
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    g = torch.Generator(device=device).manual_seed(0)
    d = torch.randn(n, dim, generator=g, device=device, dtype=dtype)
    q = torch.randn(nq, dim, generator=g, device=device, dtype=dtype)
    qids, cids = [f"q{i}" for i in range(nq)], [f"d{j}" for j in range(n)]

    def ours():
        return exact_search(q, d, qids, cids, top_k=k, ignore_identical_ids=False, device=device)

    def plain():
        with fp32_accumulation():  # the same arithmetic as ours: the corpus's dtype, float32 accumulation
            v, i = plain_topk(q, d, k)
        return as_dicts(v, i, qids, cids)

    times: dict[str, list[float]] = {"plain": [], "ours": []}
    out = {}
    ours(), plain()  # warm-up
    for _ in range(sizes["rounds"]):
        for name, fn in (("plain", plain), ("ours", ours)):
            sync(device)
            t0 = time.perf_counter()
            out[name] = fn()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    eps = torch.finfo(dtype).eps
    same, differing = same_up_to_ties(out["ours"], out["plain"], rel_tol=2 * eps)
    res = {
        "docs": n,
        "queries": nq,
        "dim": dim,
        "top_k": k,
        "dtype": str(dtype).removeprefix("torch."),
        "plain_seconds": statistics.median(times["plain"]),
        "ours_seconds": statistics.median(times["ours"]),
        "same_top_k_up_to_ties": same,
        "queries_whose_sets_differ_at_the_cut": differing,
        "baseline": "plain torch: matmul + topk per 50k chunk, then the same {qid: {docid: score}} dicts",
    }
    res["ratio"] = res["ours_seconds"] / res["plain_seconds"]
    log(f"search: {res}")
    d = q = None
    free(device)
    return res
