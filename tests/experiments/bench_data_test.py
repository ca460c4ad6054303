"""The data-pipeline benchmark (jaxlab/experiments/bench/data.py), tiny sizes.

Its numbers are checked against independent counts: the raw token count
against transformers' own encoding of every text, the pipeline's counts
against the loss masks of the same batches read again, and the hosts-fed
arithmetic against Llama-3-8B's parameter count written out by hand.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
import numpy as np

from jaxlab.data import pipeline
from jaxlab.experiments.bench import data as bench_data
from jaxlab.io import pretrained

SMOL = "smollm2-135m-instruct"
ROWS, SENTENCES, SEQ_LEN, BATCH, BATCHES, WARMUP = 40, 6, 128, 2, 3, 1


class BenchDataTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    if not pretrained.available(SMOL):
      raise absltest.SkipTest(pretrained.skip_reason(SMOL))
    cls.tmp = tempfile.mkdtemp()
    out = os.path.join(cls.tmp, "data.json")
    cls.report = bench_data.main([
        f"--rows={ROWS}", f"--doc_sentences={SENTENCES}",
        f"--seq_len={SEQ_LEN}", f"--batch={BATCH}", f"--batches={BATCHES}",
        f"--warmup={WARMUP}", "--workers=0,2", "--repeats=2",
        f"--out={out}"])
    with open(out) as f:
      cls.written = json.load(f)
    cls.tok = pretrained.tokenizer(SMOL)
    cls.texts = bench_data.make_texts(ROWS, doc_sentences=SENTENCES, seed=0)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def test_written_json_is_the_report(self):
    self.assertEqual(self.written, json.loads(json.dumps(self.report)))
    self.assertEqual([r["workers"] for r in self.report["pipeline"]], [0, 2])
    for key in ("cpu", "cpu_count", "loadavg_before", "loadavg_after"):
      self.assertIn(key, self.report["machine"])
    self.assertIn("tokenizers", self.report["versions"])

  def test_raw_tokens_are_the_sum_of_encode_lengths(self):
    # transformers' tokenizer (not the backend the bench times), per text.
    expected = sum(len(self.tok.hf.encode(t, add_special_tokens=False))
                   for t in self.texts)
    raw = self.report["raw"]
    self.assertEqual(raw["tokens"], expected)
    self.assertEqual(raw["encode_loop"]["tokens"], expected)
    self.assertEqual(raw["transformers_encode_loop"]["tokens"], expected)
    self.assertEqual(raw["chars"], sum(map(len, self.texts)))
    self.assertAlmostEqual(raw["tokens_per_s"],
                           expected / raw["encode_batch_median_s"])

  def test_pipeline_counts_are_the_loss_mask_of_its_batches(self):
    # The same pipeline read again: the timed batches are WARMUP + 1 ...
    path = bench_data.write_hub_copy(self.texts,
                                     os.path.join(self.tmp, "again"))
    cfg = bench_data.data_config(path, workers=0, read_threads=0,
                                 cache_dir=os.path.join(self.tmp, "cache"))
    train, _, prov = pipeline.lm_data(cfg, seq_len=SEQ_LEN,
                                      tokenizer=self.tok)
    self.assertEqual(prov["rows"], {"train": ROWS})
    it = iter(pipeline.batched_dataset(train, global_batch=BATCH, seed=0,
                                       process_index=0, process_count=1))
    batches = [next(it) for _ in range(WARMUP + BATCHES)][WARMUP:]
    loss = sum(int(b["loss_mask"].sum()) for b in batches)
    run = self.report["pipeline"][0]
    self.assertEqual(run["workers"], 0)
    self.assertEqual(run["loss_mask_tokens"], loss)
    self.assertEqual(run["non_pad_tokens"], loss)  # text rows: every target
    self.assertEqual(run["slot_tokens"], BATCHES * BATCH * SEQ_LEN)
    self.assertAlmostEqual(run["packing_efficiency"],
                           loss / (BATCHES * BATCH * SEQ_LEN))
    for r in self.report["pipeline"]:
      self.assertEqual(r["non_pad_tokens"], r["loss_mask_tokens"])
      self.assertGreater(r["non_pad_tokens"], 0)
      self.assertAlmostEqual(r["ratio_to_raw"], r["non_pad_tokens_per_s"] /
                             self.report["raw"]["tokens_per_s"])

  def test_a_document_gives_the_pipeline_its_raw_tokens_as_targets(self):
    # SmolLM2 adds no leading special token: n raw tokens + EOS -> n targets.
    text = self.texts[0]
    n = len(self.tok.hf.encode(text, add_special_tokens=False))
    ids = self.tok.encode(text, add_bos=True, add_eos=True)
    self.assertLen(ids, n + 1)
    rows = pipeline.lm_examples([ids], seq_len=SEQ_LEN, pad_id=0)
    self.assertEqual(int(sum(r["loss_mask"].sum() for r in rows)), n)

  def test_hosts_fed_against_a_hand_computation(self):
    # Meta-Llama-3-8B: vocab 128256, d 4096, 32 layers, 32 q / 8 kv heads of
    # 128, MLP 14336, untied embeddings.
    v, d, layers, f, kv = 128256, 4096, 32, 14336, 8 * 128
    per_layer = d * d * 2 + d * kv * 2 + 3 * d * f + 2 * d
    n = 2 * v * d + layers * per_layer + d
    self.assertEqual(n, 8_030_261_248)
    t = 8192
    flops = 6 * (n - v * d) + 12 * layers * t * 32 * 128
    host = 4 * 459e12 / flops
    step = self.report["step"]
    self.assertEqual(step["params"], n)
    self.assertAlmostEqual(step["flops_per_token"], flops, delta=1.0)
    self.assertAlmostEqual(step["host_tokens_per_s"], host)
    self.assertAlmostEqual(step["host_tokens_per_s_6n"], 4 * 459e12 / (6 * n))
    fed = self.report["hosts_fed"]
    best = max(r["non_pad_tokens_per_s"] for r in self.report["pipeline"])
    self.assertEqual(fed["pipeline_non_pad_tokens_per_s"], best)
    self.assertAlmostEqual(fed["hosts_fed"], best / host)
    self.assertAlmostEqual(fed["hosts_fed_6n"], best * 6 * n / (4 * 459e12))
    self.assertAlmostEqual(host, 31_702, delta=1.0)

  def test_bad_flags_are_one_clear_error(self):
    with self.assertRaisesRegex(ValueError, "--workers"):
      bench_data.main(["--workers=-1"])
    with self.assertRaisesRegex(ValueError, "--batch must be"):
      bench_data.main(["--batch=0"])

  def test_make_texts_is_deterministic_english(self):
    a = bench_data.make_texts(5, doc_sentences=3, seed=1)
    self.assertEqual(a, bench_data.make_texts(5, doc_sentences=3, seed=1))
    self.assertNotEqual(a, bench_data.make_texts(5, doc_sentences=3, seed=2))
    self.assertTrue(all(t and t.isascii() for t in a))
    self.assertGreater(np.mean([len(t.split()) for t in a]), 10)


if __name__ == "__main__":
  absltest.main()
