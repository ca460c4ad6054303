"""Video-LM training and evaluation inputs of the VideoReasonBench miniature.

    videos = task_videos(config.task, seed=10_000, per_cell=100)
    data = encode_examples(config, tok, videos, np.random.default_rng(0))
    frames, prompts = eval_inputs(tok, videos, num_frames=5)

Each question becomes `demo: question` after BOS; a fraction
`task.think_fraction` of the training rows carry a " Think:" transcript
(the revealed state and the operations) before " Final Answer: <answer>".
Frames are scaled to [0, 1] and zero-padded to `model.video.num_frames`.
"""

from __future__ import annotations

import numpy as np

from jaxlab.data.synthetic import video_reason as vr
from jaxlab.models import registry as model_registry

THINK = " Think:"
FINAL = " Final Answer:"


def demos(text: str) -> list[str]:
  """"cup, chip" -> ["cup", "chip"]."""
  return [d.strip() for d in text.split(",") if d.strip()]


def sizes(text: str) -> dict[str, list[int]]:
  """"cup:3, cup:4" -> {"cup": [3, 4]}."""
  out = {}
  for part in demos(text):
    demo, size = part.split(":")
    out.setdefault(demo.strip(), []).append(int(size))
  return out


def think_text(video: vr.Video) -> str:
  """The transcript after " Think:": the revealed state and the ops."""
  eng = video.engine
  shown = eng.format_state(eng.view(video.visible_state()))
  ops = "; ".join(eng.op_text(o) for o in video.ops)
  return f" shown at {video.reveal}: {shown} | ops: {ops}"


def prompt_text(rec: dict) -> str:
  return f"{rec['demo']}: {rec['question']}"


def clip(video: vr.Video, num_frames: int) -> np.ndarray:
  """Frames in [0, 1], zero-padded to `num_frames`."""
  f = video.frames.astype(np.float32) / 255.0
  if len(f) > num_frames:
    raise ValueError(f"a video has {len(f)} frames > model.video.num_frames="
                     f"{num_frames}: raise it to task.num_ops_max + 2")
  pad = np.zeros((num_frames - len(f),) + f.shape[1:], np.float32)
  return np.concatenate([f, pad])


def task_videos(t, seed: int, per_cell: int) -> list[vr.Video]:
  """The model's task videos of a `config.task` section `t`."""
  return vr.generate(demos(t.demos), sizes=sizes(t.sizes),
                     num_ops=range(t.num_ops_min, t.num_ops_max + 1),
                     videos_per_cell=per_cell, seed=seed,
                     frame_size=t.frame_size, progress=False)


def encode_examples(cfg, tok, videos, rng) -> dict[str, np.ndarray]:
  """Teacher-forcing rows: prompt [+ Think: transcript] + Final Answer.

  The loss covers everything after the prompt; a fraction
  `task.think_fraction` of the rows carry the transcript.
  """
  t = cfg.task
  length = t.seq_len
  nf = model_registry.num_frames(cfg.model)
  rows = {"inputs": [], "targets": [], "loss_mask": [], "attention_mask": [],
          "frames": []}
  for v in videos:
    frames = clip(v, nf)
    for rec in v.questions:
      prompt = [tok.bos_id] + tok.encode(prompt_text(rec))
      think = rng.random() < t.think_fraction
      body = (THINK + think_text(v) if think else "") + FINAL + " " + \
          rec["answer"]
      ids = prompt + tok.encode(body) + [tok.eos_id]
      if len(ids) > length + 1:
        raise ValueError(f"an example has {len(ids)} tokens > task.seq_len="
                         f"{length} + 1: raise task.seq_len")
      n = len(ids) - 1
      pad = length - n
      rows["inputs"].append(ids[:-1] + [tok.pad_id] * pad)
      rows["targets"].append(ids[1:] + [tok.pad_id] * pad)
      mask = [0.0] * (len(prompt) - 1) + [1.0] * (n - len(prompt) + 1)
      rows["loss_mask"].append(mask + [0.0] * pad)
      rows["attention_mask"].append([1] * n + [0] * pad)
      rows["frames"].append(frames)
  return {k: np.asarray(v, np.float32 if k in ("loss_mask", "frames")
                        else np.int32) for k, v in rows.items()}


def eval_inputs(tok, videos, num_frames: int
                ) -> tuple[np.ndarray, list[list[int]]]:
  """One clip and one prompt (BOS + `demo: question`) per question."""
  frames, prompts = [], []
  for v in videos:
    c = clip(v, num_frames)
    for rec in v.questions:
      frames.append(c)
      prompts.append([tok.bos_id] + tok.encode(prompt_text(rec)))
  return np.stack(frames), prompts
