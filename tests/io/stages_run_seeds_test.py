"""`io.stages.run_seeds`: the per-seed runner (cache, rewrite, resume)."""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
import ml_collections

from jaxlab.io import stages


class RunSeedsTest(absltest.TestCase):

  def test_cache_write_after_each_seed_and_resume(self):
    workdir = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, workdir, ignore_errors=True)
    config = ml_collections.ConfigDict({"seeds": (0, 1, 2), "lr": 0.1,
                                        "label": "a"})
    calls, writes = [], []

    def fn(seed):
      calls.append(seed)
      if seed == 2 and len(calls) == 3:
        raise KeyboardInterrupt   # killed during the third seed
      return {"value": seed * config.lr, "pair": (seed, seed)}

    def write(done, rs):
      writes.append((done, rs))
      with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump({"seeds": done, "runs": rs}, f)

    with self.assertRaises(KeyboardInterrupt):
      stages.run_seeds(config.seeds, fn, workdir=workdir, config=config,
                       exclude=("seeds", "label"), write=write)
    self.assertEqual(calls, [0, 1, 2])
    self.assertEqual([w[0] for w in writes], [[0], [0, 1]])
    with open(os.path.join(workdir, "results.json")) as f:
      self.assertEqual(json.load(f)["seeds"], [0, 1])  # what finished
    # The rerun resumes: seeds 0 and 1 read back, only seed 2 computed.
    out = stages.run_seeds(config.seeds, fn, workdir=workdir, config=config,
                           exclude=("seeds", "label"), write=write)
    self.assertEqual(calls, [0, 1, 2, 2])
    self.assertEqual(out, [{"value": s * 0.1, "pair": [s, s]}
                           for s in (0, 1, 2)])       # as JSON reads them
    self.assertTrue(os.path.isfile(os.path.join(workdir, "seeds",
                                                "seed_2.json")))
    # An excluded field (a label) keeps the cache; another lr recomputes.
    config.label = "b"
    stages.run_seeds(config.seeds, fn, workdir=workdir, config=config,
                     exclude=("seeds", "label"))
    self.assertLen(calls, 4)
    config.lr = 0.2
    out = stages.run_seeds(config.seeds, fn, workdir=workdir, config=config,
                           exclude=("seeds", "label"), name="seed")
    self.assertEqual(calls, [0, 1, 2, 2, 0, 1, 2])
    self.assertAlmostEqual(out[2]["value"], 0.4)


if __name__ == "__main__":
  absltest.main()
