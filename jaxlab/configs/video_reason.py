r"""VideoReasonBench miniature (paper R): solvers and a tiny video LM.

    python -m jaxlab.main --config=jaxlab/configs/video_reason.py \
        --workdir=/tmp/vrb/full
    python -m jaxlab.main --config=jaxlab/configs/video_reason.py:tiny \
        --workdir=/tmp/vrb/tiny

Part "solvers": the full benchmark layout per seed (6 demos x 2 sizes x 2
reveals x 10 operation counts = 240 videos, 1440 questions) answered by the
oracle, noisy-perception solvers at `bench.error_rates` and the
no-reasoning (visible-state) solver, scored by the exact checker.
Part "model": the shared video LM (`config.model.name = "video"`: ViT per
frame + temporal blocks + decoder with the frames as a prefix) trained on
short Cup videos (3x3, 2-3 swaps) to answer all six skills, with a "Think:" transcript
(the revealed state and the operations) before "Final Answer:" in half of
the training examples; evaluated at each thinking budget of
`task.budgets` (0 = answer at once; the decode is cut after the budget and
"Final Answer:" forced). The default preset is the docs' table (~15 min on
2 heavily shared CPU cores); `tiny` is the test/colab version (`smoke` shrinks it
further).

`vl`: the video LM is the Qwen2.5-VL architecture
(`jaxlab.models.qwen2_vl_prefix`, `common.qwen_vl_prefix_model`: the same
decoder fields, a 2-block vision tower with 3-D patches over frame pairs,
M-RoPE with time-aligned video positions) instead of ViT + temporal
blocks; `vl,tiny,smoke` runs the model part at a few steps (the tests).
A real checkpoint loads by `init_from`.

`paper`: Qwen2.5-VL-7B-Instruct from `init_from`
(`Qwen/Qwen2.5-VL-7B-Instruct`) on VideoReasonBench as released
(`data.path`: a local copy of the release, questions/*.json of
github.com/llyx97/video_reason_bench beside videos/ unpacked from
lyx97/reasoning_videos' videos.zip; the preset names the Hub id,
`data.path=lyx97/reasoning_videos`: pass the directory), 32 frames of
at most 448 x 448 (`release`), greedy up to 4096 tokens, scored per skill
level as the release scores (`jaxlab.experiments.video_reason.
run_release`); `--config.release.budgets=0,1024` runs the thinking-budget
sweep. `short`: the same run with its budget cut
(`jaxlab.configs._scale.short`).
"""

import ml_collections

from jaxlab.configs import _scale as scale
from jaxlab.configs import common


# Paper scale (spec R): VideoReasonBench evaluates Qwen2.5-VL-7B (and
# larger) with thinking up to 1024 tokens; ~8k video + question tokens
# [inferred]. An evaluation: the forward pass and the sampler.
# Open-source models see 32 uniformly sampled frames (App. C.1, the
# "efficient" setting); the frame size is not stated: [inferred] 448 x 448
# (16 temporal patches x 256 = 4096 tokens per clip).
PAPER = dict(shape="qwen2_5_7b", topology="v5p:2x2x4", seq_len=8192,
             batch_size=16, program="eval", sampler=(16, 8192, 1024),
             vision=dict(kind="video", image_size=448, num_frames=32),
             note=scale.VL_NOTE.format(size="7B"),
             paper="spec R: Qwen2.5-VL-7B evaluation, 1024 thinking tokens; "
                   "32 frames (App. C.1), 448 x 448 [inferred]")

def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, paper=False, smoke=False,
                         vl=False, short=False)
  c = common.base_config()
  c.experiment = "video_reason"
  c.parts = "solvers,model"
  c.seeds = (0, 1, 2)       # the solvers part
  c.model_seeds = (0, 1)    # the video-LM part (the CPU-heavy one)
  # The benchmark layout (jaxlab.data.synthetic.video_reason.generate).
  c.bench = dict(demos="number,circle,cup,file,card,chip", num_ops_min=5,
                 num_ops_max=14, frame_size=16,
                 error_rates=(0.02, 0.05, 0.1, 0.2, 0.4))
  # The model's task: short videos of a few demos; frames padded to
  # model.video.num_frames (>= num_ops_max + 2).
  c.task = dict(demos="cup", sizes="cup:3", num_ops_min=2, num_ops_max=3,
                train_videos_per_cell=100, eval_videos_per_cell=4,
                frame_size=16, seq_len=384, think_fraction=0.5,
                budgets=(0, 96), answer_tokens=48)
  c.model.update(name="video", dim=32, num_layers=1, num_heads=2,
                 num_kv_heads=1, mlp_dim=96, max_position_embeddings=512)
  c.model.vit = dict(image_size=16, patch_size=4, channels=3, dim=32,
                     num_layers=1, num_heads=2, mlp_dim=64)
  c.model.video = dict(num_frames=5, frame_pooling="mean", temporal_layers=1,
                       temporal_heads=2, temporal_mlp_dim=64)
  c.train.update(steps=150, batch_size=16)
  # The whole section reaches the video LM's optimizer (cosine decay to 0
  # and clipping at 1, as the committed run was trained).
  c.optim.update(lr=3e-3, warmup_steps=20, weight_decay=0.0,
                 schedule="cosine", end_lr_frac=0.0, clip_norm=1.0)
  # The release run (data.source hf / grain / tfds: the `paper` preset),
  # as eval_qwen.sh runs eval_huggingface.py: 32 frames (or `fps` > 0
  # instead), at most 448 * 448 pixels a frame, up to 4096 new tokens;
  # `budgets` (thinking tokens, then "Final Answer:" forced and
  # `answer_tokens` more) is the thinking-budget sweep, () = one run.
  # judge: "normalized_match" (no LLM) or "llm", the release's judge run
  # by the text checkpoint `judge_from` (eval_qwen.sh: Qwen2.5-72B-Instruct).
  # min_pixels: qwen-vl-utils' VIDEO_MIN_PIXELS (128 * 28 * 28).
  c.release = dict(nframes=32, fps=0.0, max_pixels=448 * 448,
                   min_pixels=128 * 28 * 28,
                   max_new_tokens=4096, budgets=(), answer_tokens=128,
                   judge="normalized_match", judge_from="")
  if args.tiny:
    c.seeds = (0, 1)
    c.model_seeds = (0,)
    c.bench.update(num_ops_max=7, error_rates=(0.1, 0.4))
    c.task.update(train_videos_per_cell=8, eval_videos_per_cell=1,
                  budgets=(0, 96))
    c.train.update(steps=10, batch_size=8)
  if args.smoke:  # the colab test: solvers only (the model's compiles
    # alone take longer than the test budget on a loaded CPU)
    c.parts = "solvers"
    c.seeds = (0,)
    c.bench.update(demos="number,cup,chip", num_ops_max=5)
  if args.vl:  # the video LM on the Qwen2.5-VL architecture (issue #32)
    c.model = common.qwen_vl_prefix_model(
        c.model, kind="video", image_size=c.task.frame_size,
        num_frames=c.model.video.num_frames)
    if args.smoke:  # the model part too, at a few steps
      c.parts = "model"
      c.task.update(train_videos_per_cell=2, budgets=(0,))
      c.train.update(steps=4, batch_size=8)
  if args.paper:
    scale.preset(c, PAPER)
    scale.paper_run(c, init_from="Qwen/Qwen2.5-VL-7B-Instruct",
                    path="lyx97/reasoning_videos", subset="", split="test",
                    eval_split="test")
    # Frames at the tower's input size (not the miniature's 16 px), the
    # paper's thinking budget.
    c.task.frame_size = int(c.model.prefix.image_size[0])
    c.task.budgets = (0, 1024)
    c.release.max_pixels = c.task.frame_size ** 2
  if args.short:
    scale.short(c)
  return c
