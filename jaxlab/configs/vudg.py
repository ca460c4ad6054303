r"""VUDG domain-generalisation miniature (paper S, papers/O-S.md S.4-S.6).

    python -m jaxlab.main --config=jaxlab/configs/vudg.py --workdir=/tmp/vudg
    python -m jaxlab.main --config=jaxlab/configs/vudg.py:tiny --workdir=/tmp/v

The shared video model (`config.model.name = "video"`: per-frame ViT +
temporal transformer + decoder, frames as an `inputs_embeds` prefix) is
trained on mini-VUDG clips (`jaxlab.data.synthetic.video_domains`: 16x16
frames, 11 domain transforms) by the generic trainer's step (`video_lm`
loss) and answers the multiple-choice questions by greedy decoding through
the library sampler; `jaxlab.evals.vudg` scores the replies. Protocols:
full-domain (upper bound), multi-source leave-one-domain-out for the
held-out domains `lodo_domains`, single-source for the sources
`single_source_domains` (a CPU sample of the N runs of each protocol),
zero-shot (the untrained model), and the bias probes on the full-domain
model. Every training run takes the same number of steps.

`answer_format` [inferred]: "text" (the model writes the option's text,
which the harness maps to its letter; default, since a 2-layer model learns
perception far faster than pointing at a letter) or "letter" (the paper's
"Answer with only the letter").

Presets: default = the docs miniature (2 seeds, sized for a shared
2-core machine; `seed=N` runs one of them),
`tiny` = a CPU check of a few minutes, `smoke` = the colab test (seconds);
`vl` = the video model on the Qwen2.5-VL architecture
(`jaxlab.models.qwen2_vl_prefix` via `common.qwen_vl_prefix_model`: the
same decoder fields, a 2-block vision tower over frame pairs, M-RoPE)
instead of ViT + temporal blocks (`vl,smoke` in the tests).

`paper`: Qwen2.5-VL-7B-Instruct from `init_from`
(`Qwen/Qwen2.5-VL-7B-Instruct`) zero-shot on VUDG as released
(`data.path=QLGalaxy/VUDG` or a local copy laid out as on the Hub, no
subset (`default`); `train` = train_multi.json, `test` = the
multiple-choice test set; the videos under `release.video_root`, default
`data.path`, in testset/<domain>/), as zero_shot/qwen2.5vl.py runs it
(`release`), scored as utils/collect_results.py
(`jaxlab.experiments.vudg.run_release`). `short`: the same run with its
budget cut (`jaxlab.configs._scale.short`).
"""

import ml_collections

from jaxlab.configs import common
from jaxlab.configs import _scale as scale


# Paper scale (spec S): Qwen2.5-VL-7B evaluated at fps 1, max_pixels
# 360x420, max_new_tokens 16 (MCQ); fine-tuning a 7B LVLM on the domains.
# About 2k visual tokens per video + the question [inferred].
# Frames at max_pixels = 360 * 420 (Qwen's smart_resize of 360 x 420:
# 336 x 420, 12 x 15 merged tokens); fps 1 (2 s per temporal patch); the
# clip length is not stated: [inferred] 16 frames (8 x 180 = 1440 tokens).
PAPER = dict(shape="qwen2_5_7b", topology="v5p:2x2x4", seq_len=4096,
             batch_size=32, sampler=(64, 4096, 16),
             vision=dict(kind="video", image_size=(336, 420), num_frames=16,
                         seconds_per_grid=2.0),
             note=scale.VL_NOTE.format(size="7B"),
             paper="spec S: Qwen2.5-VL-7B, fps 1, max_pixels 360*420, 16 "
                   "new tokens; 16 frames [inferred]")

def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False, smoke=False, seed=-1,
                         vl=False, short=False)
  c = common.base_config()
  c.experiment = "vudg"
  c.seeds = (0, 1)
  c.model = ml_collections.ConfigDict(dict(
      name="video", dim=64, num_layers=2, num_heads=4, num_kv_heads=2,
      mlp_dim=128, max_position_embeddings=64,
      vit=ml_collections.ConfigDict(dict(
          image_size=16, patch_size=4, channels=3, dim=32, num_layers=1,
          num_heads=2, mlp_dim=64)),
      video=ml_collections.ConfigDict(dict(
          num_frames=8, frame_pooling="mean", temporal_layers=1,
          temporal_heads=4, temporal_mlp_dim=128))))
  c.loss.name = "video_lm"
  # Mini-VUDG (jaxlab.data.synthetic.video_domains.generate).
  c.vudg = ml_collections.ConfigDict(dict(
      train_clips_per_domain=32, test_clips_per_domain=12, size=16,
      answer_format="text", match_option_text=True))
  c.protocols = ml_collections.ConfigDict(dict(
      lodo_domains=("surveillance", "night"),
      single_source_domains=("cartoon",),
      zero_shot=True, probes=("text_only", "single_frame")))
  c.fit = ml_collections.ConfigDict(dict(
      steps=250, batch_size=32, lr=3e-3, warmup_steps=20,
      weight_decay=0.0, eval_batch=64))
  # The release run (data.source hf / grain / tfds: the `paper` preset),
  # as zero_shot/qwen2.5vl.py: fps 1 (or `nframes` > 0 instead), at most
  # 360 * 420 pixels a frame (min_pixels: qwen-vl-utils' VIDEO_MIN_PIXELS),
  # 16 new tokens; videos under `video_root` (default data.path)/testset.
  c.release = ml_collections.ConfigDict(dict(
      fps=1.0, nframes=0, max_pixels=360 * 420, min_pixels=128 * 28 * 28,
      max_new_tokens=16, video_root=""))
  if args.tiny or args.smoke:
    c.seeds = (0,)
    c.vudg.update(train_clips_per_domain=16, test_clips_per_domain=4)
    c.model.video.num_frames = 6
    c.fit.update(steps=120, eval_batch=44)
    c.protocols.update(lodo_domains=("night",),
                       single_source_domains=("virtual",))
  if args.smoke:
    c.model.update(dim=32, num_layers=1, num_heads=2, num_kv_heads=1,
                   mlp_dim=64)
    c.model.vit.update(dim=16, mlp_dim=32)
    c.model.video.update(num_frames=4, temporal_heads=2, temporal_mlp_dim=64)
    c.vudg.update(train_clips_per_domain=4, test_clips_per_domain=2)
    c.fit.update(steps=10, batch_size=16, eval_batch=88)
    c.protocols.update(single_source_domains=(), probes=(),
                       zero_shot=False)
  if args.vl:  # the video LM on the Qwen2.5-VL architecture (issue #32)
    c.model = common.qwen_vl_prefix_model(
        c.model, kind="video", image_size=c.vudg.size,
        num_frames=c.model.video.num_frames)
  if args.seed >= 0:
    c.seeds = (args.seed,)
  if args.paper:
    scale.preset(c, PAPER)
    scale.paper_run(c, init_from="Qwen/Qwen2.5-VL-7B-Instruct",
                    path="QLGalaxy/VUDG", subset="", split="train",
                    eval_split="test")
    # Frames at the tower's input size, (H, W) = (336, 420), not the
    # miniature's 16 px squares; the paper's letter answers.
    vudg = c.vudg.to_dict()
    vudg.update(size=tuple(int(x) for x in c.model.prefix.image_size),
                answer_format="letter")
    c.vudg = ml_collections.ConfigDict(vudg)
  if args.short:
    scale.short(c)
  return c
