"""A tiny random Qwen2.5-VL checkpoint as transformers saves it, and videos.

    make_qwen2_5_vl_checkpoint(dir)   # weights + tokenizer + processor
    write_mp4(path, frames, fps=2.0)  # a video file (imageio + ffmpeg)

The tokenizer is a byte-level BPE with Qwen2.5-VL's special tokens
(`<|im_start|>`, `<|im_end|>`, `<|vision_start|>`, `<|vision_end|>`,
`<|image_pad|>`, `<|video_pad|>`) and Qwen2-VL's chat template (the
`chat_template` of Qwen/Qwen2.5-VL-7B-Instruct's tokenizer_config.json: a
default system turn, a video content item rendered as
`<|vision_start|><|video_pad|><|vision_end|>`); preprocessor_config.json
carries the processor's patch sizes and pixel bounds.
"""

from __future__ import annotations

import json
import os

import numpy as np

from jaxlab.testing import tokenizer_fixtures

QWEN2_VL_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}"
    "{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or "
    "'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>",
            "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>")


def make_qwen_vl_tokenizer(path: str, *, vocab_size: int = 400) -> str:
  """A byte-level BPE with Qwen2.5-VL's specials and chat template."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  from tokenizers import decoders, models, pre_tokenizers, trainers  # pylint: disable=g-import-not-at-top,g-multiple-import
  import transformers  # pylint: disable=g-import-not-at-top
  os.makedirs(path, exist_ok=True)
  tok = tokenizers.Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=vocab_size, special_tokens=list(SPECIALS),
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(list(tokenizer_fixtures.CORPUS) * 4,
                          trainer=trainer)
  fast = transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, eos_token="<|im_end|>",
      pad_token="<|endoftext|>", unk_token=None)
  fast.add_special_tokens({"additional_special_tokens": list(SPECIALS[3:])})
  fast.chat_template = QWEN2_VL_TEMPLATE
  fast.save_pretrained(path)
  return path


def make_qwen2_5_vl_checkpoint(path: str, *, vocab_size: int = 416,
                               seed: int = 0, init_std: float = 0.05,
                               patch_size: int = 14) -> str:
  """Tokenizer + preprocessor config + a tiny random
  `Qwen2_5_VLForConditionalGeneration` (transformers' save_pretrained)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  make_qwen_vl_tokenizer(path)
  tok = transformers.AutoTokenizer.from_pretrained(path)
  ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
  cfg = transformers.Qwen2_5_VLConfig(
      text_config=dict(
          vocab_size=vocab_size, hidden_size=32, intermediate_size=48,
          num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
          rms_norm_eps=1e-6, max_position_embeddings=4096,
          bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
          rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                           "mrope_section": [2, 3, 3]},
          tie_word_embeddings=False),
      vision_config=dict(
          depth=2, hidden_size=16, intermediate_size=24, num_heads=2,
          patch_size=patch_size, temporal_patch_size=2,
          spatial_merge_size=2, window_size=4 * patch_size,
          out_hidden_size=32, fullatt_block_indexes=[1],
          tokens_per_second=2, in_channels=3),
      image_token_id=ids["<|image_pad|>"],
      video_token_id=ids["<|video_pad|>"],
      vision_start_token_id=ids["<|vision_start|>"],
      vision_end_token_id=ids["<|vision_end|>"])
  torch.manual_seed(seed)
  model = transformers.Qwen2_5_VLForConditionalGeneration(cfg)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name or "ln_q" in name:
        continue
      p.normal_(0.0, init_std)
  model.save_pretrained(path)
  with open(os.path.join(path, "preprocessor_config.json"), "w") as f:
    json.dump({"image_processor_type": "Qwen2VLImageProcessor",
               "patch_size": patch_size, "temporal_patch_size": 2,
               "merge_size": 2, "min_pixels": 4 * patch_size ** 2,
               "max_pixels": 64 * 64 * patch_size ** 2,
               "image_mean": [0.48145466, 0.4578275, 0.40821073],
               "image_std": [0.26862954, 0.26130258, 0.27577711]}, f)
  return path


def write_mp4(path: str, frames: np.ndarray, fps: float = 2.0) -> str:
  """uint8 frames `[F, H, W, 3]` as an mp4 (lossless libx264rgb)."""
  # pylint: disable-next=g-import-not-at-top
  from jaxlab.data.synthetic.video_reason import io as vr_io
  vr_io.write_frames(path, np.asarray(frames, np.uint8), fps=fps)
  return path
