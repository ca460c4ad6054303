"""The lazy row pipeline (`data.source` hf / grain / tfds): row formats by
hand, the same rows give the same packed batches from every source kind,
packing keeps every document whole, two processes read every row once,
a restored iterator continues at the next batch, worker processes give the
same batches, tfds through `tfds.testing.mock_data`, and `lm_tiny` trains on
a Hub-layout copy with `data.rows` in results.json."""

import json
import os
import shutil
import sys
import tempfile

from absl.testing import absltest
import datasets
import jax
import numpy as np

from jaxlab.data import pipeline
from jaxlab.data import row_formats
from jaxlab.data import tokenizers
from jaxlab.train import defaults

sys.path.insert(0, os.path.dirname(__file__))
import hf_source_test  # pylint: disable=g-import-not-at-top,wrong-import-position

datasets.disable_progress_bars()
TOK = tokenizers.ByteTokenizer()
TEXTS = [("doc %d " % i) + "abcdefghij"[: 1 + i % 10] * (1 + i % 4)
         for i in range(40)]


def data_cfg(**kw):
  c = defaults.base_config().data
  c.update(kw)
  return c


def docs_of(batches):
  """The documents (token lists incl. the first token) in packed batches."""
  out = []
  for b in batches:
    for r in range(b["inputs"].shape[0]):
      seg = b["segment_ids"][r]
      for s in sorted(set(seg.tolist()) - {0}):
        idx = np.nonzero(seg == s)[0]
        np.testing.assert_array_equal(b["positions"][r][idx],
                                      np.arange(len(idx)))
        out.append(b["inputs"][r][idx].tolist() + [int(b["targets"][r][idx[-1]])])
  return out


class RowFormatTest(absltest.TestCase):

  def test_pairs_by_hand(self):
    fmt = row_formats.RowFormat()
    row = {"question": "ab", "answer": "c"}
    kind = fmt.resolve(row)
    self.assertEqual(kind, "question_answer")
    ids, mask = row_formats.encode_row(row, TOK, fmt, kind)
    p = TOK.encode("ab", add_bos=True)
    c = TOK.encode("c", add_eos=True)
    self.assertEqual(ids, p + c)          # [bos a b] + [c eos]
    self.assertEqual(mask, [0, 0, 0, 1, 1])
    all_fmt = row_formats.RowFormat(completion_only=False)
    self.assertEqual(row_formats.encode_row(row, TOK, all_fmt, kind)[1],
                     [1] * 5)

  def test_auto_order_custom_columns_and_errors(self):
    fmt = row_formats.RowFormat()
    self.assertEqual(fmt.resolve(["prompt", "completion", "text"]),
                     "prompt_completion")
    self.assertEqual(fmt.resolve(["text", "id"]), "text")
    self.assertEqual(
        row_formats.RowFormat(question_key="problem",
                              answer_key="solution").resolve(
                                  ["problem", "solution"]), "question_answer")
    with self.assertRaisesRegex(ValueError, "match no data.format"):
      fmt.resolve(["body"])
    with self.assertRaisesRegex(ValueError, r"reads column\(s\) \['text'\]"):
      row_formats.RowFormat(kind="text").resolve(["body"])
    with self.assertRaisesRegex(ValueError, "data.format='qa'"):
      row_formats.RowFormat.from_config(data_cfg(format="qa"))
    with self.assertRaisesRegex(ValueError, "chat template"):
      row_formats.encode_row({"messages": [{"role": "user", "content": "x"}]},
                             TOK, fmt, "messages")


class LazyPipelineTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root)
    self.ds = datasets.Dataset.from_dict({"text": TEXTS})

  def _sources(self):
    """The same 40 rows as hf parquet, hf json, grain ArrayRecord and grain
    parquet."""
    out = {}
    for kind in ("parquet", "json"):
      d = os.path.join(self.root, kind, "data")
      os.makedirs(d)
      getattr(self.ds, f"to_{kind}")(f"{d}/train-00000-of-00001.{kind}")
      out[f"hf_{kind}"] = data_cfg(source="hf", path=os.path.dirname(d))
    hf_source_test.write_array_record(
        f"{self.root}/rows-00000-of-00002.array_record",
        [{"text": t} for t in TEXTS[:25]])
    hf_source_test.write_array_record(
        f"{self.root}/rows-00001-of-00002.array_record",
        [t.encode() for t in TEXTS[25:]])
    out["grain_array_record"] = data_cfg(
        source="grain", path=f"{self.root}/rows-*.array_record")
    out["grain_parquet"] = data_cfg(
        source="grain", path=f"{self.root}/parquet/data/*.parquet")
    for c in out.values():
      c.update(eval_fraction=0.1, cache_dir=f"{self.root}/cache")
    return out

  def _batches(self, cfg, n=None, *, pi=0, pc=1, seq_len=24, batch=4,
               shuffle=True, repeat=True):
    train, _, prov = pipeline.lm_data(cfg, seq_len=seq_len, tokenizer=TOK)
    ds = train.packed_batches(local_batch=batch, seed=3, shuffle=shuffle,
                              repeat=repeat, process_index=pi,
                              process_count=pc)
    it = iter(ds)
    got = list(it) if n is None else [next(it) for _ in range(n)]
    return got, prov

  def test_same_rows_same_packed_batches_from_every_source(self):
    runs = {k: self._batches(c, 6) for k, c in self._sources().items()}
    ref, prov = runs.pop("hf_parquet")
    self.assertEqual(prov["rows"], {"train": 36, "train[held-out]": 4})
    self.assertEqual(ref[0]["inputs"].shape, (4, 24))
    for k, (got, p) in runs.items():
      self.assertEqual(p["rows"], prov["rows"], k)
      for a, b in zip(ref, got):
        for key in a:
          np.testing.assert_array_equal(a[key], b[key], err_msg=k)

  def test_one_epoch_packs_every_document_whole_and_once(self):
    cfg = self._sources()["hf_parquet"]
    got, _ = self._batches(cfg, repeat=False, seq_len=64, batch=3)
    self.assertEqual(got[-1]["inputs"].shape, (3, 64))  # the last one filled
    want = [TOK.encode(t, add_bos=True, add_eos=True) for t in TEXTS[:36]]
    self.assertCountEqual(docs_of(got), want)
    for b in got:  # first-fit: a row holds several documents, padding masked
      self.assertTrue(np.all((b["segment_ids"] == 0) == (b["loss_mask"] == 0)))
    self.assertGreater(max(int(b["segment_ids"].max()) for b in got), 2)

  def test_two_processes_read_every_row_exactly_once(self):
    cfg = self._sources()["grain_array_record"]
    p0, _ = self._batches(cfg, pi=0, pc=2, repeat=False, seq_len=64, batch=1)
    p1, _ = self._batches(cfg, pi=1, pc=2, repeat=False, seq_len=64, batch=1)
    d0, d1 = docs_of(p0), docs_of(p1)
    want = [TOK.encode(t, add_bos=True, add_eos=True) for t in TEXTS[:36]]
    self.assertCountEqual(d0 + d1, want)
    self.assertLen(d0, 18)
    self.assertFalse({tuple(d) for d in d0} & {tuple(d) for d in d1})

  def test_restored_iterator_continues_at_the_next_batch(self):
    cfg = self._sources()["hf_json"]
    train, _, _ = pipeline.lm_data(cfg, seq_len=24, tokenizer=TOK)
    make = lambda: iter(pipeline.batched_dataset(train, global_batch=4,
                                                 seed=5))
    it = make()
    for _ in range(13):  # past the first epoch (36 rows, ~5 batches)
      next(it)
    state = it.get_state()
    want = [next(it) for _ in range(3)]
    again = make()
    again.set_state(json.loads(json.dumps(state)))  # what the checkpoint keeps
    for a in want:
      b = next(again)
      for key in a:
        np.testing.assert_array_equal(a[key], b[key])

  def test_worker_processes_read_every_row_once_deterministically(self):
    # Each of grain's worker processes packs its own share of the rows, so
    # the batches differ from workers=0; an epoch still holds every row
    # once, and a rerun gives the same batches.
    cfg = self._sources()["hf_parquet"]
    cfg.workers = 2
    got, _ = self._batches(cfg, repeat=False, seq_len=64, batch=1)
    want = [TOK.encode(t, add_bos=True, add_eos=True) for t in TEXTS[:36]]
    self.assertCountEqual(docs_of(got), want)
    again, _ = self._batches(cfg, repeat=False, seq_len=64, batch=1)
    self.assertEqual(docs_of(got), docs_of(again))

  def test_pad_mode_is_the_same_global_batch_for_any_process_count(self):
    cfg = self._sources()["hf_parquet"]
    cfg.packing = "pad"
    train, _, _ = pipeline.lm_data(cfg, seq_len=16, tokenizer=TOK)
    one = next(iter(pipeline.batched_dataset(train, global_batch=4, seed=1,
                                             process_index=0,
                                             process_count=1)))
    halves = [next(iter(pipeline.batched_dataset(
        train, global_batch=4, seed=1, process_index=p, process_count=2)))
              for p in range(2)]
    np.testing.assert_array_equal(one["inputs"][0::2], halves[0]["inputs"])
    np.testing.assert_array_equal(one["inputs"][1::2], halves[1]["inputs"])
    ids = TOK.encode(TEXTS[0], add_bos=True, add_eos=True)
    row = train.padded()[0]
    np.testing.assert_array_equal(row["inputs"][:len(ids) - 1], ids[:-1])
    np.testing.assert_array_equal(row["targets"][:len(ids) - 1], ids[1:])
    self.assertEqual(row["loss_mask"].sum(), len(ids) - 1)
    long_row = train.padded()[9]  # 3 + 10 * 4 bytes: cut at seq_len
    self.assertEqual(long_row["loss_mask"].sum(), 16)

  def test_question_answer_rows_mask_the_question(self):
    d = os.path.join(self.root, "qa")
    os.makedirs(d)
    datasets.Dataset.from_dict(hf_source_test.QA).to_parquet(
        f"{d}/train.parquet")
    cfg = data_cfg(source="hf", path=d, eval_fraction=0.0,
                   cache_dir=f"{self.root}/cache")
    got, _ = self._batches(cfg, repeat=False, shuffle=False, seq_len=64,
                           batch=1)
    b = got[0]
    first = b["segment_ids"][0] == 1
    n_answer = len(TOK.encode("1", add_eos=True))
    self.assertEqual(b["loss_mask"][0][first].sum(), n_answer)

  def test_tfds_mock_data_packs(self):
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    cfg = data_cfg(source="tfds", tfds_name="imdb_reviews", data_dir=self.root,
                   split="train", eval_split="test", max_rows=9)
    with tfds.testing.mock_data(num_examples=12,
                                policy=tfds.testing.MockPolicy.USE_CODE):
      got, prov = self._batches(cfg, repeat=False, shuffle=False, seq_len=512,
                                batch=1)
      self.assertEqual(prov["rows"], {"train": 9, "test": 9})
      src = tfds.data_source("imdb_reviews", split="train", download=False)
      want = [TOK.encode(src[i]["text"], add_bos=True, add_eos=True)[:513]
              for i in range(9)]
    self.assertCountEqual(docs_of(got), want)


class TrainerResumeTest(absltest.TestCase):

  def test_resumed_run_continues_the_packed_stream(self):
    """3 steps, stop, resume to 6 == 6 steps straight: the packed iterator's
    state (epoch, position, packing buffers) is in the checkpoint."""
    from flax import nnx  # pylint: disable=g-import-not-at-top
    from jaxlab.configs import common  # pylint: disable=g-import-not-at-top
    from jaxlab.train import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
    from jaxlab.train import trainer  # pylint: disable=g-import-not-at-top
    root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, root)
    d = os.path.join(root, "ds", "data")
    os.makedirs(d)
    datasets.Dataset.from_dict({"text": TEXTS}).to_parquet(
        f"{d}/train-00000-of-00001.parquet")

    def config(steps):
      c = common.base_config()
      c.model.update(vocab_size=0, dim=32, num_layers=1, num_heads=2,
                     num_kv_heads=2, mlp_dim=64)
      c.data.update(source="hf", path=os.path.dirname(d), eval_fraction=0.0,
                    cache_dir=os.path.join(root, "cache"))
      c.train.update(steps=steps, batch_size=8, seq_len=32, log_every=1,
                     eval_every=0, checkpoint_every=0, async_checkpoint=False,
                     tensorboard=False, peak_flops=-1)
      c.optim.update(lr=1e-2, warmup_steps=0, schedule="constant")
      return c

    def params(out):
      ts = out["train_state"]
      return nnx.state(nnx.merge(ts.graphdef, ts.state)[0], nnx.Param)

    straight = trainer.train(config(6), os.path.join(root, "a"))
    trainer.train(config(3), os.path.join(root, "b"))
    resumed = trainer.train(config(6), os.path.join(root, "b"))
    self.assertEqual(resumed["data"]["rows"], {"train": 40})
    la = [r["loss"] for r in metrics_lib.read_metrics(os.path.join(root, "a"))]
    lb = [r["loss"] for r in metrics_lib.read_metrics(os.path.join(root, "b"))]
    # Same program, same batches: equal up to float32 reassociation across
    # two compilations (a few ulps of a loss ~5).
    np.testing.assert_allclose(lb, la, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(params(straight)),
                    jax.tree.leaves(params(resumed))):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4,
                                 atol=1e-6)


class LmTinyHfTest(absltest.TestCase):

  def test_lm_tiny_trains_on_a_hub_layout_copy(self):
    """lm_tiny (its tiny preset) with `data.source=hf` on a Hub-layout copy:
    the train and validation splits by name, their row counts and digest in
    results.json. In this process through `run_experiment` (what
    `python -m jaxlab.main --config=lm_tiny:tiny --config.data.*=...` runs
    after parsing its flags; the process boundary is
    tests/experiments/main_test.py's)."""
    from jaxlab import experiments  # pylint: disable=g-import-not-at-top
    from jaxlab.configs import lm_tiny  # pylint: disable=g-import-not-at-top
    root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, root)
    d = os.path.join(root, "ds", "data")
    os.makedirs(d)
    datasets.Dataset.from_dict({"text": TEXTS[:30]}).to_parquet(
        f"{d}/train-00000-of-00001.parquet")
    datasets.Dataset.from_dict({"text": TEXTS[30:]}).to_parquet(
        f"{d}/validation-00000-of-00001.parquet")
    work = os.path.join(root, "work")
    cfg = lm_tiny.get_config("tiny")
    cfg.data.update(source="hf", path=os.path.dirname(d), split="train",
                    eval_split="validation",
                    cache_dir=os.path.join(root, "cache"))
    cfg.train.update(steps=3, batch_size=8, tensorboard=False,
                     peak_flops=1e12)
    experiments.run_experiment(cfg, work)
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    self.assertEqual(res["data"]["rows"], {"train": 30, "validation": 10})
    self.assertEqual(res["data"]["source"], "hf")
    self.assertLen(res["data"]["digest"], 64)
    self.assertEqual(res["step"], 3)
    self.assertTrue(np.isfinite(res["eval/loss"]))

if __name__ == "__main__":
  absltest.main()
