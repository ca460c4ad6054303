r"""StableToken miniature (paper E): noise-robust speech tokens from audio.

    python -m jaxlab.main --config=jaxlab/configs/stabletoken.py:tiny \
        --workdir=/tmp/stabletoken          # the docs table, CPU minutes
    python -m jaxlab.main --config=jaxlab/configs/stabletoken.py --workdir=D

Presets:
  tiny   short utterances, a 32-wide tokenizer, 3 seeds (the miniature).
  smoke  with tiny: 1 seed, a few steps, 2 variants (tests and the colab).
  vq     also train the VQ baseline.
  seed=S run only seed S (several workdirs merge with
         `python -m jaxlab.experiments.report --add stabletoken DIR1 DIR2 ...`).

Variants (config.variants, a tuple of names of
`jaxlab.objectives.stabletoken_train.VARIANTS`): full (Voting-LFQ n=5, 3:2
clean:noisy routing, consensus loss), no_consensus (lambda1 = 0),
no_routing (all branches read the same input: the perturbed copy with
probability loss.augment_prob, else clean), single_branch (plain LFQ n=1
with the same augmentation), vq (VQ with the same augmentation).

`paper`: the real run (`jaxlab.experiments.stabletoken.run_real`): the
tokenizer at its released size (`PAPER_MODEL`: Whisper-large-v3's
encoder, D = 1280, 32 blocks of 20 heads, 128 mel bins, with Voting-LFQ
n = 5, 13 bits after block 16 and 2x pooling to 25 Hz; spec E.1), its
encoder read from `init_from` (`openai/whisper-large-v3`, or a local
copy), on LibriSpeech as released (`data.path=openslr/librispeech_asr`,
`data.subset=clean`, `train.100` / `test`; or TFDS with
`--config.data.source=tfds --config.data.path=librispeech
--config.data.data_dir=D --config.data.split=train_clean100
--config.data.eval_split=test_clean`; or the FLAC directories with
`--config.data.source=audio --config.data.path=LibriSpeech/`), AdamW max
lr 1.5e-5 with 1000 warm-up steps (spec E.5). `config.model` and
`config.scale` describe the same tokenizer for the AOT compile
(`python -m jaxlab.experiments.compile --config=stabletoken:paper`:
`PAPER_WHISPER`, `PAPER_SCALE`). `short`: the same run with its budget cut
(`jaxlab.configs._scale.short`).
"""

import ml_collections

from jaxlab.configs import _scale as scale
from jaxlab.configs import common
from jaxlab.data import audio

# Paper scale (spec E.1): the speech tokenizer at its released size, the
# encoder of Whisper-large-v3 (config.json: d_model 1280, 32 encoder layers
# of 20 heads, encoder_ffn_dim 5120, num_mel_bins 128; its conv stem halves
# 100 Hz mel frames to 50 Hz) split at block 16 by Voting-LFQ (n = 5 voters
# of 13 bits, 3 clean : 2 noisy), average-pooled 2x to 25 Hz; blocks 17-32
# above it. `config.tokenizer` fields (`SpeechTokenizerConfig`).
PAPER_MODEL = dict(dim=1280, num_heads=20, mlp_dim=5120, lower_layers=16,
                   upper_layers=16, quantizer="voting_lfq", n_voters=5,
                   bits=13, num_clean=3, conv_stride=2, pool=2)
# Whisper's log-mel features (WhisperFeatureExtractor: 128 bins, 25 ms
# window, 10 ms hop at 16 kHz).
PAPER_FEATURES = dict(n_mels=128, n_fft=400, hop=160)
# The same tokenizer as `config.model` ("whisper_tokenizer",
# `jaxlab.models.whisper`): what `python -m jaxlab.experiments.compile
# --config=stabletoken:paper` builds (no weights read): Whisper-large-v3's
# encoder (config.json: max_source_positions 1500, i.e. 3000 mel frames =
# 30 s windows) with Voting-LFQ after block 16 and a character CTC head
# (29 classes, `jaxlab.data.librispeech.CHARS` + blank).
PAPER_WHISPER = dict(
    name="whisper_tokenizer", num_mel_bins=128, d_model=1280,
    encoder_layers=32, encoder_attention_heads=20, encoder_ffn_dim=5120,
    max_source_positions=1500, quantize_after=16, vocab_size=29, n_voters=5,
    bits=13, num_clean=3, dtype="bfloat16", param_dtype="float32")
# The compiled step: one 30 s window per example, 32 per step, on 16 v5p
# chips (FSDP over all of them).
PAPER_SCALE = dict(
    shape="whisper_large_v3", topology="v5p:2x2x4", num_slices=1,
    paper="StableToken spec E.1, E.5 (papers/A-G.md)",
    note=("Whisper-large-v3's encoder with Voting-LFQ and a CTC head (the "
          "paper's ASR decoder is not in the step); seq_len counts mel "
          "frames"),
    program="train", loss="stabletoken")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  a = common.parse_arg(arg, tiny=False, smoke=False, vq=False, seed=-1,
                       paper=False, short=False)
  c = common.base_config()
  c.experiment = "stabletoken"
  c.seeds = (0, 1, 2)
  c.variants = ("full", "no_consensus", "no_routing", "single_branch")
  if a.vq:
    c.variants += ("vq",)
  # Spec miniature: 20 phones of 2-6 token frames (jaxlab.data.synthetic
  # .speech.SpeechConfig fields).
  c.speech = ml_collections.ConfigDict({
      "num_phones": 16, "min_phones": 20, "max_phones": 20,
      "min_frames": 2, "max_frames": 6, "inventory_seed": 1234,
  })
  c.utterances = ml_collections.ConfigDict({
      "train_utterances": 1024, "eval_utterances": 128,
      "noisy_copies": 2,          # perturbed copies per training utterance
      "train_clips": 8, "eval_clips": 8,   # held-out clips for evaluation
  })
  c.features = ml_collections.ConfigDict({
      "n_mels": 40, "n_fft": 400, "hop": 160, "pad_mode": "constant"})
  # Spec E.3 training ranges and E.6 evaluation settings.
  c.perturb = ml_collections.ConfigDict({
      "train": {k: list(v) for k, v in audio.TRAIN_PERTURBATIONS.items()},
      "eval": dict(audio.EVAL_PERTURBATIONS),
  })
  # The tokenizer (model registry "speech_tokenizer"); `config.model` keeps
  # the base decoder section, unused here.
  c.tokenizer = ml_collections.ConfigDict({
      "name": "speech_tokenizer", "dim": 64, "num_heads": 4, "mlp_dim": 128,
      "lower_layers": 2, "upper_layers": 1, "quantizer": "voting_lfq",
      "n_voters": 5, "bits": 8, "num_clean": 3, "codebook_scale": 1.0,
      "vq_codebook_size": 256, "vq_beta": 0.25,
  })
  c.loss = ml_collections.ConfigDict({
      "name": "stabletoken",
      "routing": "noise_aware",   # set per variant
      "consensus_weight": 0.25,   # lambda1
      "commit_weight": 0.25,      # lambda2
      "entropy_weight": 1.0,      # lambda3
      "entropy_temperature": 0.01,
      "sample_entropy_weight": 1.0,
      "batch_entropy_weight": 1.0,
      "consensus_stop_gradient": True,   # [code]; the paper does not say
      # [inferred] plain augmentation: the share of perturbed inputs equals
      # the noisy branches' share under 3:2 routing.
      "augment_prob": 0.4,
  })
  c.optim.update(lr=2e-3, warmup_steps=50, schedule="cosine",
                 weight_decay=0.01, clip_norm=1.0, end_lr_frac=0.05,
                 b2=0.98)
  c.train.update(steps=1500, batch_size=32, log_every=50, eval_every=0,
                 checkpoint_every=0, keep_checkpoints=1,
                 async_checkpoint=False, tensorboard=False, peak_flops=-1.0)
  if a.tiny:
    c.speech.update(num_phones=8, min_phones=6, max_phones=8, min_frames=2,
                    max_frames=4)
    c.utterances.update(train_utterances=384, eval_utterances=64, noisy_copies=2,
                  train_clips=4, eval_clips=4)
    c.tokenizer.update(dim=32, num_heads=2, mlp_dim=64)
    c.train.update(steps=500, batch_size=16)
    c.optim.update(lr=3e-3, warmup_steps=30)
    if a.smoke:
      c.seeds = (0,)
      c.variants = ("full",)
      c.speech.update(min_phones=3, max_phones=4, max_frames=3)
      c.utterances.update(train_utterances=32, eval_utterances=8, noisy_copies=1,
                    train_clips=2, eval_clips=2)
      c.tokenizer.update(dim=16, mlp_dim=32, lower_layers=1, bits=4)
      c.features.n_mels = 16
      c.train.update(steps=4, batch_size=8)
  if a.paper:
    c.tokenizer.update(**PAPER_MODEL)
    c.features.update(**PAPER_FEATURES)
    c.optim.update(lr=1.5e-5, warmup_steps=1000, weight_decay=0.01,
                   clip_norm=1.0)
    c.mesh.update(data=1, fsdp=-1, tensor=1)
    c.model = ml_collections.ConfigDict(PAPER_WHISPER)
    c.scale = ml_collections.ConfigDict(PAPER_SCALE)
    c.train.seq_len = 2 * PAPER_WHISPER["max_source_positions"]
    # noise_dir: a directory of real noise clips (e.g. ESC-50's audio/) for
    # the `clip` perturbation; "" leaves it out.
    scale.paper_run(c, init_from="openai/whisper-large-v3",
                    path="openslr/librispeech_asr", subset="clean",
                    split="train.100", eval_split="test", noise_dir="")
  if a.seed >= 0:  # one seed per process (report --add merges workdirs)
    c.seeds = (a.seed,)
  if a.short:
    scale.short(c)
  return c
