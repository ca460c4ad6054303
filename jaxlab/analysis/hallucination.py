"""Every paper-J estimator of one question set's sampled answers.

`score_questions(loglik [Q, R], ids [Q, R], cfg, key)` returns name ->
uncertainty `[Q]` for NE, DSE, SE, SE_R (Rényi-2) (`jaxlab.evals.uncertainty`)
and the QTN scores SE_R+ per lambda and the additive variant
(`jaxlab.analysis.qtn`), plus `_eigenstate_residual_max`
(max_q ||H psi0 - <H> psi0||, the null-vector Hamiltonian check). `cfg` holds
`lambdas`, `additive_lambdas` and `qtn` (the `QTNConfig` fields), as
`jaxlab/configs/uncertainty.py` writes them.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxlab.analysis import qtn
from jaxlab.evals import uncertainty as unc


def score_questions(loglik: np.ndarray, ids: np.ndarray, cfg, key: jax.Array
                    ) -> dict[str, np.ndarray]:
  """Every estimator's uncertainty per question: name -> `[Q]`."""
  out = {"NE": np.asarray(unc.naive_entropy(loglik)),
         "DSE": np.asarray(unc.discrete_semantic_entropy(ids)),
         "SE": np.asarray(unc.semantic_entropy(loglik, ids)),
         "SE_R (Rényi-2)": np.asarray(unc.renyi2_entropy(loglik, ids))}
  lams = tuple(cfg.lambdas) + tuple(cfg.additive_lambdas)
  qcfg = qtn.QTNConfig(**dict(cfg.qtn))
  d = qtn.sample_uncertainty(loglik, key=key, config=qcfg, details=True)
  q = qtn.qtn_scores(loglik, ids, key=key, lams=lams, config=qcfg,
                     u_qr=d["u"])
  # ||H psi0 - <H> psi0||: psi0 is an eigenstate of the null-vector H.
  out["_eigenstate_residual_max"] = float(np.max(d["eigenstate_residual"]))
  for i, lam in enumerate(cfg.lambdas):
    out[f"SE_R+ λ={lam:g}"] = q["renyi2_plus"][i]
  for j, lam in enumerate(cfg.additive_lambdas):
    out[f"additive λ={lam:g}"] = q["renyi2_additive"][len(cfg.lambdas) + j]
  return out


def evaluate(loglik: np.ndarray, ids: np.ndarray, correct: np.ndarray, cfg,
             key: jax.Array, seed: int) -> tuple[dict, float]:
  """(`evals.uncertainty.evaluate_scores` of every estimator, the
  eigenstate residual); `cfg.bootstrap` holds the bootstrap settings."""
  scores = score_questions(loglik, ids, cfg, key)
  residual = scores.pop("_eigenstate_residual_max")
  return unc.evaluate_scores(scores, correct, seed=seed,
                             **dict(cfg.bootstrap)), residual
