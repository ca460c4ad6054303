"""video_reason:paper,short and vudg:paper,short on their releases' layouts.

From a tiny random Qwen2.5-VL checkpoint as transformers saves it (its own
tokenizer, Qwen2-VL chat template and preprocessor_config.json:
`jaxlab.testing.vl_fixtures`), on files the test writes in each release's
layout:

* VideoReasonBench (github.com/llyx97/video_reason_bench): questions/
  <demo>.json, each a JSON object {id: row} with video ("videos/<demo>/
  state{N}_op{T}_{start|end}.mp4"), question, answer (null for
  prediction_operation), dim, visible_time, num_state, num_operation and
  the script (states, moves); the mp4 files under videos/.
* VUDG (huggingface.co/datasets/QLGalaxy/VUDG README.md: config default,
  train = train_multi.json, test = test_mul.json; rows as the repository's
  data/test_multi.json; videos under testset/<domain>/ as
  zero_shot/qwen2.5vl.py reads them).

Checks: `data.rows` counts the rows each run read (`short`: 8), the
responses are the checkpoint's own (re-generated here through
`vl_chat.VideoChat` on the first row), and the tables are what the metric
functions give on the run's responses.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
import numpy as np

from jaxlab.configs import video_reason as vr_config
from jaxlab.configs import vudg as vudg_config
from jaxlab.data import video_files
from jaxlab.data import video_reason_release as vr_release
from jaxlab.data import vudg as vudg_data
from jaxlab.evals import vl_chat
from jaxlab.evals import vudg as vudg_evals
from jaxlab.evals import video_reason_release as vr_score
from jaxlab.experiments import video_reason as vr_exp
from jaxlab.experiments import vudg as vudg_exp
from jaxlab.testing import hf_fixtures
from jaxlab.testing import vl_fixtures

SIZE = 56   # frames 56 x 56, 6 frames at 2 fps: 3 s
SMALL = dict(max_pixels=SIZE * SIZE, min_pixels=28 * 28)


def _frames(seed):
  rng = np.random.default_rng(seed)
  return (rng.random((6, SIZE, SIZE, 3)) * 255).astype(np.uint8)


def write_video_reason(root):
  """Two demos, 5 videos, 10 questions in the release's layout."""
  rows = {"cup": {}, "hrd": {}}
  dims = ("order_operation", "counting_operation", "order_state",
          "comparison_state", "prediction_state")
  for v, (demo, n, t, when) in enumerate([
      ("cup", 3, 5, "start"), ("cup", 3, 5, "end"), ("cup", 4, 11, "start"),
      ("hrd", 3, 6, "end"), ("hrd", 4, 12, "start")]):
    video = f"videos/{demo}/state{n}_op{t}_{when}.mp4"
    vl_fixtures.write_mp4(os.path.join(root, video), _frames(v), fps=2.0)
    for k in range(2):
      dim = dims[(v + k) % len(dims)]
      rows[demo][f"state{n}_op{t}_{dim}_{when}"] = {
          "video": video,
          "question": f"The video shows a puzzle. Question {v}.{k} about "
                      f"{dim}?\n\nProvide a summary of the final answer "
                      "after 'Final Answer:'",
          "answer": f"answer {v} {k}", "dim": dim, "visible_time": when,
          "num_state": n, "num_operation": t,
          "moves": [[[0, 0], [1, 1]]] * t,
          "states": [np.eye(n, dtype=int).tolist()] * (t + 1)}
  os.makedirs(os.path.join(root, "questions"))
  for demo, data in rows.items():
    with open(os.path.join(root, "questions", f"{demo}.json"), "w") as f:
      json.dump(data, f, indent=1)


CARD = """---
license: cc-by-nc-sa-4.0
configs:
  - config_name: default
    data_files:
      - split: train
        path: train_multi.json
      - split: test
        path: test_mul.json
      - split: test_open
        path: test_open.json
---
"""
DOMAINS = ("cartoon", "egocentric video", "night", "snowy")


def write_vudg(root):
  """12 test and 4 train MCQs over 4 domains, as released."""
  test, train = [], []
  for i in range(12):
    domain = DOMAINS[i % 4]
    video = f"clip{i % 6:02d}.mp4"
    path = os.path.join(root, "testset", domain, video)
    if not os.path.exists(path):
      vl_fixtures.write_mp4(path, _frames(100 + i % 6), fps=2.0)
    test.append({"QA_num": i, "video": video, "domain": domain,
                 "question": f"What happens {i}?\n(A) one\n(B) two\n"
                             "(C) three\n(D) four\n(E) five\n(F) six",
                 "answer": "ABCDEF"[i % 6], "question_type": 1 + i % 4})
  # The card lists the same features for every split (one schema for the
  # config); the train and open-ended rows here share test_multi.json's.
  for i in range(4):
    train.append(dict(test[i], video=f"train{i}.mp4"))
  with open(os.path.join(root, "test_mul.json"), "w") as f:
    json.dump(test, f, indent=2)
  with open(os.path.join(root, "train_multi.json"), "w") as f:
    json.dump(train, f, indent=2)
  with open(os.path.join(root, "test_open.json"), "w") as f:
    json.dump([dict(test[0], answer="Someone opens a door.")], f)
  with open(os.path.join(root, "README.md"), "w") as f:
    f.write(CARD)
  return test


class VideoReleaseTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.cleanup = hf_fixtures.inductor_cleanup()   # torch's scratch files
    cls.root = tempfile.mkdtemp()
    cls.ckpt = vl_fixtures.make_qwen2_5_vl_checkpoint(
        os.path.join(cls.root, "ckpt"))
    cls.vrb = os.path.join(cls.root, "video_reason_bench")
    write_video_reason(cls.vrb)
    cls.vudg = os.path.join(cls.root, "VUDG")
    cls.vudg_rows = write_vudg(cls.vudg)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    cls.cleanup()
    super().tearDownClass()

  def _vr_config(self, **release):
    cfg = vr_config.get_config("paper,short")
    cfg.init_from, cfg.data.path = self.ckpt, self.vrb
    cfg.model.dtype = "float32"
    cfg.release.update(nframes=4, max_new_tokens=4, **SMALL, **release)
    return cfg

  def test_video_reason_paper_short(self):
    cfg = self._vr_config()
    work = os.path.join(self.root, "vr")
    out = vr_exp.run(cfg, work)
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    rows = vr_release.load_questions(self.vrb, max_rows=8)
    self.assertLen(rows, 8)
    self.assertEqual(res["data"]["rows"], {"test": 8})
    self.assertEqual(res["data"]["source"], "hf")
    self.assertEqual(res["data"]["videos"], len({r["video"] for r in rows}))
    self.assertEqual(res["init_from"]["path"], os.path.abspath(self.ckpt))
    run = res["extra"]["release"]["greedy"]
    self.assertEqual(run["ids"], [r["id"] for r in rows])
    # The checkpoint's own reply to the first row, through the library.
    chat = vl_chat.VideoChat.load(self.ckpt, dtype="float32")
    frames, fps = video_files.read_video(
        vr_release.video_file(self.vrb, rows[0]))
    text, n = chat.answer(frames, fps, rows[0]["question"], nframes=4,
                          max_new_tokens=4, **SMALL)
    self.assertEqual(run["responses"][0], text)
    self.assertEqual(run["tokens"][0], n)
    self.assertTrue(1 <= n <= 4)
    rep = vr_score.score_release(rows, run["responses"])
    self.assertEqual(run["accuracy"], rep.accuracy)
    self.assertEqual(run["per_dim"], rep.per_dim)
    self.assertIn("table_markdown", out)

  def test_video_reason_thinking_budget_sweep(self):
    cfg = self._vr_config(budgets=(0, 2), answer_tokens=3)
    cfg.data.max_rows = 2
    work = os.path.join(self.root, "vr_budget")
    vr_exp.run(cfg, work)
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    self.assertEqual(res["data"]["rows"], {"test": 2})
    sweep = res["extra"]["release"]
    self.assertEqual(set(sweep), {"budget 0", "budget 2"})
    for text, used in zip(sweep["budget 0"]["responses"],
                          sweep["budget 0"]["tokens"]):
      # No thinking: "Final Answer:" forced at once, then <= 3 tokens.
      self.assertTrue(text.startswith("\nFinal Answer:"))
      self.assertLessEqual(used, 3)
    for used in sweep["budget 2"]["tokens"]:
      self.assertLessEqual(used, 2 + 3)

  def test_llm_judge_needs_its_checkpoint(self):
    cfg = self._vr_config(judge="llm")
    with self.assertRaisesRegex(ValueError, "release.judge_from"):
      vr_exp.run(cfg, os.path.join(self.root, "vr_llm"))

  def test_vudg_paper_short(self):
    cfg = vudg_config.get_config("paper,short")
    cfg.init_from, cfg.data.path = self.ckpt, self.vudg
    cfg.data.cache_dir = os.path.join(self.root, "hf_cache")
    cfg.model.dtype = "float32"
    cfg.release.update(**SMALL)
    work = os.path.join(self.root, "vudg")
    vudg_exp.run(cfg, work)
    with open(os.path.join(work, "results.json")) as f:
      res = json.load(f)
    self.assertEqual(res["data"]["rows"], {"test": 8})
    self.assertEqual(res["data"]["videos"], len(
        {(r["domain"], r["video"]) for r in self.vudg_rows[:8]}))
    rel = res["extra"]["release"]
    self.assertEqual(rel["qa_num"], list(range(8)))
    chat = vl_chat.VideoChat.load(self.ckpt, dtype="float32")
    q = vudg_data.from_rows(self.vudg_rows[:1])[0]
    frames, fps = video_files.read_video(
        vudg_data.video_path(self.vudg, "test", q))
    text, _ = chat.answer(frames, fps, q.question + vudg_exp.PROMPT_SUFFIX,
                          fps=1.0, max_new_tokens=16, **SMALL)
    self.assertEqual(rel["replies"][0], text.strip().upper())
    score = vudg_evals.score(vudg_data.from_rows(self.vudg_rows[:8]),
                             rel["replies"], strict=True)
    self.assertEqual(rel["d_avg"], score.d_avg)
    self.assertEqual(set(rel["by_domain"]),
                     {"cartoon", "egocentric", "night", "snowy"})
    (table,) = [t for t in res["tables"] if t["id"] == "release"]
    self.assertIn("D-Avg", json.dumps(table))

  def test_reply_is_the_checkpoints_greedy_generation(self):
    """VideoChat's prompt (chat template, placeholders expanded to the
    video's tokens) and pixels, generated by transformers' own model:
    the same tokens as jaxlab's sampler gives."""
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    chat = vl_chat.VideoChat.load(self.ckpt, dtype="float32")
    frames, fps = video_files.read_video(
        os.path.join(self.vrb, "videos/cup/state3_op5_start.mp4"))
    np.testing.assert_array_equal(frames, _frames(0))   # lossless mp4
    question = "How many cups moved?"
    mm = chat.video_inputs(frames, fps, nframes=4, **SMALL)
    vid = chat.tokenizer.token_id(vl_chat.VIDEO_PAD)
    ids = chat.processor.expand_placeholders(
        chat.prompt_ids(question), video_grid_thw=mm["video_grid_thw"],
        image_token_id=-1, video_token_id=vid)
    self.assertEqual(ids.count(vid), int(np.prod(mm["video_grid_thw"])) // 4)
    ref = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(
        self.ckpt, attn_implementation="eager").eval()
    x = torch.tensor([ids])
    with torch.no_grad():
      want = ref.generate(
          input_ids=x, attention_mask=torch.ones_like(x),
          mm_token_type_ids=(x == vid).long() * 2,
          pixel_values_videos=torch.tensor(mm["pixel_values_videos"]),
          video_grid_thw=torch.tensor(mm["video_grid_thw"]),
          second_per_grid_ts=torch.tensor(mm["second_per_grid_ts"]),
          max_new_tokens=6, do_sample=False,
          eos_token_id=list(chat.tokenizer.eos_ids), pad_token_id=0)
    want = want[0, len(ids):].tolist()
    text, n = chat.answer(frames, fps, question, nframes=4, max_new_tokens=6,
                          **SMALL)
    self.assertEqual(n, len(want))
    self.assertEqual(text, chat.tokenizer.decode(want,
                                                 skip_special_tokens=True))

  def test_frame_choice_is_qwen_vl_utils(self):
    # 3 s at 2 fps, fps 1: 3 frames -> at least 4 -> floored to 4, of 6.
    idx, fps = video_files.qwen_vl_frame_indices(6, 2.0, fps=1.0)
    self.assertEqual(idx.tolist(), [0, 2, 3, 5])   # round(linspace(0, 5, 4))
    self.assertAlmostEqual(fps, 4 / 6 * 2.0)
    idx, _ = video_files.qwen_vl_frame_indices(100, 25.0, nframes=33)
    self.assertLen(idx, 32)   # round(33 / 2) * 2, Python's round (16.5 -> 16)
    self.assertEqual(video_files.qwen_vl_video_size(
        32, 480, 640, max_pixels=448 * 448), (364, 504))
    with self.assertRaisesRegex(ValueError, "not both"):
      video_files.qwen_vl_frame_indices(6, 2.0, fps=1.0, nframes=4)


if __name__ == "__main__":
  absltest.main()
