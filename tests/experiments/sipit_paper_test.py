"""`sipit:paper,short` on text rows from `data.path`, with a tiny checkpoint.

A random transformers Llama checkpoint with a tiny BPE tokenizer beside it;
a local copy of English Wikipedia's layout (`wikimedia/wikipedia`, subset
`20231101.en`: `<subset>/train-*.parquet`, columns id / url / title /
text as its dataset card's `dataset_info.features` list them) written
here. The run reads the rows (counted in results.json's `data.rows`),
inverts the first 20 tokens of some of them, runs the collision test on
windows of their tokens, the noise sweep with the nearest-candidate rule
and the prompt-length curve. Checked: the rows read and the prompts
inverted, exact recovery, noise below half the margin recovered exactly
(spec Q.2's robust guarantee), the margins and the length curve against
brute-force recomputations here.
"""

import json
import os
import shutil
import tempfile

import datasets
from absl.testing import absltest
import numpy as np

from jaxlab.analysis import injectivity as inj
from jaxlab.analysis import sipit
from jaxlab.configs import sipit as sipit_config
from jaxlab.experiments import sipit as sipit_exp
from jaxlab.io import pretrained
from jaxlab.testing import hf_fixtures

TEXTS = [
    "Anarchism is a political philosophy and movement that is skeptical of "
    "all justifications for authority and seeks to abolish the institutions "
    "it claims maintain unnecessary coercion and hierarchy.",
    "Albedo is the fraction of sunlight that is diffusely reflected by a "
    "body. It is measured on a scale from zero, corresponding to a black "
    "body that absorbs all incident radiation, to one.",
    "The river flows north through a wide valley of farms and orchards, "
    "past two small towns, before it joins the sea at a sandy estuary.",
    "A lighthouse is a tower, building, or other type of physical structure "
    "designed to emit light from a system of lamps and lenses.",
    "Chess is a board game for two players. It is played on a square board "
    "of sixty four squares arranged in an eight by eight grid.",
    "The violin is a wooden string instrument in the violin family. Most "
    "violins have a hollow wooden body, four strings and a bow.",
    "Photosynthesis is a process used by plants and other organisms to "
    "convert light energy into chemical energy that fuels their activities.",
    "The library opened in the spring with ten thousand books, a reading "
    "room for children and a garden where visitors could sit in the sun.",
    "short row",
    "Volcanoes form where magma from the mantle reaches the surface through "
    "cracks in the crust, building mountains of lava and ash over time.",
]


class SipitPaperTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = os.path.join(cls.root, "ckpt")
    hf_fixtures.make_chat_checkpoint(cls.ckpt, "llama", vocab_size=400,
                                     hidden_size=32, num_layers=1,
                                     max_position_embeddings=256)
    cls.data = os.path.join(cls.root, "wikipedia")
    os.makedirs(os.path.join(cls.data, "20231101.en"))
    datasets.Dataset.from_dict({
        "id": [str(i) for i in range(len(TEXTS))],
        "url": [f"https://en.wikipedia.org/wiki?curid={i}"
                for i in range(len(TEXTS))],
        "title": [f"T{i}" for i in range(len(TEXTS))],
        "text": TEXTS}).to_parquet(os.path.join(
            cls.data, "20231101.en", "train-00000-of-00001.parquet"))
    c = sipit_config.get_config("paper,short")
    c.init_from = cls.ckpt
    c.data.path = cls.data
    c.data.cache_dir = os.path.join(cls.root, "hf_cache")
    # `short` inverts 8 rows (num_prompts 100 -> 8; checked in
    # test_rows_read_and_prompts_inverted); 4 here, half the inversion and
    # noise-sweep time (the sweep takes the inverted prompts, at most
    # noise.num_prompts 8), the same checks on each.
    cls.short_num_prompts = c.sipit.num_prompts
    c.sipit.num_prompts = 4
    cls.config = c
    cls.work = os.path.join(cls.root, "work")
    cls.out = sipit_exp.run(c, cls.work)
    with open(os.path.join(cls.work, "results.json")) as f:
      cls.res = json.load(f)
    cls.tok = pretrained.tokenizer(cls.ckpt)
    cls.model, _ = pretrained.load(cls.ckpt)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def test_rows_read_and_prompts_inverted(self):
    c = self.config
    self.assertEqual((c.data.subset, c.data.max_rows), ("20231101.en", 8))
    self.assertEqual(self.short_num_prompts, 8)  # num_prompts 100 (short)
    self.assertEqual(self.res["data"]["rows"], {"train": 8})
    self.assertEqual(self.res["data"]["source"], "hf")
    self.assertLen(self.res["data"]["digest"], 64)
    rec = self.out["per_seed"][0]
    streams = [self.tok.encode(t) for t in TEXTS[:8]]
    eligible = [s for s in streams if len(s) >= 20]
    self.assertLen(eligible, 8)
    self.assertLen(rec["rows"], 4)  # sipit.num_prompts (setUpClass)
    self.assertLen(set(rec["rows"]), 4)
    # Every layer 0..1 (one block: its input and its output), the BOS
    # given: every token recovered exactly.
    self.assertEqual(self.out["layers"], [0, 1])
    inv = rec["pretrained"]["inversion"]
    for policy in ("gradient", "random"):
      for layer in (0, 1):
        self.assertEqual(inv[f"{policy}/{layer}"]["accuracy"], 1.0,
                         (policy, layer))
        self.assertEqual(inv[f"{policy}/{layer}"]["prefix_len"], 1)
    self.assertEqual(rec["num_collision_prompts"], 8)
    self.assertEqual(rec["continuations"], 64)

  def test_noise_sweep_with_the_nearest_candidate(self):
    z = self.out["per_seed"][0]["pretrained"]["noise"]
    self.assertEqual(z["layer"], 1)  # the last
    self.assertEqual(z["scales"], list(self.config.noise.scales))
    for c, acc in zip(z["scales"], z["accuracy"]):
      if c < 1:  # ||e|| < margin / 2: the nearest candidate is the truth
        self.assertEqual(acc, 1.0, c)
    self.assertLess(z["accuracy"][-1], 1.0)  # c = 10: far outside the ball
    # The margin of one position, brute force over V here.
    ids = np.array([self.tok.bos_id] + self.tok.encode(TEXTS[0])[:3],
                   np.int32)
    h = sipit.layer_states(self.model, ids)[1]
    allst = sipit.next_token_states(self.model, ids[:3])[1]
    d = np.linalg.norm(allst - h[3][None], axis=-1)
    want = np.min(np.delete(d, ids[3]))
    got = inj.noise_sweep(self.model, ids[None], layer=1, scales=(0.5,),
                          prefix_len=3)
    np.testing.assert_allclose(got["margin_min"], want, rtol=1e-6)
    self.assertEqual(got["accuracy"], [1.0])
    rec, dist = inj.nearest_candidate_inversion(self.model, h, layer=1,
                                                prefix_ids=ids[:1])
    np.testing.assert_array_equal(rec, ids)
    self.assertLess(float(dist.max()), 1e-4)

  def test_length_curve_matches_brute_force(self):
    lc = self.out["per_seed"][0]["pretrained"]["length_curve"]
    # Lengths with fewer than 2 distinct windows are left out.
    self.assertContainsSubset([1, 2, 4, 8, 16, 32], lc["lengths"])
    streams = [self.tok.encode(t) for t in TEXTS[:8]]
    for n, count, mins in zip(lc["lengths"], lc["prompts"], lc["min"]):
      prompts = inj.text_window_prompts(streams, 8, min_len=n, max_len=n,
                                        seed=0)
      self.assertLen(prompts, count)
      x = inj.last_token_states(self.model, prompts)[-1].astype(np.float64)
      d = np.linalg.norm(x[:, None] - x[None], axis=-1)
      want = d[np.triu_indices(len(x), 1)].min()
      np.testing.assert_allclose(mins[-1], want, rtol=1e-4, atol=1e-6)
    tables = {t["id"] for t in self.res["tables"]}
    self.assertContainsSubset({"inversion", "collisions", "noise",
                               "length_curve"}, tables)


class TextWindowsTest(absltest.TestCase):

  def test_a_large_corpus_is_sampled(self):
    # 2 streams x 100k tokens x 25 lengths: 5M windows, over the enumeration
    # limit; each prompt is a distinct window of one stream.
    streams = [list(range(100_000)), list(range(200_000, 300_000))]
    got = inj.text_window_prompts(streams, 50, min_len=8, max_len=32, seed=3)
    self.assertLen(got, 50)
    self.assertLen({tuple(p) for p in got}, 50)
    for p in got:
      self.assertBetween(len(p), 8, 32)
      self.assertEqual(p, list(range(p[0], p[0] + len(p))))
      self.assertTrue(p[-1] < 100_000 or p[0] >= 200_000)
    self.assertEqual(got, inj.text_window_prompts(streams, 50, min_len=8,
                                                  max_len=32, seed=3))


if __name__ == "__main__":
  absltest.main()
