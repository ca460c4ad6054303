"""Answering a question about a video or images with a Qwen2.5-VL checkpoint.

    chat = VLChat.load(config.init_from)               # model, tokenizer,
    text = chat.answer(frames, video_fps, "What ...?",  # processor
                       nframes=32, max_pixels=448 * 448, max_new_tokens=64)
    text, n = chat.answer_images([image], "Redraw this chart in Python.",
                                 max_new_tokens=1024)

What the released evaluation scripts of VideoReasonBench
(`eval_huggingface.py`) and VUDG (`zero_shot/qwen2.5vl.py`) do with
transformers + qwen-vl-utils, on jaxlab's parts:

1. the user turn `[{"type": "video", ...}, {"type": "text", "text": q}]`
   (`{"type": "image"}` entries for images) rendered by the checkpoint's
   chat template with the generation prompt (its
   `<|vision_start|><|video_pad|><|vision_end|>` for the video,
   `<|vision_start|><|image_pad|><|vision_end|>` for each image);
2. frames chosen and sized as qwen-vl-utils' `fetch_video` does
   (`jaxlab.data.video_files`: `nframes` or `fps`, `max_pixels`), then the
   checkpoint's video processor (`jaxlab.data.vision_processor`:
   normalisation, patches, `second_per_grid_ts` = temporal patch / the
   sampled fps) and the placeholder expanded to the video's tokens;
   images through the checkpoint's image processor (`smart_resize` within
   its `min_pixels` / `max_pixels`, or the bounds the call gives, as
   qwen-vl-utils' `fetch_image` passes them);
3. greedy decoding through `jaxlab.decoding.sampler.generate(multimodal=)`
   up to `max_new_tokens` or an end-of-turn token, decoded with the special
   tokens skipped (`batch_decode(skip_special_tokens=True)`).

`VideoChat` is the same class under its first name.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

from jaxlab.data import video_files
from jaxlab.data import vision_processor
from jaxlab.decoding import sampler
from jaxlab.io import pretrained

VIDEO_PAD = "<|video_pad|>"
IMAGE_PAD = "<|image_pad|>"


def _json(path: str) -> dict[str, Any]:
  if not os.path.isfile(path):
    return {}
  with open(path) as f:
    return json.load(f)


@dataclasses.dataclass
class VLChat:
  """A Qwen2.5-VL model with its tokenizer, chat template and processor."""
  model: Any
  tokenizer: Any
  processor: vision_processor.QwenVLProcessor
  chat_template: str | None = None

  @classmethod
  def load(cls, spec: str, *, dtype: str | None = None) -> "VLChat":
    """From `config.init_from` (an HF Qwen2.5-VL directory, or a Hub id
    `jaxlab.io.pretrained` resolves)."""
    model, _ = pretrained.load(spec, dtype=dtype)
    if not hasattr(model, "multimodal_inputs"):
      raise ValueError(f"init_from={spec!r} is not a Qwen2-VL / Qwen2.5-VL "
                       "checkpoint (Qwen2_5_VLForConditionalGeneration)")
    tok = pretrained.tokenizer(spec)
    root = pretrained.tokenizer_dir(spec)
    pre = _json(os.path.join(root, "preprocessor_config.json"))
    if not pre:
      raise FileNotFoundError(
          f"{root}/preprocessor_config.json not found: the checkpoint's "
          "image/video processor settings are needed")
    video = _json(os.path.join(root, "video_preprocessor_config.json"))
    proc = vision_processor.QwenVLProcessor.from_hf(pre, video or None)
    template = None
    if not getattr(tok, "chat_template", None):  # the processor's template
      template = _json(os.path.join(root, "chat_template.json")).get(
          "chat_template")
    return cls(model, tok, proc, template)

  def prompt_ids(self, question: str, *, media: str = "video",
                 num_images: int = 1, system: str | None = None
                 ) -> list[int]:
    """The chat template's ids of a user turn: the video (`media="video"`),
    `num_images` images (`"image"`) or nothing (`"none"`), then the text;
    after a system turn when `system` is given."""
    if media == "video":
      content = [{"type": "video", "video": "video"}]
    elif media == "image":
      content = [{"type": "image", "image": f"image{i}"}
                 for i in range(int(num_images))]
    elif media == "none":
      content = []
    else:
      raise ValueError(f"media={media!r}: 'video', 'image' or 'none'")
    return self.content_ids(content + [{"type": "text", "text": question}],
                            system=system)

  def content_ids(self, content: list[dict], *, system: str | None = None
                  ) -> list[int]:
    """The chat template's ids of one user turn whose `content` is a list
    of `{"type": "text", "text": ...}` and `{"type": "image"}` items in any
    order (each image one `<|image_pad|>`, not yet expanded), after a
    system turn when `system` is given, with the generation prompt."""
    messages = [{"role": "user", "content": list(content)}]
    if system is not None:
      messages.insert(0, {"role": "system", "content": system})
    kw = {"chat_template": self.chat_template} if self.chat_template else {}
    return self.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, **kw)

  def content_prompt(self, content: list[dict], images, *,
                     min_pixels: int | None = None,
                     max_pixels: int | None = None,
                     system: str | None = None) -> tuple[list[int], dict]:
    """`image_prompt` for an interleaved user turn (`content_ids`): the
    ids with the k-th `{"type": "image"}` item's placeholder expanded to
    `images[k]`'s tokens, and the multimodal inputs (`{}` without
    images)."""
    ids = self.content_ids(content, system=system)
    if not len(images):
      return ids, {}
    mm = self.image_inputs(images, min_pixels=min_pixels,
                           max_pixels=max_pixels)
    ids = self.processor.expand_placeholders(
        ids, image_grid_thw=mm["image_grid_thw"],
        image_token_id=self.tokenizer.token_id(IMAGE_PAD), video_token_id=-1)
    return ids, mm

  def image_inputs(self, images, *, min_pixels: int | None = None,
                   max_pixels: int | None = None) -> dict[str, Any]:
    """`pixel_values`, `image_grid_thw` of a list of images (`[H, W, C]` /
    `[C, H, W]` uint8 arrays or PIL images), each resized by
    `smart_resize` within the processor's pixel bounds, or
    `min_pixels` / `max_pixels` where given."""
    bounds = {k: int(v) for k, v in (("min_pixels", min_pixels),
                                     ("max_pixels", max_pixels))
              if v is not None}
    proc = dataclasses.replace(self.processor, **bounds)
    pv, grid = proc.images(list(images))
    return {"pixel_values": pv, "image_grid_thw": grid}

  def image_prompt(self, images, question: str, *,
                   min_pixels: int | None = None,
                   max_pixels: int | None = None, system: str | None = None,
                   continuation: str = "") -> tuple[list[int], dict]:
    """(prompt ids with each image's placeholder expanded to its tokens,
    the multimodal inputs) of `question` about `images`."""
    mm = self.image_inputs(images, min_pixels=min_pixels,
                           max_pixels=max_pixels)
    ids = self.processor.expand_placeholders(
        self.prompt_ids(question, media="image", num_images=len(images),
                        system=system),
        image_grid_thw=mm["image_grid_thw"],
        image_token_id=self.tokenizer.token_id(IMAGE_PAD),
        video_token_id=-1)
    if continuation:
      ids = ids + list(self.tokenizer.encode(continuation))
    return ids, mm

  def generate(self, ids: list[int], multimodal: dict | None, *,
               max_new_tokens: int) -> tuple[str, int]:
    """Greedy reply to a prompt (up to `max_new_tokens` or an end-of-turn
    token): (its text, special tokens skipped; its number of tokens)."""
    eos = tuple(self.tokenizer.eos_ids)
    res = sampler.generate(self.model, [ids], max_new_tokens=max_new_tokens,
                           eos_id=eos[0] if eos else None,
                           stop_ids=eos[1:], pad_id=self.tokenizer.pad_id
                           or 0, multimodal=multimodal)
    out = res.tokens[0]
    return self.tokenizer.decode(out, skip_special_tokens=True), len(out)

  def answer_images(self, images, question: str, *, max_new_tokens: int,
                    min_pixels: int | None = None,
                    max_pixels: int | None = None,
                    system: str | None = None,
                    continuation: str = "") -> tuple[str, int]:
    """(the reply text, its number of generated tokens), greedy, to
    `question` about `images` (a list; one image is `[image]`)."""
    ids, mm = self.image_prompt(images, question, min_pixels=min_pixels,
                                max_pixels=max_pixels, system=system,
                                continuation=continuation)
    return self.generate(ids, mm, max_new_tokens=max_new_tokens)

  def video_inputs(self, frames: np.ndarray, video_fps: float, *,
                   fps: float | None = None, nframes: int | None = None,
                   max_pixels: int | None = None,
                   min_pixels: int | None = None) -> dict[str, Any]:
    """`pixel_values_videos`, `video_grid_thw`, `second_per_grid_ts` of a
    decoded video, its frames chosen as qwen-vl-utils does."""
    idx, sample_fps = video_files.qwen_vl_frame_indices(
        len(frames), video_fps, fps=fps, nframes=nframes)
    h, w = video_files.qwen_vl_video_size(
        len(idx), *frames.shape[1:3], max_pixels=max_pixels,
        factor=self.processor.factor,
        min_pixels=min_pixels or video_files.VIDEO_MIN_PIXELS)
    # The frames go to the processor at (h, w): its own bounds must keep it.
    proc = dataclasses.replace(self.processor, video_min_pixels=h * w,
                               video_max_pixels=h * w,
                               cap_pixels_per_frame=False)
    chosen = [vision_processor.resize(
        np.ascontiguousarray(frames[int(i)].transpose(2, 0, 1)), h, w)
              for i in idx]
    pv, grid, spg = proc.video(np.stack(chosen), fps=sample_fps)
    return {"pixel_values_videos": pv, "video_grid_thw": grid,
            "second_per_grid_ts": spg}

  def answer(self, frames: np.ndarray, video_fps: float, question: str, *,
             max_new_tokens: int, fps: float | None = None,
             nframes: int | None = None, max_pixels: int | None = None,
             min_pixels: int | None = None,
             continuation: str = "") -> tuple[str, int]:
    """(the reply text, its number of generated tokens), greedy;
    `continuation` is text the assistant turn already starts with (budget
    forcing), the reply is what follows it."""
    mm = self.video_inputs(frames, video_fps, fps=fps, nframes=nframes,
                           max_pixels=max_pixels, min_pixels=min_pixels)
    vid = self.tokenizer.token_id(VIDEO_PAD)
    ids = self.processor.expand_placeholders(
        self.prompt_ids(question), video_grid_thw=mm["video_grid_thw"],
        image_token_id=-1, video_token_id=vid)
    if continuation:
      ids = ids + list(self.tokenizer.encode(continuation))
    return self.generate(ids, mm, max_new_tokens=max_new_tokens)


VideoChat = VLChat
