"""`jaxlab.evals.vl_chat.VLChat` on images, against transformers.

A tiny random Qwen2.5-VL checkpoint (`jaxlab.testing.vl_fixtures`): the
prompt of a question about two images (with a system turn) equals what
transformers' `Qwen2_5_VLProcessor` steps make of the same messages and
images (ids with the placeholders expanded, `pixel_values`,
`image_grid_thw`), and the greedy reply equals the checkpoint's
`generate` in transformers on those inputs.
"""

import os
import shutil
import tempfile

from absl.testing import absltest
import numpy as np

from jaxlab.evals import vl_chat
from jaxlab.testing import vl_fixtures


def _image(h: int, w: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, (h, w, 3), np.uint8)


class VLChatImageTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.root = tempfile.mkdtemp()
    cls.ckpt = vl_fixtures.make_qwen2_5_vl_checkpoint(
        os.path.join(cls.root, "ckpt"))
    cls.chat = vl_chat.VLChat.load(cls.ckpt, dtype="float32")
    # Sizes that smart_resize changes (not multiples of 28), one of them
    # above max_pixels below.
    cls.images = [_image(61, 90, 0), _image(150, 40, 1)]
    cls.bounds = dict(min_pixels=28 * 28, max_pixels=84 * 84)
    cls.system = "Answer briefly."
    cls.question = "Which chart has more bars?"

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.root, ignore_errors=True)
    super().tearDownClass()

  def _reference_inputs(self):
    """What `Qwen2_5_VLProcessor.__call__` does, on transformers' parts
    (the processor class itself needs torchvision for its video half):
    its image processor on the PIL images, the tokenizer's chat template,
    each `<|image_pad|>` repeated grid.prod() // merge_size**2 times in
    the text, then tokenised."""
    import PIL.Image  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    ip = transformers.Qwen2VLImageProcessor.from_pretrained(self.ckpt)
    tok = transformers.AutoTokenizer.from_pretrained(self.ckpt)
    out = ip(images=[PIL.Image.fromarray(i) for i in self.images],
             min_pixels=self.bounds["min_pixels"],
             max_pixels=self.bounds["max_pixels"], return_tensors="np")
    messages = [
        {"role": "system", "content": self.system},
        {"role": "user", "content": [
            {"type": "image"}, {"type": "image"},
            {"type": "text", "text": self.question}]}]
    text = tok.apply_chat_template(messages, tokenize=False,
                                   add_generation_prompt=True)
    pad = vl_chat.IMAGE_PAD
    parts = text.split(pad)
    self.assertLen(parts, len(self.images) + 1)
    counts = [int(np.prod(g)) // ip.merge_size ** 2
              for g in out["image_grid_thw"]]
    text = parts[0] + "".join(pad * n + p for n, p in zip(counts, parts[1:]))
    return {"input_ids": tok(text)["input_ids"],
            "pixel_values": out["pixel_values"],
            "image_grid_thw": out["image_grid_thw"]}

  def test_prompt_and_pixels_are_the_processors(self):
    want = self._reference_inputs()
    ids, mm = self.chat.image_prompt(self.images, self.question,
                                     system=self.system, **self.bounds)
    self.assertEqual(ids, want["input_ids"])
    np.testing.assert_array_equal(mm["image_grid_thw"],
                                  want["image_grid_thw"])
    # Resize + rescale + normalise in float32 on both sides: a few ulps of
    # values of magnitude up to (1 - 0.41) / 0.26 ~ 2.3.
    np.testing.assert_allclose(mm["pixel_values"],
                               want["pixel_values"], rtol=0,
                               atol=2.3 * 8 * np.finfo(np.float32).eps)

  def test_reply_is_the_checkpoints_greedy_generation(self):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    ids, mm = self.chat.image_prompt(self.images, self.question,
                                     system=self.system, **self.bounds)
    ref = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(
        self.ckpt, attn_implementation="eager").eval()
    img = self.chat.tokenizer.token_id(vl_chat.IMAGE_PAD)
    x = torch.tensor([ids])
    with torch.no_grad():
      out = ref.generate(
          input_ids=x, attention_mask=torch.ones_like(x),
          mm_token_type_ids=(x == img).long(),
          pixel_values=torch.tensor(mm["pixel_values"]),
          image_grid_thw=torch.tensor(mm["image_grid_thw"]),
          max_new_tokens=6, do_sample=False,
          eos_token_id=list(self.chat.tokenizer.eos_ids), pad_token_id=0)
    want = out[0, len(ids):].tolist()
    text, n = self.chat.answer_images(self.images, self.question,
                                      max_new_tokens=6, system=self.system,
                                      **self.bounds)
    self.assertEqual(n, len(want))
    self.assertEqual(text, self.chat.tokenizer.decode(
        want, skip_special_tokens=True))

  def test_bad_media_is_one_clear_error(self):
    with self.assertRaisesRegex(ValueError, "media='audio'"):
      self.chat.prompt_ids("q", media="audio")


if __name__ == "__main__":
  absltest.main()
