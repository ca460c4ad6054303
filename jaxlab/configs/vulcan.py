r"""Vulcan class-specific ViT pruning miniature (paper O, papers/O-S.md).

    python -m jaxlab.main --config=jaxlab/configs/vulcan.py --workdir=/tmp/vulcan
    python -m jaxlab.main --config=jaxlab/configs/vulcan.py:tiny --workdir=/tmp/v

A ViT classifier is pre-trained on all 10 classes of scikit-learn's digits,
then compressed for the target classes `target_classes` (the 10-way head is
kept, O.1) at each pruning rate R of `rates`: Vulcan (score, cluster,
post-train with the collapse and rank regularisers, prune), and at Vulcan's
exact widths the baselines magnitude and Taylor (scores on S, prune, fine-
tune on S) and a generic one (Taylor on all classes, fine-tuned on all
classes); plus the unpruned model fine-tuned on S. The default preset is
the docs miniature (3 seeds; `seed=N` runs one of them, so seeds can run
as separate processes merged by `jaxlab.experiments.report --add`); `tiny` is the
CPU test/colab version, `smoke` an even shorter one for the colab test. Steps and lr are [inferred] for the
tiny model (the code's 3000-6000 steps at lr 1e-4 are for DeiT).

`paper`: DeiT-B/16 at 224 px (`PAPER_MODEL`), pretrained, from `init_from`
(`facebook/deit-base-patch16-224`, its `preprocessor_config.json`: resize
256 bicubic, crop 224, ImageNet mean / std; ViT-B/16 is
`google/vit-base-patch16-224`, the same shape), compressed for the class
subset T1-25 (spec O.1) on ImageNet-1k through TFDS (`imagenet2012`
prepared in `data.data_dir`; train / validation), batch 256, lr 1e-4 for
the code's 3000 steps at R = 0.6 (O.4). The same run reads the Hub's copy
with `--config.data.source=hf --config.data.path=ILSVRC/imagenet-1k`, or
an image-folder / Parquet / ArrayRecord copy with `data.source=grain`
(`data.path`, `data.eval_path`; `jaxlab.data.image_rows`). Its train step
(the ViT-B classifier's, images `[256, 224, 224, 3]`) compiles for
`PAPER_TOPOLOGY` from a CPU host (`python -m jaxlab.experiments.compile
--config=vulcan:paper --topology=v5e:2x2`;
tests/experiments/vulcan_compile_test.py).
`short`: the same run with its budget cut (`jaxlab.configs._scale.short`).
"""

import ml_collections

from jaxlab.configs import _scale as scale
from jaxlab.configs import common

# Paper scale (spec O): DeiT-Base/16 at 224 px (config.json of
# facebook/deit-base-patch16-224 and google/vit-base-patch16-224: hidden
# 768, 12 layers of 12 heads, intermediate 3072, patch 16, 1000 classes),
# as `config.model` fields of "vit_classifier".
PAPER_MODEL = dict(name="vit_classifier", image_size=224, patch_size=16,
                   channels=3, dim=768, num_layers=12, num_heads=12,
                   head_dim=64, mlp_dim=3072, num_classes=1000,
                   init_std=0.02)
# Spec O.1: ImageNet sub-task T1 (25 classes).
# A TPU topology the paper preset's train step fits on (ViT-B, batch 256).
PAPER_TOPOLOGY = "v5e:2x2"
PAPER_CLASSES = (50, 62, 148, 272, 302, 306, 314, 331, 402, 408, 432, 531,
                 533, 592, 609, 713, 732, 746, 751, 905, 911, 927, 930, 981,
                 999)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  args = common.parse_arg(arg, tiny=False, smoke=False, seed=-1,
                          paper=False, short=False)
  c = common.base_config()
  c.experiment = "vulcan"
  c.seeds = (0, 1, 2)
  c.model = ml_collections.ConfigDict(dict(
      name="vit_classifier", image_size=8, patch_size=2, channels=1, dim=32,
      num_layers=2, num_heads=2, head_dim=16, mlp_dim=128, num_classes=10,
      init_std=0.02))
  c.loss.name = "classification"
  c.images = ml_collections.ConfigDict(dict(
      name="digits", eval_fraction=0.3, options=ml_collections.ConfigDict()))
  c.target_classes = (3, 5, 8)
  c.rates = (0.6, 0.8)
  # The methods compared at each rate (besides "dense" and "finetune").
  c.methods = "vulcan,magnitude,taylor,generic"
  c.pretrain = ml_collections.ConfigDict(dict(
      steps=300, batch_size=64, lr=3e-3, warmup_steps=20,
      weight_decay=0.05))
  # Post-training (Vulcan) and the baselines' fine-tuning: same steps/lr.
  c.posttrain = ml_collections.ConfigDict(dict(
      steps=60, batch_size=64, lr=1e-3, weight_decay=0.05))
  # jaxlab.compression.vulcan.VulcanConfig (rate comes from `rates`).
  c.vulcan = ml_collections.ConfigDict(dict(
      norm_type="z_score", width_multiple=8, min_width=8,
      uniform_widths=False, anchor="max_activation", collapse=True,
      rank_loss=True, rho=1.0, kmeans_iters=100))
  # Score batches (target-class images) for neuron and Taylor scores.
  c.score_batches = 2
  c.measure = ml_collections.ConfigDict(dict(batch_size=256, repeats=10))
  if args.tiny or args.smoke:
    c.seeds = (0,)
    c.rates = (0.6,)
    c.model.update(dim=32, num_layers=2, num_heads=2, head_dim=16,
                   mlp_dim=64)
    c.pretrain.update(steps=150, batch_size=64, lr=3e-3, warmup_steps=10)
    c.posttrain.update(steps=40, batch_size=64)
    c.score_batches = 1
    c.measure.update(repeats=3)
  if args.seed >= 0:   # one seed per process; merge with report --add
    c.seeds = (args.seed,)
  if args.smoke:
    c.methods = "vulcan,magnitude"
    c.pretrain.update(steps=60)
    c.posttrain.update(steps=15)
  if args.paper:
    c.model = ml_collections.ConfigDict(PAPER_MODEL)
    c.target_classes = PAPER_CLASSES
    c.mesh.update(data=1, fsdp=-1, tensor=1)
    # The backbone is pretrained: no pre-training from scratch.
    c.pretrain.steps = 0
    # The code's post-training (3000-6000 steps at lr 1e-4 for DeiT).
    c.posttrain.update(steps=3000, lr=1e-4)
    scale.paper_run(c, init_from="facebook/deit-base-patch16-224",
                    path="imagenet2012", subset="", split="train",
                    eval_split="validation")
    # ImageNet-1k as TFDS prepares it (`tfds build imagenet2012`; the
    # catalog's features image / label / file_name).
    c.data.update(source="tfds", tfds_name="imagenet2012",
                  data_dir="~/tensorflow_datasets")
    # Code defaults (O.4): batch 256; DeiT's preprocessing when the
    # checkpoint directory has no preprocessor_config.json.
    c.posttrain.batch_size = 256
    c.processor = ml_collections.ConfigDict(dict(
        size=256, crop_size=224, resample=3))
    # What the compile reads (`train.batch_size`, the step's loss).
    c.train.batch_size = 256
    c.loss.name = "classification"
  if args.short:
    scale.short(c)
  return c
