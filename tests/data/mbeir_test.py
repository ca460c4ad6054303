"""M-BEIR's per-task query instructions, picked as UniIR picks them.

The instruction table is written in the released layout and the reference
is UniIR's code ported (`jaxlab.testing.mbeir_reference`).
"""

import json
import os
import shutil
import tempfile

import numpy as np
from absl.testing import absltest

from jaxlab.data import mbeir
from jaxlab.data import retrieval_jsonl
from jaxlab.testing import mbeir_reference as ref_lib
from jaxlab.testing.mbeir_reference import TABLE, write_table




def _write_jsonl(path, rows):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    for r in rows:
      f.write(json.dumps(r) + "\n")


def write_dataset(root):
  """WebQA text->text (2:...), MSCOCO text->image and image->text (9:...);
  the test split's query rows in released file order."""
  pool = ([{"did": f"2:{i}", "txt": f"passage {i}", "img_path": None,
            "modality": "text"} for i in range(6)]
          + [{"did": f"9:{i}", "txt": None, "img_path": f"im/{i}.jpg",
              "modality": "image"} for i in range(3)]
          + [{"did": f"9:{i}", "txt": f"a caption {i}", "img_path": None,
              "modality": "text"} for i in range(3, 6)])
  _write_jsonl(os.path.join(root, "cand_pool", "local",
                            "mbeir_webqa_task1_cand_pool.jsonl"), pool[:6])
  _write_jsonl(os.path.join(root, "cand_pool", "local",
                            "mbeir_mscoco_task0_cand_pool.jsonl"), pool[6:])
  webqa = [{"qid": f"2:{i}", "query_txt": f"what is thing {i}",
            "query_img_path": None, "query_modality": "text",
            "pos_cand_list": [f"2:{i}", f"2:{i + 1}"],
            "neg_cand_list": [f"2:{(i + 3) % 6}"], "task_id": 1}
           for i in range(5)]
  coco = ([{"qid": f"9:t{i}", "query_txt": f"a dog number {i}",
            "query_img_path": None, "query_modality": "text",
            "pos_cand_list": [f"9:{i}"], "neg_cand_list": [],
            "task_id": 0} for i in range(3)]
          + [{"qid": f"9:i{i}", "query_txt": None,
              "query_img_path": f"im/{i}.jpg", "query_modality": "image",
              "pos_cand_list": [f"9:{i + 3}"], "neg_cand_list": [],
              "task_id": 3} for i in range(3)])
  _write_jsonl(os.path.join(root, "query", "test",
                            "mbeir_webqa_task1_test.jsonl"), webqa)
  _write_jsonl(os.path.join(root, "query", "test",
                            "mbeir_mscoco_task0_test.jsonl"), coco)
  return {r["did"]: r for r in pool}, coco + webqa   # sorted file order


class MbeirInstructionsTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
    self.pool, self.rows = write_dataset(self.root)
    self.tsv = os.path.join(self.root, mbeir.INSTRUCTIONS_FILE)
    write_table(self.tsv)

  def test_format_string_matches_uniir(self):
    for s in ["find it", "Find it.", "why?", '"q"', " a\r b ", "", None,
              "wow!"]:
      self.assertEqual(mbeir.format_string(s),
                       ref_lib.uniir_format_string(s))

  def test_table_read_as_uniir(self):
    self.assertEqual(mbeir.read_instructions(self.tsv),
                     ref_lib.uniir_load_query_instructions(self.tsv))
    self.assertEqual(mbeir.read_instructions(self.tsv)["9, text, image"],
                     ["show an image for the caption", "Pick the photo."])

  def test_eval_pick_equals_uniir(self):
    for seed in (0, 2023):
      table = ref_lib.uniir_load_query_instructions(self.tsv)
      ref = ref_lib.uniir_query_txts(self.rows, self.pool, table, seed)
      groups, n = mbeir.read_split(self.root, "test", instructions="uniir",
                                   seed=seed)
      self.assertEqual(n, len(self.rows))
      # Text queries with a text positive: WebQA's five (MSCOCO's text
      # queries have image positives, its image queries are images).
      self.assertEqual([g["qid"] for g in groups],
                       [f"2:{i}" for i in range(5)])
      for g in groups:
        self.assertEqual(g["instruction"], ref[g["qid"]][0])
        # UniIR's query_txt: format_string(f"{prompt} {query_txt}").
        self.assertEqual(
            mbeir.format_string(f"{g['instruction']} {g['query']['text']}"),
            ref[g["qid"]][1])
        self.assertEqual(g["prompts"], [
            "Find the passage answering this.",
            "Which snippet answers the question?", "Quoted prompt.",
            "Retrieve a wiki paragraph!"])
      # Several prompts drawn (not always the first).
      self.assertGreater(len({g["instruction"] for g in groups}), 1)

  def test_image_rows_pick_by_candidate_modality(self):
    table = ref_lib.uniir_load_query_instructions(self.tsv)
    ref = ref_lib.uniir_query_txts(self.rows, self.pool, table, 7)
    im = os.path.join(self.root, "im")
    os.makedirs(im)
    for i in range(3):
      open(os.path.join(im, f"{i}.jpg"), "wb").close()
    groups, _ = mbeir.read_split(self.root, "test", instructions="uniir",
                                 seed=7, images=True)
    by_qid = {g["qid"]: g for g in groups}
    self.assertLen(by_qid, len(self.rows))
    for qid, (prompt, _) in ref.items():
      self.assertEqual(by_qid[qid]["instruction"], prompt)
    self.assertIn(by_qid["9:t0"]["instruction"],
                  ["Show an image for the caption.", "Pick the photo."])
    self.assertIn(by_qid["9:i0"]["instruction"],
                  ["Caption this image.", "Describe it.",
                   "Which caption fits?", "A caption for the scene."])

  def test_modes(self):
    auto, _ = mbeir.read_split(self.root, "test", seed=0)
    uniir, _ = mbeir.read_split(self.root, "test", seed=0,
                                instructions="uniir")
    self.assertEqual([g["instruction"] for g in auto],
                     [g["instruction"] for g in uniir])
    default, _ = mbeir.read_split(self.root, "test", instructions="default")
    self.assertEqual({g["instruction"] for g in default},
                     {retrieval_jsonl.DEFAULT_INSTRUCTION})
    self.assertNotIn("prompts", default[0])
    none, _ = mbeir.read_split(self.root, "test", instructions="none")
    self.assertEqual({g["instruction"] for g in none}, {""})
    # Another table path (relative to the root).
    other = os.path.join(self.root, "my", "table.tsv")
    write_table(other, [TABLE[0], ("text", "text", "WebQA", "2", "only")]
                + TABLE[2:])
    os.remove(self.tsv)
    self.assertEqual(mbeir.instruction_mode(self.root, "auto"), "default")
    got, _ = mbeir.read_split(self.root, "test", instructions="uniir",
                              instructions_file="my/table.tsv")
    self.assertEqual({g["instruction"] for g in got}, {"Only."})
    with self.assertRaisesRegex(ValueError, "no M-BEIR instruction table"):
      mbeir.read_split(self.root, "test", instructions="uniir")
    with self.assertRaisesRegex(ValueError, "mbeir.instructions='first'"):
      mbeir.read_split(self.root, "test", instructions="first")

  def test_missing_key_is_a_clear_error(self):
    write_table(self.tsv, TABLE[:2])
    with self.assertRaisesRegex(ValueError, "no instruction for '9, text, "
                                "image'"):
      mbeir.read_split(self.root, "test", instructions="uniir")

  def test_train_groups_redraw_from_the_rows_prompts(self):
    groups, _ = mbeir.read_split(self.root, "test", instructions="uniir")
    out = mbeir.train_groups(groups, 2, 40, seed=0)
    prompts = set(groups[0]["prompts"])
    seen = {g["instruction"] for g in out}
    self.assertTrue(seen <= prompts)
    self.assertGreater(len(seen), 2)
    np.testing.assert_equal(len(out), 40)


if __name__ == "__main__":
  absltest.main()
