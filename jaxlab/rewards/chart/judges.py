"""Visual judges of the MSRL chart reward: rendering vs target image -> [0, 1].

`JUDGES` is a name -> fn registry (spec F item 4's R_vis): "ssim" (default;
SSIM of Wang et al. 2004 through scikit-image), "pixel_mse" and "histogram"
(cheap baselines). An MLLM judge can be registered beside them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from jaxlab import _optional
from jaxlab import registry

Judge = Callable[[np.ndarray, np.ndarray], float]
JUDGES: registry.Registry[Judge] = registry.Registry("visual judge")
register_judge = JUDGES.register
get_judge = JUDGES.get

# ITU-R BT.601 luma weights: colour renderings are compared on luma.
_LUMA = np.array([0.299, 0.587, 0.114])


def _gray(img: np.ndarray) -> np.ndarray:
  img = np.asarray(img, np.float64)
  if img.ndim == 3:
    img = img[..., :3] @ _LUMA
  return img


def ssim(a: np.ndarray, b: np.ndarray, *, window: int = 7,
         data_range: float = 255.0) -> float:
  """Mean SSIM of two images over the valid uniform `window` x `window` patches.

  Wang et al. 2004 (Eq. 13) with K1 = 0.01, K2 = 0.03 and sample (ddof = 1)
  covariances: `skimage.metrics.structural_similarity` with
  `gaussian_weights=False, use_sample_covariance=True`, whose mean is over
  the non-border region, i.e. over the windows that fit inside the image.
  Colour inputs are converted to luma first. An image smaller than `window`
  uses the largest odd window that fits (skimage needs an odd one).

  Raises:
    ValueError: the shapes differ, or a side is shorter than 3 pixels.
  """
  x, y = _gray(a), _gray(b)
  if x.shape != y.shape:
    raise ValueError(f"ssim: shapes differ {x.shape} vs {y.shape}")
  k = min(window, *x.shape)
  k -= 1 - k % 2
  if k < 3:
    raise ValueError(f"ssim needs images of at least 3 x 3 pixels, got "
                     f"{x.shape}")
  skmetrics = _optional.require("skimage.metrics", "vision")
  return float(skmetrics.structural_similarity(
      x, y, win_size=k, gaussian_weights=False, use_sample_covariance=True,
      data_range=data_range, K1=0.01, K2=0.03))


@register_judge("ssim")
def ssim_judge(pred: np.ndarray, target: np.ndarray) -> float:
  return float(np.clip(ssim(pred, target), 0.0, 1.0))


@register_judge("pixel_mse")
def pixel_mse_judge(pred: np.ndarray, target: np.ndarray) -> float:
  """1 - mean squared error on [0, 1] pixels."""
  d = (np.asarray(pred, np.float64) - np.asarray(target, np.float64)) / 255.0
  return float(1.0 - np.mean(d * d))


@register_judge("histogram")
def histogram_judge(pred: np.ndarray, target: np.ndarray,
                    bins: int = 8) -> float:
  """Histogram intersection of the joint RGB colour histograms."""
  def hist(img):
    q = (np.asarray(img)[..., :3].astype(np.int64) * bins) // 256
    idx = (q[..., 0] * bins + q[..., 1]) * bins + q[..., 2]
    h = np.bincount(idx.ravel(), minlength=bins ** 3).astype(np.float64)
    return h / h.sum()
  return float(np.minimum(hist(pred), hist(target)).sum())
