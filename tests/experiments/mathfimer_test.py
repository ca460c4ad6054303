"""MathFimer experiment pieces: single-digit problems, chance, resume."""

import json
import os
import re
import tempfile
from unittest import mock

from absl.testing import absltest
from flax import nnx
import jax
import numpy as np

from jaxlab.configs import mathfimer as mathfimer_config
from jaxlab.experiments import mathfimer as mf
from jaxlab.data import tokenizers
from jaxlab.data.synthetic import arithmetic
from jaxlab.objectives import fim


class SingleDigitProblemsTest(absltest.TestCase):

  def test_every_value_within_max_value_and_steps_correct(self):
    for p in arithmetic.make_problems(300, min_ops=3, max_ops=6, seed=0,
                                      max_value=9):
      nums = [int(t) for t in re.findall(r"\d+", p.solution)]
      self.assertTrue(all(0 <= n <= 9 for n in nums), p.solution)
      self.assertTrue(3 <= len(p.steps) - 1 <= 6)
      self.assertTrue(all(arithmetic.step_is_correct(s)
                          for s in p.steps[:-1]), p.solution)
      *_, last = p.steps[-2].split()
      self.assertEqual(p.answer, last)

  def test_default_max_value_is_the_old_generator(self):
    # Hand-checked first problem of seed 0 (values up to 99).
    p = arithmetic.make_problems(1, seed=0)[0]
    q = arithmetic.make_problems(1, seed=0, max_value=99)[0]
    self.assertEqual(p, q)
    self.assertGreater(max(int(t) for p in arithmetic.make_problems(
        100, seed=0) for t in re.findall(r"\d+", p.solution)), 9)

  def test_variables_format(self):
    # Hand-checked first problem of seed 0 with single digits (the same
    # draws as the chain format: 7 -5 *2 *2 -3 -2 *2).
    p = arithmetic.make_problems(1, seed=0, max_value=9,
                                 step_format="variables")[0]
    c = arithmetic.make_problems(1, seed=0, max_value=9)[0]
    self.assertEqual(c.question, "Compute 7 -5 *2 *2 -3 -2 *2.")
    self.assertEqual(p.question, "a=7,b=a-5,c=b*2,d=c*2,e=d-3,f=e-2,g=f*2; g?")
    self.assertEqual(p.steps, ("b=a-5=2", "c=b*2=4", "d=c*2=8", "e=d-3=5",
                               "f=e-2=3", "g=f*2=6", "answer: 6"))
    self.assertEqual(p.answer, c.answer)
    for p in arithmetic.make_problems(200, seed=1, max_value=9,
                                      step_format="variables"):
      self.assertTrue(all(arithmetic.step_is_correct(s, p.question)
                          for s in p.steps[:-1]), p.solution)
      self.assertEqual(arithmetic.extract_answer(p.solution), p.answer)
    with self.assertRaisesRegex(ValueError, "step_format"):
      arithmetic.make_problems(1, step_format="words")

  def test_bad_max_value(self):
    with self.assertRaisesRegex(ValueError, "max_value"):
      arithmetic.make_problems(1, max_value=1)

  def test_spec_preset(self):
    c = mathfimer_config.get_config("spec")
    self.assertEqual((c.problems.min_ops, c.problems.max_ops,
                      c.problems.max_value), (3, 6, 9))
    self.assertEqual((c.fim.rounds, tuple(c.fim.solve_rounds)), (3, (1,)))
    self.assertEqual((c.model.dim, c.problems.step_format), (128, "variables"))
    self.assertGreater(c.base_train.steps, 0)
    self.assertEqual(mathfimer_config.get_config().base_train.steps, 0)


class BaseInitTest(absltest.TestCase):

  def test_init_model_copies_the_base_weights(self):
    cfg = mathfimer_config.get_config("tiny")
    tok = tokenizers.ByteTokenizer()
    fim.FimFormat().add_to_tokenizer(tok)
    base = mf.init_model(tok, cfg, 0)
    fresh = mf.init_model(tok, cfg, 1)
    copy = mf.init_model(tok, cfg, 1, base)
    leaves = lambda m: jax.tree.leaves(nnx.state(m, nnx.Param))  # pylint: disable=g-long-lambda
    for a, b in zip(leaves(copy), leaves(base)):
      np.testing.assert_array_equal(a, b)
      self.assertIsNot(a, b)  # own buffers: the runner donates its state
    self.assertFalse(all(np.array_equal(a, b) for a, b in
                         zip(leaves(fresh), leaves(base))))


class SavedBaseTest(absltest.TestCase):

  def test_base_of_another_config_is_refused(self):
    # WORKDIR/base_model.npz carries the config it was trained with; a run
    # of another config (here: another FIM pool size) does not load it.
    from jaxlab.io import params as params_io  # pylint: disable=g-import-not-at-top
    cfg = mathfimer_config.get_config("tiny")
    cfg.base_train.steps = 5
    tok = tokenizers.ByteTokenizer()
    fim.FimFormat().add_to_tokenizer(tok)
    with tempfile.TemporaryDirectory() as wd:
      path = os.path.join(wd, "base_model.npz")
      meta = {"base_train": cfg.base_train.to_dict(),
              "model": cfg.model.to_dict(),
              "problems": dict(cfg.problems, num_fim=25),
              "min_step_chars": cfg.fim.min_step_chars}
      params_io.save(mf.init_model(tok, cfg, 0), path, meta)
      with self.assertRaisesRegex(ValueError, "base_model.npz"):
        _run_without_training(cfg, wd)
      # The same config loads it (and goes on to the coarse solver, whose
      # training the mock refuses).
      meta["problems"] = dict(cfg.problems)
      params_io.save(mf.init_model(tok, cfg, 0), path, meta)
      with self.assertRaisesRegex(AssertionError, "retrained"):
        _run_without_training(cfg, wd)


class HeldoutFimTest(absltest.TestCase):

  def test_exact_and_correct_fills(self):
    fmt = fim.FimFormat()
    items = [("a=1,b=a+1; b?", ["b=a+1=2", "answer: 2"]),
             ("a=1,b=a+2; b?", ["b=a+2=3", "answer: 3"]),
             ("a=1,b=a+1,c=b+1,d=c+1; d?", ["c=b+1=3", "d=c+1=4",
                                             "answer: 4"]),
             ("q", ["answer: 1"])]  # no computation step: skipped
    seen = []

    def fill(prompts):
      seen.extend(prompts)
      return ["b=a+1=2\nc=b+1=3"] * len(prompts)

    got = mf.heldout_fim_accuracy(fill, fmt, items, seed=0)
    # Fill "b=a+1=2": the masked step of item 1 (exact); a wrong definition
    # for item 2; a right step of item 3 that is not its masked one.
    self.assertEqual(got, {"heldout_middle_exact": 1 / 3,
                           "heldout_middle_correct": 2 / 3})
    self.assertLen(seen, 3)
    self.assertEqual(seen[0], fmt.prompt(items[0][0], (), ("answer: 2",)))


class ChanceTest(absltest.TestCase):

  def test_majority_answer(self):
    mk = lambda a: arithmetic.Problem("q", ("answer: " + a,), a)
    train = [mk("3"), mk("3"), mk("5")]
    test = [mk("3"), mk("5"), mk("3"), mk("7")]
    self.assertAlmostEqual(mf.majority_exact_match(train, test), 0.5)


_ROUND_STATS = {"insertion_rate": 0.5, "rejection_rate": 0.5,
                "rejected_similar": 1, "rejected_empty": 0, "gaps": 2,
                "skipped_short": 0, "steps_after": 2.0,
                "inserted_correct_frac": 1.0}


def _solver(em: float) -> dict:
  """A saved solver result with exact match `em`."""
  return {"exact_match": em, "gen_steps": 2.0,
          "train_steps_per_solution": 2.0, "train_correct_step_frac": 1.0}


def _run_without_training(cfg, wd):
  """mf.run from saved progress; any training raises. (summary, results)."""
  boom = mock.Mock(side_effect=AssertionError("retrained"))
  with mock.patch.object(mf, "train_solver", boom), \
      mock.patch.object(mf.runner, "train_lm", boom):
    out = mf.run(cfg, wd)
  with open(os.path.join(wd, "results.json")) as f:
    return out, json.load(f)


class ResumeTest(absltest.TestCase):

  def test_saved_stages_are_reused_not_retrained(self):
    # Also: only the rounds in fim.solve_rounds train a solver (round 1 has
    # no saved solver result, so training it would raise).
    cfg = mathfimer_config.get_config("tiny")
    cfg.fim.rounds, cfg.fim.solve_rounds = 2, (2,)
    items = [["Compute 1 +1.", ["1 + 1 = 2", "answer: 2"]]]
    hist = [_ROUND_STATS] * 2
    saved = {"datasets": {"coarse": items, "expanded_r1": items,
                          "expanded_r2": items, "fine": items},
             "hist": hist, "fim_counts": {"examples": 7,
                                          "skipped_short": 0},
             "solver/coarse": _solver(0.25),
             "solver/expanded_r2": _solver(0.5), "solver/fine": _solver(0.75),
             "fim_heldout": {"heldout_middle_exact": 0.5,
                             "heldout_middle_correct": 0.625}}
    with tempfile.TemporaryDirectory() as wd:
      with open(os.path.join(wd, "progress_seed0.json"), "w") as f:
        json.dump(saved, f)
      out, res = _run_without_training(cfg, wd)
    self.assertEqual(out["fim_examples"], 7)
    self.assertEqual(out["coarse/exact_match_mean"], 0.25)
    self.assertEqual(out["expanded_r2/exact_match_mean"], 0.5)
    self.assertNotIn("expanded_r1/exact_match_mean", out)
    self.assertEqual(out["round1/insertion_rate_mean"], 0.5)
    rows = {r["label"]: r["cells"] for r in res["tables"][0]["rows"]}
    self.assertEqual(list(rows), ["coarse", "expanded, round 2",
                                  "fine (ceiling)",
                                  "majority answer (chance)"])
    self.assertEqual(rows["fine (ceiling)"]["exact_match"]["values"],
                     [0.75])
    self.assertEqual(rows["majority answer (chance)"]["exact_match"]
                     ["values"], [out["chance_exact_match"]])
    fim_rows = res["tables"][2]["rows"]
    self.assertEqual(res["tables"][2]["id"], "fim")
    self.assertEqual(fim_rows[0]["cells"]["heldout_middle_correct"]
                     ["values"], [0.625])
    self.assertEqual(out["fim/heldout_middle_exact_mean"], 0.5)

  def test_shared_fim_seed_reports_expansion_once(self):
    # Seed 1's solvers on seed 0's expanded data (fim.seed = 0): the
    # expansion stage is read from progress_seed0.json and not reported
    # again (merging it with seed 0's run would count it twice).
    cfg = mathfimer_config.get_config("tiny")
    cfg.seeds, cfg.fim.seed, cfg.fim.rounds = (1,), 0, 1
    cfg.fim.solve_rounds, cfg.fim.fine_ceiling = (1,), False
    items = [["a=1,b=a+1; b?", ["b=a+1=2", "answer: 2"]]]
    hist = [_ROUND_STATS]
    with tempfile.TemporaryDirectory() as wd:
      with open(os.path.join(wd, "progress_seed0.json"), "w") as f:
        json.dump({"datasets": {"coarse": items, "expanded_r1": items,
                                "fine": items}, "hist": hist,
                   "fim_counts": {"examples": 5, "skipped_short": 0},
                   "solver/coarse": _solver(0.9)}, f)
      with open(os.path.join(wd, "progress_seed1.json"), "w") as f:
        json.dump({"solver/coarse": _solver(0.25),
                   "solver/expanded_r1": _solver(0.5)}, f)
      out, res = _run_without_training(cfg, wd)
    self.assertEqual(out["coarse/exact_match_mean"], 0.25)
    self.assertEqual(out["expanded_r1/exact_match_mean"], 0.5)
    self.assertNotIn("round1/insertion_rate_mean", out)
    tables = {t["id"]: t for t in res["tables"]}
    self.assertEqual(tables["expansion"]["rows"], [])
    self.assertEqual(
        [r["label"] for r in tables["solvers"]["rows"]],
        ["coarse", "expanded, round 1", "majority answer (chance)"])


if __name__ == "__main__":
  absltest.main()
